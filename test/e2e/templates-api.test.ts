// The template build API through the e2b SDK and raw HTTP: request validation, COPY uploads, build status and
// logs, failures, concurrency, the layer cache, listing and deleting, and builds cut short by a restart.
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BuildError, Sandbox, Template, type LogEntry, type TemplateBuilder } from 'e2b';
import { deleteTemplatesNamed, describeNode } from './fixture.js';

const BASE = 'oci:/var/cache/aenv/images/base:latest';
/** Per run, so that the node's layer cache (kept in the test node's home) never serves an earlier run. */
const RUN = `r${Date.now().toString(36)}`;
const name = (n: string) => `${RUN}-${n}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface StatusBody {
  status: 'waiting' | 'building' | 'ready' | 'error';
  logs: string[];
  logEntries: { timestamp: string; level: string; message: string; step?: string }[];
  reason?: { message: string; step?: string };
}

describe('template build API', () => {
  const { server } = describeNode({ name: 'tapi' });
  const ctxDirs: string[] = [];

  afterAll(async () => {
    await deleteTemplatesNamed(server, RUN);
    for (const d of ctxDirs) rmSync(d, { recursive: true, force: true });
  });

  async function requestBuild(n: string): Promise<string> {
    const r = await server.api('POST', '/v3/templates', { name: n, cpuCount: 1, memoryMB: 512 });
    expect(r.status).toBe(202);
    return r.body.templateID as string;
  }

  async function waitDone(id: string): Promise<StatusBody> {
    for (let i = 0; i < 600; i++) {
      const s = await server.api('GET', `/templates/${id}/builds/${id}/status`);
      if (s.body.status === 'ready' || s.body.status === 'error') return s.body;
      await sleep(200);
    }
    throw new Error(`build ${id} did not finish`);
  }

  it('validates build requests like the reference', async () => {
    const bad = async (body: unknown, re: RegExp) => {
      const r = await server.api('POST', '/v3/templates', body);
      expect(r.status).toBe(400);
      expect(r.body.code).toBe(400);
      expect(r.body.message).toMatch(re);
    };
    // Tags are supported (template-tags.test.ts); malformed ones are refused by name.
    await bad({ name: 'x:bad tag' }, /^invalid tag "bad tag"/);
    await bad({ name: name('tags'), tags: ['v1', '-x'] }, /^invalid tag "-x"/);
    await bad({ name: 'has space' }, /invalid template name/);
    await bad({}, /name is required/);
    await bad({ name: name('cpu'), cpuCount: 0 }, /^cpuCount must be greater than 0$/);
    await bad({ name: name('mem'), memoryMB: 64 }, /^memoryMB must be at least 128$/);

    const first = await server.api('POST', '/v3/templates', {
      name: name('dup'),
      cpuCount: 1,
      memoryMB: 256,
    });
    expect(first.status).toBe(202);
    expect(first.body).toEqual({
      templateID: first.body.templateID,
      buildID: first.body.templateID,
      public: true,
      names: [name('dup')],
      tags: ['default'],
      aliases: [name('dup')],
    });
    const id = first.body.templateID as string;
    await bad({ name: name('dup') }, /already used/);

    const build = (path: string, body: unknown) => server.api('POST', path, body);
    const other = '01936f8e-72f5-7000-8000-000000000001';
    expect((await build(`/v2/templates/${id}/builds/${other}`, {})).body.message).toBe(
      'templateID and buildID must match in AgentENV compatibility mode',
    );
    expect((await build('/v2/templates/abc/builds/abc', {})).status).toBe(400);
    expect((await build(`/v2/templates/${other}/builds/${other}`, {})).status).toBe(404);
    const both = await build(`/v2/templates/${id}/builds/${id}`, { fromImage: BASE, fromTemplate: 'base' });
    expect(both.body).toEqual({ code: 400, message: 'cannot specify both fromImage and fromTemplate' });
    const noUpload = await build(`/v2/templates/${id}/builds/${id}`, {
      fromImage: BASE,
      steps: [{ type: 'COPY', args: ['a', '/a'], filesHash: 'f'.repeat(64) }],
    });
    expect(noUpload.body.message).toMatch(/were not uploaded/);
    const noParent = await build(`/v2/templates/${id}/builds/${id}`, { fromTemplate: `${RUN}-nothing` });
    expect(noParent.body.message).toMatch(/fromTemplate .* not found/);
    // Still waiting after all those refusals: a valid request starts it, exactly once.
    const ok = await fetch(`${server.url}/v2/templates/${id}/builds/${id}`, {
      method: 'POST',
      headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ fromImage: BASE, steps: [{ type: 'RUN', args: [`echo ${RUN}`] }] }),
    });
    expect(ok.status).toBe(202);
    expect(ok.headers.get('content-length')).toBe('0');
    expect((await build(`/v2/templates/${id}/builds/${id}`, { fromImage: BASE })).body.message).toMatch(
      /already built/,
    );
    expect((await waitDone(id)).status).toBe('ready');
    await expect(Template.build(Template().fromImage(BASE), name('dup'))).rejects.toThrow(BuildError);
  });

  it('uploads COPY files through a signed link and knows them afterwards', async () => {
    const id = await requestBuild(name('files'));
    const hash = createHash('sha256').update(RUN).digest('hex');
    expect((await server.api('GET', `/templates/${id}/files/nothex`)).status).toBe(400);
    expect((await server.api('GET', `/templates/${RUN}-none/files/${hash}`)).status).toBe(404);
    const link = await server.api('GET', `/templates/${id}/files/${hash}`);
    expect(link.status).toBe(201);
    expect(link.body.present).toBe(false);
    const url = new URL(link.body.url as string);
    expect(url.origin).toBe(server.url);
    expect(url.pathname).toBe(`/templates/${id}/files/${hash}/upload`);

    const ctx = mkdtempSync(join(tmpdir(), 'tapi-'));
    ctxDirs.push(ctx);
    writeFileSync(join(ctx, 'f.txt'), 'content\n');
    const tarPath = join(ctx, 'up.tar.gz');
    execFileSync('tar', ['-czf', tarPath, '-C', ctx, 'f.txt']);
    const tarBytes = execFileSync('cat', [tarPath]);
    const put = (u: string, body: Uint8Array | string) => fetch(u, { method: 'PUT', body });
    expect((await put(`${server.url}${url.pathname}`, tarBytes)).status).toBe(403);
    expect((await put(`${server.url}${url.pathname}?token=1.${'0'.repeat(64)}`, tarBytes)).status).toBe(403);
    const notTar = await put(url.toString(), 'plain text, not an archive');
    expect(notTar.status).toBe(400);
    expect(((await notTar.json()) as { message: string }).message).toMatch(/not a valid tar/);
    expect((await put(url.toString(), tarBytes)).status).toBe(200);
    expect((await server.api('GET', `/templates/${id}/files/${hash}`)).body).toEqual({ present: true });
    await server.api('DELETE', `/templates/${id}`);
  });

  it('reports a failing step as the SDK expects, with logs and the step', async () => {
    const entries: LogEntry[] = [];
    const t = Template().fromImage(BASE).runCmd(`echo ${RUN} fine`).runCmd('echo about to fail >&2; exit 3');
    const err = await Template.build(t, name('fail'), { onBuildLogs: (e) => entries.push(e) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BuildError);
    // E2B's wording (the e2b SDK's own tests match it); the output is in the log.
    expect((err as Error).message).toBe(
      "failed to run command 'echo about to fail >&2; exit 3': exit status 3",
    );
    const messages = entries.map((e) => e.message);
    expect(messages).toContain('about to fail');
    expect(messages).toContain(`${RUN} fine`);
    expect(messages).toContain('[2/2] RUN echo about to fail >&2; exit 3');

    const rec = await server.api('GET', `/templates/${name('fail')}`);
    expect(rec.body.builds[0].status).toBe('error');
    const id = rec.body.templateID as string;
    const s = await server.api('GET', `/templates/${id}/builds/${id}/status`);
    expect(s.body.status).toBe('error');
    expect(s.body.reason).toEqual({ message: (err as Error).message, step: '2' });
    expect(s.body.logEntries.length).toBe(s.body.logs.length);
    const errors = await server.api('GET', `/templates/${id}/builds/${id}/status?level=error`);
    expect(errors.body.logEntries.map((e: { level: string }) => e.level)).toEqual(['error']);
    expect(errors.body.logEntries[0]).toMatchObject({ step: '2' });
    const page = await server.api('GET', `/templates/${id}/builds/${id}/status?logsOffset=1&limit=2`);
    expect(page.body.logEntries).toEqual(s.body.logEntries.slice(1, 3));
    expect((await server.api('GET', `/templates/${id}/builds/${RUN}/status`)).status).toBe(404);
    expect((await server.api('GET', `/templates/${id}/builds/${id}/status?level=loud`)).status).toBe(400);
  });

  it("reports a RUN step envd refuses in E2B's words (the SDK's own runCmd test)", async () => {
    const t = Template().fromImage(BASE).skipCache().runCmd('whoami', { user: 'root123' });
    await expect(Template.build(t, name('nouser'))).rejects.toThrow(
      "failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123'",
    );
  });

  it('streams logs while the build runs', async () => {
    const t = Template()
      .fromImage(BASE)
      .runCmd(`for i in 1 2 3 4 5 6; do echo ${RUN}-tick-$i; sleep 1; done`);
    const info = await Template.buildInBackground(t, name('stream'));
    let offset = 0;
    let seenWhileBuilding = false;
    for (let i = 0; i < 300 && !seenWhileBuilding; i++) {
      const s = await Template.getBuildStatus(info, { logsOffset: offset });
      offset += s.logEntries.length;
      if (s.status === 'building' && s.logEntries.some((e) => e.message === `${RUN}-tick-1`))
        seenWhileBuilding = true;
      if (s.status === 'ready' || s.status === 'error') break;
      await sleep(100);
    }
    expect(seenWhileBuilding).toBe(true);
    expect((await waitDone(info.templateId)).status).toBe('ready');
  });

  it('runs builds concurrently up to max_concurrent_builds and queues the rest', async () => {
    const t = (i: number) => Template().fromImage(BASE).runCmd(`echo ${RUN}-${i}; sleep 3`);
    const builds = await Promise.all(
      [1, 2, 3].map((i) => Template.buildInBackground(t(i), name(`conc${i}`))),
    );
    const done = await Promise.all(builds.map((b) => waitDone(b.templateId)));
    expect(done.map((d) => d.status)).toEqual(['ready', 'ready', 'ready']);
    // Server-side timestamps: from the first step to the capture, never more than two builds overlap.
    const spans = done.map((d) => {
      const at = (re: RegExp) => Date.parse(d.logEntries.find((e) => re.test(e.message))!.timestamp);
      return [at(/^\[1\/1\] RUN/), at(/^capturing the template/)] as const;
    });
    for (const [start] of spans)
      expect(spans.filter(([s, e]) => s <= start && start < e).length).toBeLessThanOrEqual(2);
    expect(
      done.some((d) =>
        d.logEntries.some((e: { message: string }) => /^waiting for a build slot/.test(e.message)),
      ),
    ).toBe(true);
    for (const b of builds)
      expect((await server.api('GET', `/templates/aliases/${b.name}`)).body.templateID).toBe(b.templateId);
  });

  it('reuses cached steps on a rebuild unless told not to', async () => {
    const steps = (t: TemplateBuilder) =>
      t.runCmd(`echo ${RUN} > /tmp/one`).setEnvs({ K: 'v' }).runCmd('cat /tmp/one');
    const logs = async (n: string, t: TemplateBuilder) => {
      const entries: string[] = [];
      await Template.build(t, name(n), { onBuildLogs: (e) => entries.push(e.message) });
      return entries;
    };
    const first = await logs('cache1', steps(Template().fromImage(BASE)));
    expect(first.filter((m) => m.startsWith('CACHED'))).toEqual([]);
    expect(first).toContain(RUN);
    const again = await logs('cache2', steps(Template().fromImage(BASE)));
    expect(again.filter((m) => m.startsWith('CACHED'))).toEqual([
      `CACHED [1/3] RUN echo ${RUN} > /tmp/one`,
      'CACHED [2/3] ENV K v',
      'CACHED [3/3] RUN cat /tmp/one',
    ]);
    expect(again).toContain('cache: reused the result of 3 of 3 steps');
    expect(again).not.toContain(RUN);
    const prefix = await logs('cache3', steps(Template().fromImage(BASE)).runCmd('echo extra'));
    expect(prefix).toContain('cache: reused the result of 3 of 4 steps');
    expect(prefix).toContain('extra');
    const forced = await logs('cache4', steps(Template().skipCache().fromImage(BASE)));
    expect(forced.filter((m) => m.startsWith('CACHED'))).toEqual([]);
    expect(forced).toContain('cache: skipped (force)');
  });

  it('lists, shows, resolves and deletes templates', async () => {
    const ids: string[] = [];
    for (const n of ['list1', 'list2']) ids.push(await requestBuild(name(n)));
    const page1 = await server.api('GET', '/v2/templates?limit=1');
    expect(page1.body).toHaveLength(1);
    expect(page1.body[0].templateID).toBe(ids[1]);
    const token = page1.headers.get('x-next-token');
    expect(token).toBeTruthy();
    const page2 = await server.api('GET', `/v2/templates?limit=1&nextToken=${token}`);
    expect(page2.body[0].templateID).toBe(ids[0]);
    expect(page2.body[0]).toMatchObject({
      buildID: ids[0],
      names: [name('list1')],
      public: true,
      cpuCount: 1,
      memoryMB: 512,
      buildStatus: 'waiting',
      envdVersion: 'unknown',
      spawnCount: 0,
    });
    expect((await server.api('GET', '/v2/templates?nextToken=!!')).status).toBe(400);
    const all = await server.api('GET', '/templates');
    expect(all.body.map((t: { templateID: string }) => t.templateID)).toEqual(expect.arrayContaining(ids));

    const one = await server.api('GET', `/templates/${name('list1')}`);
    expect(one.body).toMatchObject({
      templateID: ids[0],
      names: [name('list1')],
      builds: [{ buildID: ids[0], status: 'waiting' }],
    });
    expect((await server.api('GET', `/templates/${ids[0]}?nextToken=x`)).body.builds).toEqual([]);
    expect((await server.api('GET', '/templates/has.dot')).status).toBe(400);

    expect((await server.api('GET', `/templates/aliases/${name('list1')}`)).body).toEqual({
      templateID: ids[0],
      public: false,
    });
    expect((await server.api('GET', `/templates/aliases/${RUN}-nope`)).body).toEqual({
      code: 404,
      message: `template alias not found: ${RUN}-nope`,
    });
    expect((await server.api('GET', '/templates/aliases/bad.alias')).status).toBe(400);
    expect(await Template.exists(name('list1'))).toBe(true);
    expect(await Template.exists(`${RUN}-nope`)).toBe(false);

    expect((await server.api('DELETE', `/templates/${name('list1')}`)).status).toBe(204);
    // Deleted by its name above: gone by its id too (E2B: 404).
    expect((await server.api('DELETE', `/templates/${ids[0]}`)).status).toBe(404);
    expect((await server.api('GET', `/templates/${ids[0]}`)).status).toBe(404);
    expect(await Template.exists(name('list1'))).toBe(false);

    const sbx = await Sandbox.create('base', { timeoutMs: 60_000 });
    try {
      const refused = await server.api('DELETE', '/templates/base');
      expect(refused.status).toBe(409);
      expect(refused.body.message).toMatch(/used by 1 sandbox on this node/);
    } finally {
      await sbx.kill();
    }
  });

  it('deleting a template stops its build and removes the build sandbox', async () => {
    const info = await Template.buildInBackground(
      Template().fromImage(BASE).runCmd(`echo ${RUN}-del; sleep 120`),
      name('del'),
    );
    await untilLog(info.templateId, `${RUN}-del`);
    expect(buildSandboxDirs()).toHaveLength(1);
    expect((await server.api('DELETE', `/templates/${info.templateId}`)).status).toBe(204);
    expect(buildSandboxDirs()).toEqual([]);
    expect((await server.api('GET', `/templates/${info.templateId}`)).status).toBe(404);
    expect(
      (await server.api('GET', `/templates/${info.templateId}/builds/${info.templateId}/status`)).status,
    ).toBe(404);
    expect(await Template.exists(name('del'))).toBe(false);
  });

  it('ends a build cut short by a crash or a shutdown in error, leaving no build sandbox', async () => {
    const slow = (n: string) => Template().fromImage(BASE).runCmd(`echo ${RUN}-${n}; sleep 120`);
    const crashed = await Template.buildInBackground(slow('crash'), name('crash'));
    await untilLog(crashed.templateId, `${RUN}-crash`);
    await server.crash();
    await server.restart();
    const after = await server.api(
      'GET',
      `/templates/${crashed.templateId}/builds/${crashed.templateId}/status`,
    );
    expect(after.body.status).toBe('error');
    expect(after.body.reason.message).toMatch(/interrupted: the aenv server on node .* stopped while it ran/);
    expect(after.body.logEntries.map((e: { message: string }) => e.message)).toContain(`${RUN}-crash`);
    expect(buildSandboxDirs()).toEqual([]);

    const stopped = await Template.buildInBackground(slow('stop'), name('stop'));
    await untilLog(stopped.templateId, `${RUN}-stop`);
    expect(await server.stop()).toBe(0);
    await server.restart();
    const s = await server.api('GET', `/templates/${stopped.templateId}/builds/${stopped.templateId}/status`);
    expect(s.body.status).toBe('error');
    expect(s.body.reason.message).toBe('the aenv server shut down while the build was running');
    expect(buildSandboxDirs()).toEqual([]);
  });

  async function untilLog(id: string, message: string): Promise<void> {
    for (let i = 0; i < 600; i++) {
      const s = await server.api('GET', `/templates/${id}/builds/${id}/status`);
      if (s.body.logEntries.some((e: { message: string }) => e.message === message)) return;
      await sleep(100);
    }
    throw new Error(`no log "${message}"`);
  }

  function buildSandboxDirs(): string[] {
    const dir = join(server.home, 'sandboxes');
    return existsSync(dir) ? readdirSync(dir).filter((n) => n.startsWith('tb-')) : [];
  }
});
