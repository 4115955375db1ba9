// The JS SDK in every version package.json names — `e2b` (the newest on npm) and `npm:e2b@…` aliases such as
// `e2b-v1`, an older 2.x that still creates and connects through the v1 routes — each through one compact suite
// against one node: create, commands (streamed, background, stdin), files (signed URLs too), watch,
// pause/connect, timeout, kill, and a template built from Docker Hub names (the node's docker.io mirror is the
// local registry). Which API routes each SDK called is read from the node's request metrics, so an alias named
// `*-v1` is proven to use the v1 routes. A new SDK version runs here by changing package.json alone.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type * as E2b from 'e2b';
import { afterAll, describe, expect, it } from 'vitest';
import { dockerHubMirrorToml } from './docker-hub-mirror.js';
import { REPO, eventually } from './harness.js';
import { deleteTemplatesNamed, describeNode } from './fixture.js';

type Sdk = typeof E2b;

const devDependencies = (
  JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }
).devDependencies;
/** The e2b SDKs package.json installs, by the name they are imported under. */
const SDK_NAMES = Object.entries(devDependencies)
  .filter(([name, spec]) => name === 'e2b' || spec.startsWith('npm:e2b@'))
  .map(([name]) => name);
const SDKS: [string, Sdk][] = await Promise.all(
  SDK_NAMES.map(async (name): Promise<[string, Sdk]> => [name, (await import(name)) as Sdk]),
);
const versionOf = (name: string): string =>
  (JSON.parse(readFileSync(join(REPO, 'node_modules', name, 'package.json'), 'utf8')) as { version: string })
    .version;

const RUN = `js${Date.now().toString(36)}`;

