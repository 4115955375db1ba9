import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  eventually,
  freePort,
  hostObjects,
  NO_HOST_OBJECTS,
  readWorkload,
  REPO,
  startWorkload,
  workloadFetch,
  type TestServer,
} from './harness.js';

const run = promisify(execFile);
const SCRIPT = join(REPO, 'scripts', 'local-cluster.sh');
const NODES = ['lc1', 'lc2'] as const;

/** Whether nothing listens on `port` of loopback. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A gateway port whose neighbours the script takes (nodes +1.., scheduler +90..+92) are free too. */
async function clusterPort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = await freePort();
    const others = [1, 2, 90, 91, 92].map((d) => port + d);
    if ((await Promise.all(others.map(portFree))).every(Boolean)) return port;
  }
  throw new Error('no free port range for the local cluster');
}

/**
 * README's local cluster as a user runs it (scripts/local-cluster.sh, docs/cluster.md#a-local-cluster), with two
 * nodes and the scheduler's bindings in the test Redis: `up` prints the E2B_* environment; the nodes share one
 * repository (one `base` template, records every node trusts); through the gateway the e2b SDK runs, pauses and
 * connects a sandbox with its processes; the node holding a sandbox is drained through the gateway and, the
 * moment the drain is done, the sandbox connects with its processes on the other node; `down` and `purge` leave
 * nothing of the nodes on the host.
 */
