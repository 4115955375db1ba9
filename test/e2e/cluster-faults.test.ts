import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
import {
  endNode,
  eventually,
  freePort,
  readWorkload,
  REPO,
  runProgram,
  startServer,
  startWorkload,
  workloadFetch,
  type Ran,
  type TestServer,
  type Workload,
} from './harness.js';
import {
  REPOSITORY_KINDS,
  sharedRepository,
  type RepositoryKind,
  type SharedRepository,
} from './shared-repository.js';

/** Each repository's cluster has nodes of its own: homes, runtimes, CIDRs and ids. */
const NODES_OF: Record<RepositoryKind, readonly string[]> = {
  oss: ['flsa', 'flsb', 'flsc'],
  posix_fs: ['flta', 'fltb', 'fltc'],
};

/** A Redis of this test's own (so it can be killed and restarted empty), on loopback, without persistence. */
async function startRedis(port: number): Promise<ChildProcess> {
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  await eventually(
    async () => {
      const { Redis } = await import('ioredis');
      const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
      try {
        await c.connect();
        return (await c.ping()) === 'PONG';
      } catch {
        return false;
      } finally {
        c.disconnect();
      }
    },
    'the test Redis to answer',
    100,
    100,
  );
  return child;
}

const CLI = join(REPO, 'packages', 'cli', 'dist', 'main.js');

