import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
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
  startServer,
  startWorkload,
  useSdk,
  workloadFetch,
  type TestServer,
  type Workload,
} from './harness.js';
import {
  REPOSITORY_KINDS,
  sharedRepository,
  type RepositoryKind,
  type SharedRepository,
} from './shared-repository.js';

const NODE_STATUS_LINGERING = 4;
/** `paused_retention_secs` of the node whose sandbox is left held by no node (its pause and copy come first). */
const RETENTION_SECS = 10;

/**
 * Sandboxes that outlive their node (docs/cluster.md#sandboxes-that-move): two real nodes and a real scheduler
 * sharing one repository (moto S3, then a shared directory), the cluster's secrets the same on both nodes. A
 * sandbox paused on A is connected on B with its memory (a python process and the secret only it holds); A
 * restarted drops its stale copy; a drain of A hands its sandbox over; after A is killed (-9) its paused
 * sandboxes resume on B (connect, and auto-resume on a data-plane request) while a running one is reported lost
 * by B, and comes back when A returns.
 */
describe.each<RepositoryKind>(REPOSITORY_KINDS)('sandboxes moving between nodes (%s)', (kind) => {
  const suffix = kind === 'oss' ? 'o' : 'p';
  const idA = `mob-a-${suffix}`;
  const idB = `mob-b-${suffix}`;
  let sched: SchedulerProcess;
  let rpc: TestSchedulerClient;
  let gateway: GatewayProcess;
  let a: TestServer;
  let b: TestServer;
  let repo: SharedRepository;

  const apiKey = `e2b_${randomBytes(32).toString('hex')}`;
  const env = {
    AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
    AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
  };
  const nodeOptions = (name: string, nodeId: string, extra: string[] = []) => {
    // The cluster's API key, where the node looks for it first (the managed file the harness reads back).
    // (The home stays between runs, as every e2e node's does: its sandbox volume stays mounted there.)
    const home = `/var/lib/aenv-e2e/${name}`;
    mkdirSync(home, { recursive: true, mode: 0o711 });
    const secrets = join(home, 'secrets');
    mkdirSync(secrets, { recursive: true, mode: 0o700 });
    writeFileSync(join(secrets, 'api-key'), `${apiKey}\n`, { mode: 0o600 });
    return {
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
        `node_id = "${nodeId}"`,
        ...extra,
      ].join('\n'),
    };
  };
  let portA = 0;
  let portB = 0;

  const observed = async (nodeId: string): Promise<Plain | undefined> => {
    const r = await rpc.call('ListObservedNodes', { cluster_id: '' });
    return (r.nodes as Plain[]).find((n) => n.node_id === nodeId);
  };
  /** Starts a sandbox with the workload on `node` (SDK pointed at it); `autoResume` for data-plane wake-ups. */
  const workloadOn = async (node: TestServer, autoResume = false) => {
    useSdk(node);
    const sbx = await Sandbox.create({
      timeoutMs: 600_000,
      ...(autoResume ? { lifecycle: { onTimeout: 'pause' as const, autoResume: true } } : {}),
    });
    return { sbx, w: await startWorkload(node, sbx) };
  };
  /** Pauses on `node` and waits until the pause is in the shared repository (its copy is in the background). */
  const pauseShared = async (node: TestServer, id: string) => {
    const copied = () =>
      node
        .logs()
        .split('\n')
        .filter((l) => l.includes('"paused sandbox copied to the repository"') && l.includes(id)).length;
    const before = copied();
    expect((await node.api('POST', `/sandboxes/${id}/pause`)).status).toBe(204);
    await eventually(() => copied() > before, `the pause of ${id} to reach the repository`, 600, 100);
  };
  /** The same process memory on the node now serving it: the python server's secret and the counter loop. */
  const sameProcesses = async (node: TestServer, id: string, w: Workload) => {
    useSdk(node);
    const moved = await Sandbox.connect(id);
    expect((await workloadFetch(node, id, '/secret')).body).toBe(w.secret);
    const view = await readWorkload(moved, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
    return moved;
  };

  /** Points the e2b SDK at the gateway. */
  const useGateway = () => {
    process.env.E2B_API_URL = gateway.url;
    process.env.E2B_SANDBOX_URL = gateway.url;
    process.env.E2B_API_KEY = apiKey;
  };
  /**
   * The states of `id`'s entries in the cluster list through the gateway (docs/cluster.md#the-cluster-list): in one
   * `GET /v2/sandboxes`, and in a walk of the SDK's `Sandbox.list` paginator in pages of one.
   */
  const listedThroughGateway = async (id: string) => {
    const r = await fetch(`${gateway.url}/v2/sandboxes`, { headers: { 'x-api-key': apiKey } });
    if (r.status !== 200) return { status: r.status, raw: [], sdk: [] };
    const raw = ((await r.json()) as { sandboxID: string; state: string }[])
      .filter((s) => s.sandboxID === id)
      .map((s) => s.state);
    useGateway();
    const paginator = Sandbox.list({ limit: 1 });
    const sdk: string[] = [];
    for (let i = 0; paginator.hasNext && i < 100; i++)
      for (const s of await paginator.nextItems()) if (s.sandboxId === id) sdk.push(s.state);
    return { status: r.status, raw, sdk };
  };
  const expectListedOnce = async (id: string, state: 'running' | 'paused') =>
    expect(await listedThroughGateway(id), `${id} listed once, ${state}`).toEqual({
      status: 200,
      raw: [state],
      sdk: [state],
    });
  /** Until the gateway sees a killed node lost, that node (asked, not answering) makes the list 502. */
  const gatewayListsAgain = () =>
    eventually(
      async () =>
        (await fetch(`${gateway.url}/v2/sandboxes`, { headers: { 'x-api-key': apiKey } })).status === 200,
      'the gateway to see the killed node lost and list again',
      300,
      100,
    );

  beforeAll(async () => {
    repo = sharedRepository(kind, 'mobility');
    [portA, portB] = [await freePort(), await freePort()];
    sched = await startSchedulerProcess({
      scheduler: {
        nodes: [
          { id: idA, endpoint: `http://127.0.0.1:${portA}` },
          { id: idB, endpoint: `http://127.0.0.1:${portB}` },
        ],
        // A node killed -9 is UNHEALTHY soon (the nodes heartbeat every second).
        report_ttl: '5s',
      },
    });
    rpc = schedulerClient(sched.grpcAddress);
    gateway = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, apiKey);
    // One after the other: the first registers the base template in the shared repository, the second finds it.
    a = await startServer(nodeOptions(`moba${suffix}`, idA), portA);
    b = await startServer(nodeOptions(`mobb${suffix}`, idB), portB);
  });
  afterAll(async () => {
    rpc?.close();
    await gateway?.stop();
    for (const node of [a, b]) if (node) await node.shutdown().catch(() => undefined);
    await sched?.stop();
    await repo?.cleanup();
  });

  it('a sandbox paused on A connects on B with its processes; killed there, A restarted does not bring it back', async () => {
    const { sbx, w } = await workloadOn(a);
    await pauseShared(a, sbx.sandboxId);
    // Taken over and killed on B while A is away (stopped first: a running A would drop its stale copy by itself
    // within 10 s, the next test's case): A, restarted with its own (stale) copy, finds the claim is B's and drops
    // the copy before it reports, rather than bringing the sandbox back.
    await a.stop();
    await sameProcesses(b, sbx.sandboxId, w);
    expect(b.logs()).toContain('"took over a sandbox paused on another node"');
    const onB = await b.api('GET', `/sandboxes/${sbx.sandboxId}`);
    expect(onB.body).toMatchObject({ state: 'running' });
    expect((await b.api('DELETE', `/sandboxes/${sbx.sandboxId}`)).status).toBe(204);
    a = await a.restart();
    const onA = await a.api('GET', `/sandboxes/${sbx.sandboxId}`);
    expect(onA.status).toBe(404);
    expect(a.logs()).toContain('"dropped paused sandboxes that moved to other nodes"');
  });

  it('a node that stays up drops its copy of a paused sandbox another node took over, so its roster no longer binds it', async () => {
    const { sbx } = await workloadOn(a);
    const id = sbx.sandboxId;
    await pauseShared(a, id);
    // Taken over on B while A is up (as when A was thought lost for a while and came back).
    expect((await b.api('POST', `/sandboxes/${id}/connect`, { timeout: 300 })).status).toBeLessThan(300);
    const listedOnA = async () =>
      ((await a.api('GET', '/v2/sandboxes?state=running&state=paused')).body as { sandboxID: string }[]).some(
        (s) => s.sandboxID === id,
      );
    await eventually(
      async () => !(await listedOnA()),
      'A to drop its stale copy (checked every 10 s)',
      300,
      100,
    );
    expect(a.logs()).toContain('"dropped paused sandboxes that moved to other nodes"');
    // A heartbeat of A's built before the drop may still land: past one interval, B holds it, heartbeat after heartbeat.
    await new Promise((r) => setTimeout(r, 1500));
    for (let i = 0; i < 3; i++) {
      expect(((await rpc.call('LookupNode', { sandbox_id: id })).node as Plain).node_id).toBe(idB);
      await new Promise((r) => setTimeout(r, 1000));
    }
    expect((await b.api('DELETE', `/sandboxes/${id}`)).status).toBe(204);
  });

  it('drain: A takes no new sandboxes, heartbeats LINGERING, hands its running sandbox over; it comes back on B', async () => {
    const { sbx, w } = await workloadOn(a);
    const started = await a.api('POST', `/nodes/${idA}/drain`);
    expect(started.status).toBe(202);
    expect(started.body).toMatchObject({ node: idA });
    // Repeating it joins the same drain; another node's id and a missing key are refused.
    const again = await a.api('POST', `/nodes/${idA}/drain`);
    expect(again).toMatchObject({ status: 202, body: { startedAt: started.body.startedAt } });
    expect((await a.api('POST', `/nodes/${idB}/drain`)).body).toEqual({
      code: 404,
      message: `node ${idB} not found`,
    });
    expect((await fetch(`${a.url}/nodes/${idA}/drain`, { method: 'POST' })).status).toBe(401);
    await eventually(
      async () => (await a.api('GET', `/nodes/${idA}`)).body?.drain?.done === true,
      'the drain to finish',
      600,
      100,
    );
    const view = await a.api('GET', `/nodes/${idA}`);
    expect(view.body).toMatchObject({
      status: 'draining',
      drain: { handedOver: 1, failed: 0, running: 0, paused: 0, done: true },
    });
    const refused = await a.api('POST', '/sandboxes', { templateID: 'base' });
    expect(refused).toMatchObject({
      status: 503,
      body: {
        code: 503,
        message: `node ${idA} is draining: it takes no new or resumed sandboxes (they start on another node)`,
      },
    });
    await eventually(
      async () => ((await observed(idA))?.snapshot as Plain | undefined)?.status === NODE_STATUS_LINGERING,
      'the scheduler to see A lingering',
      300,
      100,
    );
    for (let i = 0; i < 4; i++) {
      const placed = await rpc.call('Schedule', {});
      expect((placed.node as Plain).node_id).toBe(idB);
    }
    // Held by no node now (A, still up, lists its own no more; its copy in the repository says it was handed
    // over): the list through the gateway shows it once, paused. A connect through the gateway resumes it on B.
    await expectListedOnce(sbx.sandboxId, 'paused');
    useGateway();
    await Sandbox.connect(sbx.sandboxId);
    await sameProcesses(b, sbx.sandboxId, w);
    await expectListedOnce(sbx.sandboxId, 'running');
    expect((await b.api('DELETE', `/sandboxes/${sbx.sandboxId}`)).status).toBe(204);
    // A drained node takes work again only after a restart.
    await a.stop();
    a = await a.restart();
  });

  it('kill -9 of A: its paused sandboxes resume on B (connect, auto-resume), a running one is lost until A returns', async () => {
    const running = await workloadOn(a);
    const paused = await workloadOn(a);
    const wakes = await workloadOn(a, true);
    const gone = await workloadOn(a);
    await pauseShared(a, paused.sbx.sandboxId);
    await pauseShared(a, wakes.sbx.sandboxId);
    await pauseShared(a, gone.sbx.sandboxId);
    await a.crash();

    // The list through the gateway, once it sees A lost: A's paused sandboxes once each, paused, from the
    // repository; its running one, lost, not at all.
    await gatewayListsAgain();
    for (const s of [paused, wakes, gone]) await expectListedOnce(s.sbx.sandboxId, 'paused');
    expect(await listedThroughGateway(running.sbx.sandboxId)).toEqual({ status: 200, raw: [], sdk: [] });

    // Through the gateway, once it sees A is lost (its binding still names A): GET shows a sandbox paused there
    // as paused (B took it over, and it is bound to B); DELETE kills it for good.
    const viaGateway = (method: string) =>
      fetch(`${gateway.url}/sandboxes/${gone.sbx.sandboxId}`, { method, headers: { 'x-api-key': apiKey } });
    let shown = await viaGateway('GET');
    for (let i = 0; i < 300 && shown.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      shown = await viaGateway('GET');
    }
    expect(shown.status).toBe(200);
    expect(await shown.json()).toMatchObject({ sandboxID: gone.sbx.sandboxId, state: 'paused' });
    expect(((await rpc.call('LookupNode', { sandbox_id: gone.sbx.sandboxId })).node as Plain).node_id).toBe(
      idB,
    );
    expect((await viaGateway('DELETE')).status).toBe(204);
    expect((await b.api('POST', `/sandboxes/${gone.sbx.sandboxId}/connect`, { timeout: 60 })).status).toBe(
      404,
    );
    expect((await b.api('GET', `/sandboxes/${gone.sbx.sandboxId}`)).status).toBe(404);

    await sameProcesses(b, paused.sbx.sandboxId, paused.w);
    // A data-plane request alone brings the auto-resuming one back, on B.
    expect((await workloadFetch(b, wakes.sbx.sandboxId, '/secret')).body).toBe(wakes.w.secret);
    expect((await b.api('GET', `/sandboxes/${wakes.sbx.sandboxId}`)).body).toMatchObject({
      state: 'running',
    });
    // Listed once each as running now (B's), the killed one not at all.
    for (const s of [paused, wakes]) await expectListedOnce(s.sbx.sandboxId, 'running');
    expect((await listedThroughGateway(gone.sbx.sandboxId)).raw).toEqual([]);

    const lost = await b.api('POST', `/sandboxes/${running.sbx.sandboxId}/connect`, { timeout: 60 });
    expect(lost.status).toBe(404);
    // GET says the same of it (and a DELETE cannot take it: its node may return).
    expect((await b.api('GET', `/sandboxes/${running.sbx.sandboxId}`)).body).toEqual(lost.body);
    expect(lost.body.message).toBe(
      `sandbox ${running.sbx.sandboxId} is lost: it was running on node ${idA}, which no longer serves it, and it has no paused copy in the shared repository; it comes back if node ${idA} returns`,
    );

    a = await a.restart();
    expect((await a.api('GET', `/sandboxes/${running.sbx.sandboxId}`)).body).toMatchObject({
      state: 'running',
    });
    await sameProcesses(a, running.sbx.sandboxId, running.w);
    for (const moved of [paused.sbx.sandboxId, wakes.sbx.sandboxId, gone.sbx.sandboxId]) {
      expect((await a.api('GET', `/sandboxes/${moved}`)).status).toBe(404);
    }
  });

  it('a paused sandbox held by no node is deleted past the paused_retention_secs its node recorded', async () => {
    // A restarted with a short retention (B keeps paused sandboxes: 0).
    await a.shutdown();
    a = await startServer(
      nodeOptions(`moba${suffix}`, idA, ['[orchestrator]', `paused_retention_secs = ${RETENTION_SECS}`]),
      portA,
    );
    useSdk(b);
    const kept = await Sandbox.create({ timeoutMs: 600_000 });
    await pauseShared(b, kept.sandboxId);
    useSdk(a);
    const orphan = await Sandbox.create({ timeoutMs: 600_000 });
    const id = orphan.sandboxId;
    await pauseShared(a, id);
    // Lost right after the pause: no node holds it, and B (the one node up) sweeps.
    await a.crash();
    const swept = () =>
      b
        .logs()
        .split('\n')
        .some(
          (l) => l.includes('"paused sandbox held by no node deleted: retention expired"') && l.includes(id),
        );
    await eventually(swept, 'B to delete the expired sandbox held by no node', 600, 100);
    await gatewayListsAgain();
    expect(await listedThroughGateway(id)).toEqual({ status: 200, raw: [], sdk: [] });
    const connect = await fetch(`${gateway.url}/sandboxes/${id}/connect`, {
      method: 'POST',
      headers: { 'x-api-key': apiKey, 'content-type': 'application/json' },
      body: '{"timeout":60}',
    });
    expect(connect.status).toBe(404);
    expect(await connect.json()).toEqual({ code: 404, message: `sandbox ${id} not found` });
    // B's own paused sandbox, held by B, is untouched.
    await expectListedOnce(kept.sandboxId, 'paused');
    // A, back with its own copy, finds the sandbox killed and drops it rather than bringing it back.
    a = await a.restart();
    expect((await a.api('GET', `/sandboxes/${id}`)).status).toBe(404);
    expect((await b.api('DELETE', `/sandboxes/${kept.sandboxId}`)).status).toBe(204);
  });

  it('leaves nothing behind on either node', async () => {
    for (const node of [a, b]) expect(await endNode(node)).toEqual({ stray: [], exitCode: 0 });
  });
});