describe('scripts/local-cluster.sh', () => {
  const state = `/var/lib/aenv-e2e/local-cluster-${randomUUID().slice(0, 8)}`;
  let port: number;
  let env: Record<string, string>;
  let sdk: { apiUrl: string; sandboxUrl: string; apiKey: string; debug: false };
  const scriptEnv = () => ({
    ...process.env,
    AENV_CLUSTER_NODES: String(NODES.length),
    AENV_CLUSTER_PORT: String(port),
    AENV_CLUSTER_STATE: state,
    AENV_CLUSTER_REDIS: new URL(process.env.AENV_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379').host,
  });
  const script = (verb: string) =>
    run(SCRIPT, [verb], { env: scriptEnv(), encoding: 'utf8', maxBuffer: 1 << 24, timeout: 600_000 });
  const nodeUrl = (i: number) => `http://127.0.0.1:${port + 1 + i}`;
  const nodeApi = async (i: number, method: string, path: string) => {
    const r = await fetch(nodeUrl(i) + path, { method, headers: { 'x-api-key': sdk.apiKey } });
    const text = await r.text();
    return { status: r.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
  };
  /** Which node (index) holds sandbox `id` running, asked of each node's own API. */
  const runningOn = async (id: string): Promise<number | undefined> => {
    for (let i = 0; i < NODES.length; i++) {
      const r = await nodeApi(i, 'GET', `/sandboxes/${id}`);
      if (r.status === 200 && r.body?.state === 'running') return i;
    }
    return undefined;
  };
  const gateway = () => ({ url: sdk.apiUrl }) as TestServer;
  const nodeLogs = () =>
    NODES.map((n) => {
      try {
        return `--- ${n}\n${readFileSync(join(state, n, 'node.log'), 'utf8')
          .split('\n')
          .slice(-40)
          .join('\n')}`;
      } catch {
        return '';
      }
    }).join('\n');

  beforeAll(async () => {
    port = await clusterPort();
    const { stdout } = await script('up');
    env = Object.fromEntries(
      [...stdout.matchAll(/^export (E2B_[A-Z_]+)=(.*)$/gm)].map((m) => [m[1]!, m[2]!] as [string, string]),
    );
    sdk = {
      apiUrl: env.E2B_API_URL!,
      sandboxUrl: env.E2B_SANDBOX_URL!,
      apiKey: env.E2B_API_KEY!,
      debug: false,
    };
  });
  afterAll(async () => {
    if (port !== undefined) await script('purge').catch(() => undefined);
  });

  it('prints the E2B_* environment of its gateway, and keeps its secrets private', () => {
    expect(env).toEqual({
      E2B_API_URL: `http://127.0.0.1:${port}`,
      E2B_SANDBOX_URL: `http://127.0.0.1:${port}`,
      E2B_API_KEY: expect.stringMatching(/^e2b_[0-9a-f]{64}$/),
    });
    for (const f of ['api-key', 'record-signing-secret', 'shared-repository', 'cluster.json'])
      expect(statSync(join(state, f)).mode & 0o077, f).toBe(0);
  });

  it('shares one repository: every node has the one base template', async () => {
    const ids = await Promise.all(
      NODES.map(async (_, i) => {
        const r = await fetch(`${nodeUrl(i)}/templates`, { headers: { 'x-api-key': sdk.apiKey } });
        expect(r.status).toBe(200);
        const list = (await r.json()) as { templateID: string; aliases?: string[] }[];
        return list.filter((t) => t.aliases?.includes('base')).map((t) => t.templateID);
      }),
    );
    expect(ids[0]).toHaveLength(1);
    expect(ids[1]).toEqual(ids[0]);
  });

  it('serves a sandbox through its gateway: create, exec, pause, connect with its processes', async () => {
    const sbx = await Sandbox.create({ ...sdk, timeoutMs: 600_000 });
    const w = await startWorkload(gateway(), sbx);
    const on = await runningOn(sbx.sandboxId);
    expect(on, nodeLogs()).toBeDefined();
    await sbx.pause();
    const again = await Sandbox.connect(sbx.sandboxId, { ...sdk, timeoutMs: 600_000 });
    expect((await workloadFetch(gateway(), sbx.sandboxId, '/secret')).body).toBe(w.secret);
    expect(await readWorkload(again, w)).toMatchObject({
      counterAlive: true,
      serverAlive: true,
      file: w.file,
    });
    await again.kill();
  });

  it('a drained node hands its sandbox to the other node, which resumes it with its processes at once', async () => {
    const sbx = await Sandbox.create({ ...sdk, timeoutMs: 600_000 });
    const w = await startWorkload(gateway(), sbx);
    const from = await runningOn(sbx.sandboxId);
    expect(from, nodeLogs()).toBeDefined();
    // As a user drains a node: through the gateway, which sends the drain and the progress polls to that node.
    const node = `/nodes/${NODES[from!]}`;
    const viaGateway = async (method: string) => {
      const r = await fetch(sdk.apiUrl + node + (method === 'POST' ? '/drain' : ''), {
        method,
        headers: { 'x-api-key': sdk.apiKey },
      });
      return { status: r.status, body: (await r.json()) as { drain?: { done?: boolean } } };
    };
    expect((await viaGateway('POST')).status).toBe(202);
    await eventually(
      async () => (await viaGateway('GET')).body.drain?.done === true,
      'the drain to finish',
      600,
      100,
    );
    // Right away: at `done` the scheduler no longer binds the sandbox to the drained node (docs/cluster.md#draining).
    const again = await Sandbox.connect(sbx.sandboxId, { ...sdk, timeoutMs: 600_000 });
    expect(await runningOn(sbx.sandboxId), nodeLogs()).toBe(1 - from!);
    expect((await workloadFetch(gateway(), sbx.sandboxId, '/secret')).body).toBe(w.secret);
    expect(await readWorkload(again, w)).toMatchObject({
      counterAlive: true,
      serverAlive: true,
      file: w.file,
    });
    await again.kill();
  });

  it('down stops every process; purge leaves nothing of the nodes on the host', async () => {
    await script('down');
    const { stdout } = await script('status');
    expect(stdout).not.toMatch(/running/);
    await script('purge');
    expect(existsSync(state)).toBe(false);
    for (const n of NODES) {
      expect(hostObjects({ prefix: n, runtimePath: `/run/aenv-cluster-${n}`, home: join(state, n) })).toEqual(
        NO_HOST_OBJECTS,
      );
      expect(existsSync(`/run/aenv-cluster-${n}`)).toBe(false);
    }
  });
});