/** `aenv <args>` (the built CLI) with `env` and a HOME of its own; never rejects on a failing command. */
async function runCli(args: string[], env: Record<string, string>): Promise<Ran> {
  const home = mkdtempSync(join(tmpdir(), 'aenv-cli-home-'));
  try {
    return await runProgram(CLI, args, { env: { HOME: home, ...env } });
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/**
 * Faults of a whole cluster, seen through its gateways (docs/cluster.md#failure-modes): three real nodes sharing a
 * repository (moto S3, then a directory), one scheduler with its bindings in a real Redis, two gateways. The e2b SDK talks only to
 * the gateways. Redis restarted empty, the scheduler restarted, a node killed with -9, a node drained and a gateway
 * killed: each time every sandbox is still found, with its processes where it was paused, and the surviving nodes
 * leave nothing behind.
 */
describe.each<RepositoryKind>(REPOSITORY_KINDS)(
  'a three-node cluster on %s through two gateways, under faults',
  (kind) => {
    const NODES = NODES_OF[kind];
    const apiKey = `e2b_${randomBytes(32).toString('hex')}`;
    const env = {
      AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
      AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
    };
    let repo: SharedRepository;
    const ports: Record<string, number> = {};
    const nodes = new Map<string, TestServer>();
    const gateways: GatewayProcess[] = [];
    let redisPort = 0;
    let redis: ChildProcess;
    let sched: SchedulerProcess;
    let rpc: TestSchedulerClient;

    const schedulerConfig = () => ({
      scheduler: {
        redis_addr: `127.0.0.1:${redisPort}`,
        // Short, so that a node killed here is seen gone within seconds (defaults: 30 s). The bindings outlive a
        // restart of the scheduler (its stop and start took up to ~3.5 s on a loaded host; the nodes' heartbeats
        // back off meanwhile), which must find them in Redis.
        report_ttl: '3s',
        binding_ttl: '10s',
        nodes: NODES.map((id) => ({ id, endpoint: `http://127.0.0.1:${ports[id]}` })),
      },
    });
    const startNode = (name: string) => {
      const home = `/var/lib/aenv-e2e/${name}`;
      mkdirSync(join(home, 'secrets'), { recursive: true, mode: 0o700 });
      writeFileSync(join(home, 'secrets', 'api-key'), `${apiKey}\n`, { mode: 0o600 });
      return startServer(
        {
          name,
          env,
          toml: [
            ...repo.toml,
            '[cluster]',
            `scheduler_endpoint = "http://${sched.grpcAddress}"`,
            '[observability.scheduler_report]',
            'enabled = true',
            'interval_secs = 1',
            '[node_identity]',
            `node_id = "${name}"`,
          ].join('\n'),
        },
        ports[name],
      );
    };
    const node = (name: string) => nodes.get(name)!;
    const sdkAt = (g: GatewayProcess) => ({ apiUrl: g.url, sandboxUrl: g.url, apiKey, debug: false });
    const gw = (g: GatewayProcess, method: string, path: string, body?: unknown) =>
      fetch(g.url + path, {
        method,
        headers: {
          'x-api-key': apiKey,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    /** The data plane through a gateway: what the harness's proxy helpers need of a "server". */
    const dataPlane = (g: GatewayProcess) => ({ url: g.url }) as TestServer;
    const boundNode = async (sandboxId: string): Promise<string | undefined> => {
      try {
        return ((await rpc.call('LookupNode', { sandbox_id: sandboxId })).node as Plain).node_id as string;
      } catch {
        return undefined;
      }
    };
    /** A sandbox with the workload (a counter loop and a python server holding a secret in memory). */
    const workloadVia = async (g: GatewayProcess) => {
      const sbx = await Sandbox.create({ ...sdkAt(g), timeoutMs: 600_000 });
      return { sbx, w: await startWorkload(dataPlane(g), sbx) };
    };
    /** The same processes, reached through `g`: the server's in-memory secret and the counter loop. */
    const sameProcesses = async (g: GatewayProcess, id: string, w: Workload) => {
      const sbx = await Sandbox.connect(id, { ...sdkAt(g), timeoutMs: 600_000 });
      expect((await workloadFetch(dataPlane(g), id, '/secret')).body).toBe(w.secret);
      expect(await readWorkload(sbx, w)).toMatchObject({
        counterAlive: true,
        serverAlive: true,
        file: w.file,
      });
    };
    const pausedIntoRepository = async (on: TestServer, g: GatewayProcess, id: string) => {
      const copied = () =>
        on
          .logs()
          .split('\n')
          .filter((l) => l.includes('"paused sandbox copied to the repository"') && l.includes(id)).length;
      const before = copied();
      expect((await gw(g, 'POST', `/sandboxes/${id}/pause`)).status).toBe(204);
      await eventually(() => copied() > before, `the pause of ${id} to reach the repository`, 600, 100);
    };
    const seenBy = async (g: GatewayProcess) =>
      ((await (await gw(g, 'GET', '/nodes')).json()) as { nodeID?: string; id?: string }[]).length;

    beforeAll(async () => {
      repo = sharedRepository(kind, 'faults');
      redisPort = await freePort();
      redis = await startRedis(redisPort);
      for (const id of NODES) ports[id] = await freePort();
      sched = await startSchedulerProcess(schedulerConfig());
      rpc = schedulerClient(sched.grpcAddress);
      // One after the other: the first registers the base template in the shared repository, the others find it.
      for (const id of NODES) nodes.set(id, await startNode(id));
      for (let i = 0; i < 2; i++)
        gateways.push(await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, apiKey));
      await eventually(
        async () => (await seenBy(gateways[0]!)) === 3,
        'all three nodes to heartbeat',
        300,
        100,
      );
    });
    afterAll(async () => {
      for (const g of gateways) await g.stop().catch(() => undefined);
      rpc?.close();
      for (const n of nodes.values()) await n.shutdown().catch(() => undefined);
      await sched?.stop().catch(() => undefined);
      if (redis) await killed(redis);
      await repo?.cleanup();
    });

    const spread: { id: string; node: string }[] = [];

    it('places creates on all three nodes and serves each sandbox through either gateway', async () => {
      for (let i = 0; i < 3; i++) {
        const sbx = await Sandbox.create({ ...sdkAt(gateways[0]!), timeoutMs: 600_000 });
        spread.push({ id: sbx.sandboxId, node: (await boundNode(sbx.sandboxId))! });
      }
      expect(new Set(spread.map((s) => s.node))).toEqual(new Set(NODES));
      for (const { id } of spread) {
        const sbx = await Sandbox.connect(id, { ...sdkAt(gateways[1]!), timeoutMs: 600_000 });
        expect((await sbx.commands.run(`echo ${id}`)).stdout.trim()).toBe(id);
      }
    });

    it('Redis restarted empty: the heartbeats bind every sandbox again and both gateways route as before', async () => {
      await killed(redis);
      // Without its store the scheduler says so, and the gateway answers 503 rather than a wrong 404.
      await eventually(
        async () => (await gw(gateways[0]!, 'GET', `/sandboxes/${spread[0]!.id}`)).status === 503,
        'lookups to fail while Redis is down',
        100,
        100,
      );
      redis = await startRedis(redisPort);
      for (const { id, node: on } of spread) {
        await eventually(
          async () => (await boundNode(id)) === on,
          `${id} to be bound again to ${on}`,
          300,
          100,
        );
        for (const g of gateways) {
          const info = await gw(g, 'GET', `/sandboxes/${id}`);
          expect(info.status).toBe(200);
          expect(await info.json()).toMatchObject({ sandboxID: id, state: 'running' });
        }
      }
    });

    it('scheduler restarted: its bindings are still in Redis, and creates go on', async () => {
      const grpcPort = sched.grpcPort;
      await sched.stop();
      rpc.close();
      sched = await startSchedulerProcess(schedulerConfig(), { grpcPort });
      rpc = schedulerClient(sched.grpcAddress);
      // Before any node has heartbeated to it, the new scheduler already knows every binding (from Redis).
      for (const { id, node: on } of spread) expect(await boundNode(id)).toBe(on);
      await eventually(async () => (await seenBy(gateways[1]!)) === 3, 'the nodes to report again', 300, 100);
      const sbx = await Sandbox.create({ ...sdkAt(gateways[1]!), timeoutMs: 600_000 });
      expect((await sbx.commands.run('echo after-restart')).stdout.trim()).toBe('after-restart');
      expect(await sbx.kill()).toBe(true);
    });

    it('kill -9 of a node: its paused sandboxes resume on another node with their processes (connect, and auto-resume on traffic through a gateway); its running one is lost', async () => {
      const paused = await workloadVia(gateways[0]!);
      const victim = (await boundNode(paused.sbx.sandboxId))!;
      const running = spread.find((s) => s.node === victim)!;
      // One that auto-resumes, created on the same node (straight at it: the gateway picks a node itself) and bound
      // there by the node's heartbeat before it is paused through the gateway.
      const atVictim = { apiUrl: node(victim).url, sandboxUrl: node(victim).url, apiKey, debug: false };
      const wakesSbx = await Sandbox.create({
        ...atVictim,
        timeoutMs: 600_000,
        lifecycle: { onTimeout: 'pause', autoResume: true },
      });
      const wakes = { id: wakesSbx.sandboxId, w: await startWorkload(node(victim), wakesSbx) };
      await eventually(
        async () => (await boundNode(wakes.id)) === victim,
        `${wakes.id} to be bound`,
        300,
        100,
      );
      await pausedIntoRepository(node(victim), gateways[0]!, paused.sbx.sandboxId);
      await pausedIntoRepository(node(victim), gateways[0]!, wakes.id);
      await node(victim).crash();

      // Once the scheduler sees the node gone, the gateway sends the connect to a node that takes the sandbox over.
      await eventually(
        async () => {
          const r = await gw(gateways[1]!, 'POST', `/sandboxes/${paused.sbx.sandboxId}/connect`, {
            timeout: 600,
          });
          return r.status === 200 || r.status === 201;
        },
        'the paused sandbox to resume on another node',
        600,
        200,
      );
      const now = await boundNode(paused.sbx.sandboxId);
      expect(now).not.toBe(victim);
      await sameProcesses(gateways[1]!, paused.sbx.sandboxId, paused.w);

      // A data-plane request alone, through the other gateway, wakes the auto-resuming one on a surviving node, with
      // its memory (the server's secret). Until that gateway sees the node gone it may try the dead node: a 502.
      let woke: { status: number; body: string } | undefined;
      await eventually(
        async () => {
          woke = await workloadFetch(dataPlane(gateways[0]!), wakes.id, '/secret').catch(() => undefined);
          return woke?.status === 200;
        },
        'a request through the gateway to auto-resume the sandbox elsewhere',
        300,
        200,
      );
      expect(woke!.body).toBe(wakes.w.secret);
      // The gateway bound it to that node before forwarding; a heartbeat the node sent while it was still resuming
      // it drops that binding (reconcile from the roster), the next one binds it again.
      let wokeOn: string | undefined;
      await eventually(
        async () => {
          wokeOn = await boundNode(wakes.id);
          return wokeOn !== undefined;
        },
        `${wakes.id} to be bound to the node that woke it`,
        300,
        100,
      );
      expect(wokeOn).not.toBe(victim);
      expect((await node(wokeOn!).api('GET', `/sandboxes/${wakes.id}`)).body).toMatchObject({
        state: 'running',
      });
      await sameProcesses(gateways[0]!, wakes.id, wakes.w);

      const lost = await gw(gateways[0]!, 'POST', `/sandboxes/${running.id}/connect`, { timeout: 60 });
      expect(lost.status).toBe(404);
      expect(((await lost.json()) as { message: string }).message).toContain(
        `is lost: it was running on node ${victim}`,
      );

      // While the node is away its binding expires (binding_ttl); it comes back with its running sandbox, and the
      // ones that moved stay where they went.
      await eventually(
        async () => (await boundNode(running.id)) === undefined,
        `the lost node's binding of ${running.id} to expire`,
        150,
        100,
      );
      nodes.set(victim, await node(victim).restart());
      await eventually(
        async () => (await boundNode(running.id)) === victim,
        'the returning node to report its running sandbox',
        300,
        100,
      );
      // The gateways see the node healthy again at their next view refresh (every second); until then a request for
      // its sandbox may still go to another node, which answers that the sandbox is lost: never a second copy.
      await eventually(
        async () => {
          const back = await Sandbox.connect(running.id, {
            ...sdkAt(gateways[0]!),
            timeoutMs: 600_000,
          }).catch(() => undefined);
          return (await back?.commands.run('echo back').catch(() => undefined))?.stdout.trim() === 'back';
        },
        'the returned node to serve its running sandbox through the gateway',
        100,
        200,
      );
      for (const moved of [paused.sbx.sandboxId, wakes.id])
        expect((await node(victim).api('GET', `/sandboxes/${moved}`)).status).toBe(404);
      expect(await Sandbox.kill(paused.sbx.sandboxId, sdkAt(gateways[0]!))).toBe(true);
      expect(await Sandbox.kill(wakes.id, sdkAt(gateways[0]!))).toBe(true);
    });

    it('drain of a node: the gateways stop placing there and its sandbox comes back on another node', async () => {
      const { sbx, w } = await workloadVia(gateways[0]!);
      const drained = (await boundNode(sbx.sandboxId))!;
      // As a user drains a node of a cluster: the CLI pointed at a gateway, which sends the drain and the progress
      // polls to the named node (a node Schedule picked would answer 404 for another's id).
      const ran = await runCli(['node', 'drain', drained, '--wait', '--output', 'json'], {
        AENV_URL: gateways[1]!.url,
        AENV_API_KEY: apiKey,
      });
      expect(ran.code, `${ran.stdout}\n${ran.stderr}`).toBe(0);
      const progress = JSON.parse(ran.stdout) as Record<string, unknown>;
      expect(progress).toMatchObject({ node: drained, done: true, failed: 0, running: 0, paused: 0 });
      expect(progress.handedOver).toBeGreaterThanOrEqual(1);
      const shown = await gw(gateways[0]!, 'GET', `/nodes/${drained}`);
      expect(await shown.json()).toMatchObject({ id: drained, status: 'draining', drain: { done: true } });
      await sameProcesses(gateways[1]!, sbx.sandboxId, w);
      expect(await boundNode(sbx.sandboxId)).not.toBe(drained);
      // While it lingers, new sandboxes go elsewhere.
      for (let i = 0; i < 3; i++) {
        const placed = await Sandbox.create({ ...sdkAt(gateways[0]!), timeoutMs: 600_000 });
        expect(await boundNode(placed.sandboxId)).not.toBe(drained);
        expect(await placed.kill()).toBe(true);
      }
      expect(await sbx.kill()).toBe(true);
      // A drained node takes work again only after a restart.
      await node(drained).stop();
      nodes.set(drained, await node(drained).restart());
    });

    it('one gateway killed: the other lists and serves every sandbox', async () => {
      const [first, second] = gateways as [GatewayProcess, GatewayProcess];
      await first.stop('SIGKILL');
      // (The drain above handed one of them to the shared repository: this connect brings it back.)
      for (const { id } of spread) {
        const sbx = await Sandbox.connect(id, { ...sdkAt(second), timeoutMs: 600_000 });
        expect((await sbx.commands.run('true')).exitCode).toBe(0);
      }
      const listed = (await (await gw(second, 'GET', '/v2/sandboxes')).json()) as { sandboxID: string }[];
      expect(listed.map((s) => s.sandboxID).sort()).toEqual(spread.map((s) => s.id).sort());
    });

    it('leaves nothing behind on any node', async () => {
      for (const name of NODES) expect(await endNode(node(name))).toEqual({ stray: [], exitCode: 0 });
      nodes.clear();
    });
  },
);
