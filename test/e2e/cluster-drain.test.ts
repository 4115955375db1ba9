import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  schedulerClient,
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
  startServer,
  startWorkload,
  useSdk,
  workloadFetch,
  type TestServer,
  type Workload,
} from './harness.js';

const GRPC_NOT_FOUND = 5;

/**
 * A drain's `done` as a client relies on it (docs/cluster.md#draining): once the drained node says done, the
 * scheduler binds none of its handed-over sandboxes to it any more, so a connect through a gateway at that moment
 * resumes the sandbox, with its processes, on another node. The nodes heartbeat only every 60 s here: no routine
 * heartbeat drops a binding between the handover and the connect, only the drain's own report does. A drain of a
 * node holding only a paused sandbox is done within a moment, before the gateway's view of the nodes (refreshed
 * every second) shows the node lingering: without that report the connect reached the drained node, which answered
 * 404 (the e2b SDK's `Paused sandbox … not found`).
 */
describe('a connect through a gateway right after a drain', () => {
  const idA = 'drn-a';
  const idB = 'drn-b';
  const apiKey = `e2b_${randomBytes(32).toString('hex')}`;
  const env = {
    AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
    AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
  };
  const shared = `/var/lib/aenv-e2e/drnshared-${randomUUID().slice(0, 8)}`;
  let sched: SchedulerProcess;
  let rpc: TestSchedulerClient;
  let gateway: GatewayProcess;
  let a: TestServer;
  let b: TestServer;
  let portA = 0;
  let portB = 0;

  const nodeOptions = (name: string, nodeId: string) => {
    const home = `/var/lib/aenv-e2e/${name}`;
    mkdirSync(join(home, 'secrets'), { recursive: true, mode: 0o700 });
    writeFileSync(join(home, 'secrets', 'api-key'), `${apiKey}\n`, { mode: 0o600 });
    return {
      name,
      env,
      toml: [
        '[snapshot]',
        'repository_backend = "posix_fs"',
        '[backend.posix_fs]',
        `snapshot_store = "${shared}"`,
        '[cluster]',
        `scheduler_endpoint = "http://${sched.grpcAddress}"`,
        '[observability.scheduler_report]',
        'enabled = true',
        'interval_secs = 60',
        '[node_identity]',
        `node_id = "${nodeId}"`,
      ].join('\n'),
    };
  };
  const sdk = () => ({ apiUrl: gateway.url, sandboxUrl: gateway.url, apiKey, debug: false });
  /** The data plane through the gateway: what the harness's workload helpers need of a "server". */
  const viaGateway = () => ({ url: gateway.url }) as TestServer;
  const gw = async (method: string, path: string) => {
    const r = await fetch(gateway.url + path, { method, headers: { 'x-api-key': apiKey } });
    const text = await r.text();
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the tests assert on its shape
    return { status: r.status, body: text ? (JSON.parse(text) as any) : undefined };
  };

  beforeAll(async () => {
    mkdirSync(shared, { recursive: true, mode: 0o700 });
    [portA, portB] = [await freePort(), await freePort()];
    sched = await startSchedulerProcess({
      scheduler: {
        nodes: [
          { id: idA, endpoint: `http://127.0.0.1:${portA}` },
          { id: idB, endpoint: `http://127.0.0.1:${portB}` },
        ],
        // Longer than the test: nothing here is expired away, every change comes from a heartbeat or a record.
        report_ttl: '600s',
        binding_ttl: '600s',
      },
    });
    rpc = schedulerClient(sched.grpcAddress);
    gateway = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, apiKey);
    // One after the other: the first registers the base template in the shared repository, the second finds it.
    a = await startServer(nodeOptions('drna', idA), portA);
    b = await startServer(nodeOptions('drnb', idB), portB);
    await eventually(
      async () => ((await gw('GET', '/nodes')).body as unknown[]).length === 2,
      'both nodes to register',
      300,
      100,
    );
  });
  afterAll(async () => {
    rpc?.close();
    await gateway?.stop();
    for (const node of [a, b]) if (node) await node.shutdown().catch(() => undefined);
    await sched?.stop();
    rmSync(shared, { recursive: true, force: true });
  });

  /** A sandbox with the workload on A (created through its own API), bound there as the gateway binds a create. */
  const workloadOnA = async () => {
    useSdk(a);
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    const w = await startWorkload(a, sbx);
    await rpc.call('RecordAssignment', {
      sandbox_id: sbx.sandboxId,
      node: { node_id: idA, endpoint: `http://127.0.0.1:${portA}` },
    });
    return { sbx, w };
  };
  /**
   * Drains A through the gateway, as a user does, polls its progress there until it is done, and runs `then`; A is
   * restarted afterwards whatever happened (a drained node takes work again only after a restart).
   */
  const drainA = async (then: () => Promise<void>) => {
    try {
      expect((await gw('POST', `/nodes/${idA}/drain`)).status).toBe(202);
      await eventually(
        async () => (await gw('GET', `/nodes/${idA}`)).body?.drain?.done === true,
        'the drain to finish',
        1200,
        50,
      );
      await then();
    } finally {
      await a.stop();
      a = await a.restart();
    }
  };
  /** Connected through the gateway: the same processes, now on B. */
  const onBWithItsProcesses = async (moved: Sandbox, w: Workload) => {
    expect((await workloadFetch(viaGateway(), moved.sandboxId, '/secret')).body).toBe(w.secret);
    expect(await readWorkload(moved, w)).toMatchObject({
      counterAlive: true,
      serverAlive: true,
      file: w.file,
    });
    expect((await b.api('GET', `/sandboxes/${moved.sandboxId}`)).body).toMatchObject({ state: 'running' });
    await moved.kill();
  };

  it('a paused sandbox of a node drained just now connects through the gateway at once, on the other node', async () => {
    const { sbx, w } = await workloadOnA();
    // Its copy is in the repository before the drain: the drain hands it over and is done within a moment.
    const copied = () =>
      a
        .logs()
        .split('\n')
        .some((l) => l.includes('"paused sandbox copied to the repository"') && l.includes(sbx.sandboxId));
    expect((await gw('POST', `/sandboxes/${sbx.sandboxId}/pause`)).status).toBe(204);
    await eventually(copied, 'the pause to reach the repository', 600, 100);
    await drainA(async () =>
      onBWithItsProcesses(await Sandbox.connect(sbx.sandboxId, { ...sdk(), timeoutMs: 600_000 }), w),
    );
  });

  it('a running sandbox of the drained node is no longer bound to it when the drain is done', async () => {
    const { sbx, w } = await workloadOnA();
    await drainA(async () => {
      expect((await rpc.fail('LookupNode', { sandbox_id: sbx.sandboxId })).code).toBe(GRPC_NOT_FOUND);
      await onBWithItsProcesses(await Sandbox.connect(sbx.sandboxId, { ...sdk(), timeoutMs: 600_000 }), w);
    });
  });

  it('leaves nothing behind on either node', async () => {
    for (const node of [a, b]) expect(await endNode(node)).toEqual({ stray: [], exitCode: 0 });
  });
});