describe('the JS SDKs package.json names', () => {
  const { server } = describeNode({ name: 'sdkjs1', toml: dockerHubMirrorToml() });

  /** Requests the node served so far, by "METHOD route" (from its Prometheus request histogram). */
  async function routeCounts(): Promise<Map<string, number>> {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const counts = new Map<string, number>();
    for (const line of text.split('\n')) {
      const m = /^agentenv_http_request_duration_seconds_count\{(.*)\} (\d+)$/.exec(line);
      if (!m) continue;
      const method = /method="([^"]*)"/.exec(m[1]!)?.[1];
      const route = /route="([^"]*)"/.exec(m[1]!)?.[1];
      const key = `${method} ${route}`;
      counts.set(key, (counts.get(key) ?? 0) + Number(m[2]));
    }
    return counts;
  }
  async function routesCalledDuring(work: () => Promise<void>): Promise<Set<string>> {
    const before = await routeCounts();
    await work();
    const after = await routeCounts();
    return new Set([...after].filter(([k, n]) => n > (before.get(k) ?? 0)).map(([k]) => k));
  }

  afterAll(async () => {
    await deleteTemplatesNamed(server, RUN);
  });

  it('installs the newest e2b and at least one older 2.x under an alias', () => {
    expect(SDK_NAMES).toContain('e2b');
    expect(SDK_NAMES.some((n) => n !== 'e2b')).toBe(true);
    for (const name of SDK_NAMES) expect(versionOf(name), name).toMatch(/^2\.\d+\.\d+$/);
  });

  describe.each(SDKS)('%s', (name, sdk) => {
    const { Sandbox, Template, CommandExitError, NotFoundError, FilesystemEventType } = sdk;
    const v1 = name.endsWith('-v1');

    it(`create, commands, files, watch, pause, connect and kill${v1 ? ' through the v1 routes' : ''}`, async () => {
      let id = '';
      const routes = await routesCalledDuring(async () => {
        const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { sdk: name } });
        id = sbx.sandboxId;
        try {
          expect((await sbx.getInfo()).metadata).toEqual({ sdk: name });

          const chunks: string[] = [];
          const r = await sbx.commands.run('for i in 1 2 3; do echo l$i; sleep 0.2; done', {
            onStdout: (d) => void chunks.push(d),
          });
          expect(chunks.join('')).toBe('l1\nl2\nl3\n');
          expect(r.stdout).toBe('l1\nl2\nl3\n');
          expect(chunks.length).toBeGreaterThanOrEqual(3);
          const failed = await sbx.commands.run('echo no >&2; exit 4').catch((e: unknown) => e);
          expect(failed).toBeInstanceOf(CommandExitError);
          expect(failed).toMatchObject({ exitCode: 4, stderr: 'no\n' });
          const cat = await sbx.commands.run('cat; echo end', { background: true, stdin: true });
          await sbx.commands.sendStdin(cat.pid, 'typed\n');
          await sbx.commands.closeStdin(cat.pid);
          expect((await cat.wait()).stdout).toBe('typed\nend\n');

          await sbx.files.write('sdk/a.txt', `from ${name}`);
          expect(await sbx.files.read('sdk/a.txt')).toBe(`from ${name}`);
          const bytes = new Uint8Array(256 * 1024).map((_, i) => i % 251);
          await sbx.files.write('sdk/b.bin', bytes.buffer);
          expect(new Uint8Array(await sbx.files.read('sdk/b.bin', { format: 'bytes' }))).toEqual(bytes);
          expect((await sbx.files.list('sdk')).map((e) => e.name).sort()).toEqual(['a.txt', 'b.bin']);
          const form = new FormData();
          form.append('file', new Blob(['signed']), 'up.txt');
          const up = await fetch(await sbx.uploadUrl('/home/user/sdk/up.txt'), {
            method: 'POST',
            body: form,
          });
          expect(up.status).toBe(200);
          expect(await (await fetch(await sbx.downloadUrl('/home/user/sdk/up.txt'))).text()).toBe('signed');

          const events: string[] = [];
          const watch = await sbx.files.watchDir('sdk', (e) => {
            if (e.type === FilesystemEventType.CREATE) events.push(e.name);
          });
          await sbx.files.write('sdk/watched.txt', 'x');
          await eventually(() => events.includes('watched.txt'), 'the watch event of sdk/watched.txt');
          await watch.stop();

          const sleeper = await sbx.commands.run('sleep 3600', { background: true });
          await sleeper.disconnect();
          expect(await sbx.pause()).toBe(true);
          expect(await sbx.isRunning()).toBe(false);
          const back = await Sandbox.connect(id, { timeoutMs: 120_000 });
          expect((await back.commands.list()).map((p) => p.pid)).toContain(sleeper.pid);
          expect(await back.files.read('sdk/a.txt')).toBe(`from ${name}`);
          const before = (await back.getInfo()).endAt.getTime();
          await back.setTimeout(300_000);
          expect((await back.getInfo()).endAt.getTime()).toBeGreaterThan(before);
        } finally {
          expect(await sbx.kill()).toBe(true);
        }
      });
      expect(await Sandbox.kill(id)).toBe(false);
      await expect(Sandbox.connect(id)).rejects.toBeInstanceOf(NotFoundError);

      if (v1) {
        expect(routes).toContain('POST /sandboxes');
        expect(routes).toContain('POST /sandboxes/:id/connect');
        expect(routes).not.toContain('POST /v2/sandboxes');
        expect(routes).not.toContain('POST /v2/sandboxes/:id/connect');
      } else {
        expect(routes).toContain('POST /v2/sandboxes');
        expect(routes).toContain('POST /v2/sandboxes/:id/connect');
      }
    });

    it('builds templates from Docker Hub names (ubuntu:22.04, e2bdev/base) through the docker.io mirror', async () => {
      const built = [
        [`${RUN}-${name}-ubuntu`, Template().fromImage('ubuntu:22.04')],
        [`${RUN}-${name}-base`, Template().fromBaseImage()],
      ] as const;
      for (const [templateName, from] of built) {
        await Template.build(from.runCmd(`echo ${templateName} > /tmp/built`), templateName);
        const sbx = await Sandbox.create(templateName, { timeoutMs: 60_000 });
        try {
          expect((await sbx.commands.run('cat /tmp/built; id -un')).stdout).toBe(`${templateName}\nuser\n`);
        } finally {
          await sbx.kill();
        }
      }
    });
  });
});
