// Fork through the real e2b SDK: one checkpoint of a running sandbox restored into N children with the same memory
// and files at the fork point, each with its own id, hostname and tokens, diverging afterwards.
import { beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, SandboxNotFoundError } from 'e2b';
import {
  ENVD_PORT,
  counterPasses,
  proxyFetch,
  readWorkload,
  startWorkload,
  workloadFetch,
  type Workload,
} from './harness.js';
import { describeNode } from './fixture.js';
import { randomUUID } from 'node:crypto';

describe('fork through the e2b SDK', () => {
  const { server } = describeNode({ name: 'forkx' });
  let source: Sandbox;
  let sourceToken: string;
  let w: Workload;

  const info = async (id: string) => (await server.api('GET', `/sandboxes/${id}`)).body;
  /** An envd call that needs the sandbox's access token, through the proxy. */
  const envdFile = (id: string, token: string, path: string) =>
    proxyFetch(server, id, ENVD_PORT, `/files?path=${encodeURIComponent(path)}`, {
      headers: { 'X-Access-Token': token },
    });

  beforeAll(async () => {
    // A secure source (raw API: SDK 2.51 creates through /v2/sandboxes, which has no `secure`).
    const raw = await server.api('POST', '/sandboxes', {
      templateID: 'base',
      secure: true,
      timeout: 600,
      metadata: { role: 'source' },
      envVars: { FROM_CREATE: 'source-env' },
    });
    expect(raw.status).toBe(201);
    sourceToken = raw.body.envdAccessToken;
    source = await Sandbox.connect(raw.body.sandboxID);
    w = await startWorkload(server, source);
  });

  it('forks x3: same memory and files at the fork point, own ids, hostnames and tokens, then divergence', async () => {
    await source.files.write('notes/before-fork.txt', 'shared');
    // A secret that only the memory of a shell process holds, never written anywhere before the fork.
    const holder = await source.commands.run(
      'secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n"); touch holder-ready; while :; do if [ -e ask ]; then echo "$secret" > answer.tmp && mv answer.tmp answer; rm -f ask; fi; sleep 0.1; done',
      { background: true },
    );
    await holder.disconnect();
    // Fork only once the secret is in the holder's memory: a fork before that gives every child its own.
    for (let i = 0; !(await source.files.exists('holder-ready')); i++) {
      if (i === 200) throw new Error('the secret holder did not start');
      await new Promise((res) => setTimeout(res, 50));
    }
    const ask = async (sbx: Sandbox) => {
      await sbx.commands.run('rm -f answer; touch ask');
      for (let i = 0; i < 100; i++) {
        const r = await sbx.commands.run('cat answer 2>/dev/null; true');
        if (r.stdout.trim()) return r.stdout.trim();
        await new Promise((res) => setTimeout(res, 50));
      }
      throw new Error(`no answer from the secret holder in ${sbx.sandboxId}`);
    };
    const before = await info(source.sandboxId);
    const counterAtFork = (await readWorkload(source, w)).counter;

    const results = await source.fork({ count: 3, timeoutMs: 300_000 });
    expect(results).toHaveLength(3);
    const children = results.map((r) => {
      if (!(r instanceof Sandbox)) throw r;
      return r;
    });

    // The source keeps running with its id and expiry.
    expect(await info(source.sandboxId)).toMatchObject({ state: 'running', endAt: before.endAt });
    const secret = await ask(source);
    expect(secret).toMatch(/^[0-9a-f]{32}$/);

    const childIds = children.map((c) => c.sandboxId);
    expect(new Set([source.sandboxId, ...childIds]).size).toBe(4);
    for (const child of children) {
      const id = child.sandboxId;
      const detail = await info(id);
      expect(detail).toMatchObject({ state: 'running', metadata: { role: 'source' } });
      expect(Date.parse(detail.endAt)).toBeGreaterThan(Date.now() + 200_000);
      expect((await child.commands.run('hostname; echo "$FROM_CREATE"')).stdout).toBe(`${id}\nsource-env\n`);
      expect(await child.files.read('notes/before-fork.txt')).toBe('shared');
      expect(await ask(child)).toBe(secret);
      // The workload came along: same PIDs, the count goes on from the fork point, the socket listens.
      const view = await readWorkload(child, w);
      expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
      expect(view.counter).toBeGreaterThanOrEqual(counterAtFork);
      await counterPasses(child, w, view.counter);
      expect(await workloadFetch(server, id, '/secret')).toEqual({ status: 200, body: w.secret });

      // Its own token: the child's works, the source's does not.
      const token = detail.envdAccessToken as string;
      expect(token).toMatch(/.+/);
      expect(token).not.toBe(sourceToken);
      expect((await envdFile(id, token, '/home/user/notes/before-fork.txt')).status).toBe(200);
      expect((await envdFile(id, sourceToken, '/home/user/notes/before-fork.txt')).status).toBe(401);
    }
    expect((await envdFile(source.sandboxId, sourceToken, '/home/user/notes/before-fork.txt')).status).toBe(
      200,
    );

    // Divergence: each writes its own file and changes its memory; nobody else sees it.
    const all = [source, ...children];
    await Promise.all(all.map((s, i) => s.files.write('notes/mine.txt', `writer-${i}`)));
    await children[0]!.commands.run(`kill ${w.counterPid}`);
    for (const [i, s] of all.entries()) {
      expect(await s.files.read('notes/mine.txt')).toBe(`writer-${i}`);
      const view = await readWorkload(s, w);
      expect(view.counterAlive).toBe(i !== 1);
    }
    await counterPasses(source, w, (await readWorkload(source, w)).counter);
    await Promise.all(children.map((c) => c.kill()));
  });

  it('forks without a timeout inheriting the source duration, and a child can be paused, resumed and forked', async () => {
    const [child] = await Sandbox.fork(source.sandboxId);
    if (!(child instanceof Sandbox)) throw child;
    const detail = await info(child.sandboxId);
    // Omitted timeout = the source's duration (600 s) re-based at now.
    expect(Date.parse(detail.endAt)).toBeGreaterThan(Date.now() + 500_000);
    const counter = (await readWorkload(child, w)).counter;
    await child.pause();
    await child.connect();
    const view = await readWorkload(child, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true });
    expect(view.counter).toBeGreaterThanOrEqual(counter);
    const [grandchild] = await child.fork({ timeoutMs: 120_000 });
    if (!(grandchild instanceof Sandbox)) throw grandchild;
    expect(await workloadFetch(server, grandchild.sandboxId, '/secret')).toEqual({
      status: 200,
      body: w.secret,
    });
    await grandchild.kill();
    await child.kill();
  });

  it('children of a sandbox without public traffic each get their own traffic token', async () => {
    const raw = await server.api('POST', '/sandboxes', {
      templateID: 'base',
      timeout: 300,
      network: { allowPublicTraffic: false },
    });
    expect(raw.status).toBe(201);
    const parentToken = raw.body.trafficAccessToken as string;
    expect(parentToken).toMatch(/.+/);
    const parent = await Sandbox.connect(raw.body.sandboxID);
    const pw = await startWorkload(server, parent, { headers: { 'e2b-traffic-access-token': parentToken } });
    expect((await workloadFetch(server, parent.sandboxId, '/secret')).status).toBe(401);

    const forked = await server.api('POST', `/sandboxes/${parent.sandboxId}/fork`, {
      count: 2,
      timeout: 120,
    });
    expect(forked.status).toBe(201);
    const tokens = new Set([parentToken]);
    for (const r of forked.body as { sandbox: { sandboxID: string; trafficAccessToken: string } }[]) {
      const { sandboxID: id, trafficAccessToken: token } = r.sandbox;
      tokens.add(token);
      expect(await workloadFetch(server, id, '/secret', { 'e2b-traffic-access-token': token })).toEqual({
        status: 200,
        body: pw.secret,
      });
      expect(
        (await workloadFetch(server, id, '/secret', { 'e2b-traffic-access-token': parentToken })).status,
      ).toBe(401);
      expect((await workloadFetch(server, id, '/secret')).status).toBe(401);
      expect(await info(id)).toMatchObject({ network: { allowPublicTraffic: false } });
      expect((await server.api('DELETE', `/sandboxes/${id}`)).status).toBe(204);
    }
    expect(tokens.size).toBe(3);
    expect((await server.api('DELETE', `/sandboxes/${parent.sandboxId}`)).status).toBe(204);
  });

  it('refuses count 0 and 101 with 400, forks of paused sandboxes with 409, unknown ones with 404', async () => {
    for (const count of [0, 101, -1, 1.5]) {
      const r = await server.api('POST', `/sandboxes/${source.sandboxId}/fork`, { count });
      expect(r.status, `count ${count}`).toBe(400);
      expect(r.body.code).toBe(400);
    }
    expect((await server.api('POST', `/sandboxes/${source.sandboxId}/fork`, { timeout: -5 })).status).toBe(
      400,
    );
    const missing = await server.api('POST', `/sandboxes/${randomUUID()}/fork`, { count: 1 });
    expect(missing.status).toBe(404);
    await expect(Sandbox.fork(randomUUID(), { count: 1 })).rejects.toBeInstanceOf(SandboxNotFoundError);

    const other = await Sandbox.create({ timeoutMs: 120_000 });
    await other.pause();
    const paused = await server.api('POST', `/sandboxes/${other.sandboxId}/fork`, { count: 1 });
    expect(paused.status).toBe(409);
    await other.kill();
    // None of the refused requests created a sandbox.
    const listed = await server.api('GET', '/v2/sandboxes');
    expect((listed.body as { sandboxID: string }[]).map((s) => s.sandboxID)).toEqual([source.sandboxId]);
  });
});
