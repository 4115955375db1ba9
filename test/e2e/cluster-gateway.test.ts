import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  schedulerClient,
  type Plain,
  type TestSchedulerClient,
} from '../../packages/scheduler/src/testing/grpc-client.js';
import {
  startGatewayProcess,
  type GatewayProcess,
} from '../../packages/gateway/src/testing/gateway-process.js';
import { endNode, eventually, freePort, REPO, startServer, type TestServer } from './harness.js';

const KEY = `e2b_${'c0ffee'.repeat(10)}`;
const NODES = ['gwnodea', 'gwnodeb'] as const;

/**
 * A cluster of real processes (docs/cluster.md#the-gateway): one scheduler, two nodes reporting heartbeats,
 * two gateways; the e2b SDK talks only to a gateway, as it would to one node.
 */
describe('the e2b SDK through aenv gateway', () => {
  let sched: SchedulerProcess;
  let rpc: TestSchedulerClient;
  const nodes: TestServer[] = [];
  const gateways: GatewayProcess[] = [];

  const useGateway = (g: GatewayProcess) => {
    process.env.E2B_API_URL = g.url;
    process.env.E2B_SANDBOX_URL = g.url;
    process.env.E2B_API_KEY = KEY;
  };
  const boundNode = async (sandboxId: string): Promise<string | undefined> => {
    try {
      return ((await rpc.call('LookupNode', { sandbox_id: sandboxId })).node as Plain).node_id as string;
    } catch {
      return undefined;
    }
  };
  /** One raw HTTP/1.1 exchange (a Host header or a repeated field, which fetch will not send). */
  const rawTo = (g: GatewayProcess, text: string) =>
    new Promise<string>((resolve, reject) => {
      const s = connect(Number(new URL(g.url).port), '127.0.0.1', () => s.write(text));
      let out = '';
      s.on('data', (d: Buffer) => (out += d.toString()));
      s.on('close', () => resolve(out));
      s.on('error', reject);
    });
  const gw = (path: string, init: RequestInit = {}, g = gateways[0]!) =>
    fetch(g.url + path, { ...init, headers: { 'x-api-key': KEY, ...(init.headers as object) } });

  beforeAll(async () => {
    const ports = [await freePort(), await freePort()];
    sched = await startSchedulerProcess({
      scheduler: { nodes: NODES.map((id, i) => ({ id, endpoint: `http://127.0.0.1:${ports[i]}` })) },
    });
    rpc = schedulerClient(sched.grpcAddress);
    for (const [i, id] of NODES.entries()) {
      // One API key for the whole cluster (docs/cluster.md#secrets-that-must-be-shared): each node's managed key file holds it.
      mkdirSync('/var/lib/aenv-e2e', { recursive: true, mode: 0o711 });
      mkdirSync(`/var/lib/aenv-e2e/${id}`, { recursive: true, mode: 0o711 });
      mkdirSync(`/var/lib/aenv-e2e/${id}/secrets`, { recursive: true, mode: 0o700 });
      writeFileSync(`/var/lib/aenv-e2e/${id}/secrets/api-key`, `${KEY}\n`, { mode: 0o600 });
      nodes.push(
        await startServer(
          {
            name: id,
            toml: [
              '[cluster]',
              `scheduler_endpoint = "http://${sched.grpcAddress}"`,
              '[observability.scheduler_report]',
              'enabled = true',
              'interval_secs = 1',
              '[node_identity]',
              `node_id = "${id}"`,
            ].join('\n'),
          },
          ports[i],
        ),
      );
    }
    for (let i = 0; i < 2; i++)
      gateways.push(
        await startGatewayProcess(
          { scheduler_addr: sched.grpcAddress, debug_mode: true, sandbox_proxy_domains: ['Sbx.GW.test'] },
          KEY,
        ),
      );
    useGateway(gateways[0]!);
    await eventually(
      async () => ((await (await gw('/nodes')).json()) as unknown[]).length === 2,
      'both nodes to heartbeat',
      300,
      100,
    );
  });
  afterAll(async () => {
    for (const g of gateways) await g.stop();
    rpc?.close();
    await sched?.stop();
  });

  const sandboxes: Sandbox[] = [];
  it('creates on both nodes, runs commands and moves files through the gateway; lists merge across nodes', async () => {
    for (let i = 0; i < 3; i++) sandboxes.push(await Sandbox.create({ timeoutMs: 300_000 }));
    const placed = await Promise.all(sandboxes.map((s) => boundNode(s.sandboxId)));
    // Round robin over two nodes: both got one.
    expect(new Set(placed)).toEqual(new Set(NODES));
    for (const s of sandboxes) {
      const r = await s.commands.run(`echo hi-$(hostname)`);
      expect(r.exitCode).toBe(0);
      await s.files.write('/tmp/gw.txt', `via ${s.sandboxId}`);
      expect(await s.files.read('/tmp/gw.txt')).toBe(`via ${s.sandboxId}`);
    }
    // Pages of one through the merged list: every sandbox once, newest first, across both nodes.
    const paginator = Sandbox.list({ limit: 1 });
    const seen: string[] = [];
    while (paginator.hasNext) seen.push(...(await paginator.nextItems()).map((s) => s.sandboxId));
    expect([...seen].sort()).toEqual(sandboxes.map((s) => s.sandboxId).sort());
    expect(seen).toEqual([...sandboxes].reverse().map((s) => s.sandboxId));
    const nodesView = (await (await gw('/nodes')).json()) as { id: string; status: string }[];
    expect(nodesView.map((n) => [n.id, n.status]).sort()).toEqual(NODES.map((id) => [id, 'ready']));
  });

  it('pauses and connects again on the same node', async () => {
    const s = sandboxes[0]!;
    const node = await boundNode(s.sandboxId);
    await s.pause();
    const again = await Sandbox.connect(s.sandboxId, { timeoutMs: 300_000 });
    expect(await again.files.read('/tmp/gw.txt')).toBe(`via ${s.sandboxId}`);
    expect(await boundNode(s.sandboxId)).toBe(node);
  });

  it('forks x4 on the parent’s node and records every child there', async () => {
    const parent = sandboxes[1]!;
    const node = await boundNode(parent.sandboxId);
    const results = await parent.fork({ count: 4, timeoutMs: 300_000 });
    const children = results.map((r) => {
      if (!(r instanceof Sandbox)) throw r;
      return r;
    });
    expect(children).toHaveLength(4);
    for (const c of children) expect(await boundNode(c.sandboxId)).toBe(node);
    expect(await children[3]!.files.read('/tmp/gw.txt')).toBe(`via ${parent.sandboxId}`);
    sandboxes.push(...children);
  });

  it('routes host-routed traffic to the sandbox’s node and GET /nodes/{id} to that node', async () => {
    const g = gateways[0]!;
    const s = sandboxes[1]!;
    const node = await boundNode(s.sandboxId);
    const { envdAccessToken } = (await (await gw(`/sandboxes/${s.sandboxId}`)).json()) as {
      envdAccessToken?: string;
    };
    const token = envdAccessToken ? `X-Access-Token: ${envdAccessToken}\r\n` : '';
    const answer = await rawTo(
      g,
      `GET /health HTTP/1.1\r\nHost: 49983-${s.sandboxId}.sbx.gw.test\r\n${token}Connection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1.1 204 /);
    expect(answer.toLowerCase()).toContain(`x-agentenv-node-id: ${node}`);
    const detail = await gw(`/nodes/${node}`);
    expect(detail.status).toBe(200);
    expect(((await detail.json()) as { id: string }).id).toBe(node);
    expect((await gw('/nodes/no-such-node')).status).toBe(404);
  });

  it('refuses hostile requests with the documented answers', async () => {
    const g = gateways[0]!;
    expect((await fetch(`${g.url}/sandboxes`)).status).toBe(401);
    const raw = (text: string) => rawTo(g, text);
    expect(
      await raw(
        `GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: ${KEY}\r\nX-API-Key: ${KEY}\r\nConnection: close\r\n\r\n`,
      ),
    ).toMatch(/^HTTP\/1.1 401 /);
    const noPort = await fetch(`${g.url}/proxy/files`, {
      headers: { 'e2b-sandbox-id': sandboxes[1]!.sandboxId },
    });
    expect(await noPort.json()).toEqual({ code: 400, message: 'target port header required' });
    const badPort = await fetch(`${g.url}/files`, {
      headers: { 'e2b-sandbox-id': sandboxes[1]!.sandboxId, 'e2b-sandbox-port': '70000' },
    });
    expect(badPort.status).toBe(400);
    expect((await gw('/v2/sandboxes?limit=ten')).status).toBe(400);
    for (const host of [
      '0-abc.sbx.gw.test',
      `70000-${sandboxes[1]!.sandboxId}.sbx.gw.test`,
      'x_y.sbx.gw.test',
    ])
      expect(await raw(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`), host).toMatch(
        /^HTTP\/1.1 400 /,
      );
    const big = await gw('/sandboxes', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', metadata: { pad: 'x'.repeat(65 * 1024) } }),
    });
    expect(big.status).toBe(413);
    // The nodes still answer, and nothing was created by the refusals.
    const listed = (await (await gw('/v2/sandboxes')).json()) as unknown[];
    expect(listed).toHaveLength(sandboxes.length);
  });

  it('serves the aenv CLI as a node does: start, exec, upload, download, list, pause, resume, delete', async () => {
    const work = mkdtempSync(join(tmpdir(), 'aenv-gw-cli-'));
    const aenv = (...args: string[]) =>
      spawnSync(process.execPath, [join(REPO, 'packages', 'cli', 'dist', 'main.js'), ...args], {
        cwd: work,
        encoding: 'utf8',
        timeout: 120_000,
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          HOME: work,
          AENV_URL: gateways[0]!.url,
          AENV_API_KEY: KEY,
        },
      });
    const ok = (r: ReturnType<typeof aenv>) => {
      expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
      return r.stdout;
    };
    try {
      const id = ok(aenv('start', '-d', 'base')).trim();
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      expect(NODES).toContain(await boundNode(id));
      expect(ok(aenv('exec', id, 'sh', '-c', 'echo via-gateway; exit 0'))).toBe('via-gateway\n');
      const exit = aenv('exec', id, 'sh', '-c', 'exit 3');
      expect(exit.status).toBe(3);
      writeFileSync(join(work, 'up.txt'), 'through the gateway');
      ok(aenv('upload', id, join(work, 'up.txt'), '/tmp/up.txt'));
      ok(aenv('download', id, '/tmp/up.txt', join(work, 'down.txt')));
      expect(readFileSync(join(work, 'down.txt'), 'utf8')).toBe('through the gateway');
      const listed = JSON.parse(ok(aenv('ls', '--output', 'json'))) as { sandboxID: string }[];
      expect(listed.map((x) => x.sandboxID)).toContain(id);
      expect(JSON.parse(ok(aenv('pause', id)))).toEqual({ sandboxID: id, state: 'paused' });
      expect(JSON.parse(ok(aenv('resume', id)))).toMatchObject({ sandboxID: id, resumed: true });
      expect(ok(aenv('exec', id, 'cat', '/tmp/up.txt'))).toBe('through the gateway');
      ok(aenv('rm', id));
      const after = JSON.parse(ok(aenv('ls', '--output', 'json'))) as { sandboxID: string }[];
      expect(after.map((x) => x.sandboxID)).not.toContain(id);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('keeps serving through the other gateway when one is killed', async () => {
    expect(await gateways[0]!.stop('SIGKILL')).toBe('SIGKILL');
    useGateway(gateways[1]!);
    const s = sandboxes[2]!;
    const again = await Sandbox.connect(s.sandboxId, { timeoutMs: 300_000 });
    expect((await again.commands.run('cat /tmp/gw.txt')).stdout).toBe(`via ${s.sandboxId}`);
    const listed = await Sandbox.list().nextItems();
    expect(listed.map((x) => x.sandboxId).sort()).toEqual(sandboxes.map((x) => x.sandboxId).sort());
    for (const x of sandboxes) await Sandbox.kill(x.sandboxId);
    expect(await Sandbox.list().nextItems()).toEqual([]);
    for (const n of nodes) expect(await endNode(n)).toEqual({ stray: [], exitCode: 0 });
  });
});
