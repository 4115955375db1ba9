// A real `aenv scheduler` process on loopback with the test Redis, driven by grpc-js (another gRPC
// implementation than the server's): every RPC, the reference's status codes, restarts, outages.
import { connect as h2connect } from 'node:http2';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from './testing/eventually.js';
import { grpc, schedulerClient, type TestSchedulerClient } from './testing/grpc-client.js';
import { redisUrl } from './testing/redis.js';
import { startSchedulerProcess, type SchedulerProcess } from './testing/scheduler-process.js';
import { TcpProxy } from './testing/tcp-proxy.js';
import { createSchedulerClient } from './client.js';

// This file's Redis database; only keys under the reference's prefix are touched there.
const DB = 7;
const PREFIX = 'agentenv:scheduler:bindings';
const A = { node_id: 'node-a', endpoint: 'http://127.0.0.1:18001' };
const B = { node_id: 'node-b', endpoint: 'http://127.0.0.1:18002' };
const { status } = grpc;

const admin = new Redis(redisUrl(DB));
async function clearBindings(): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${PREFIX}:*`, 'COUNT', 1000);
    if (keys.length > 0) await admin.del(...keys);
    cursor = next;
  } while (cursor !== '0');
}

const baseConfig = (redis: string | undefined) => ({
  scheduler: {
    redis_addr: redis,
    nodes: [
      { id: A.node_id, endpoint: A.endpoint },
      { id: B.node_id, endpoint: B.endpoint },
    ],
    node_resource_limit: { max_sandbox_count: 50 },
  },
});

const heartbeat = (
  node: typeof A,
  sandboxIds: string[],
  snapshot: Record<string, unknown> = {},
  extra = {},
) => ({
  node_id: node.node_id,
  cluster_id: 'cluster-1',
  service_instance_id: `${node.node_id}-instance-1`,
  version: '0.1.0',
  commit: 'abc',
  machine_info: { cpu_family: '6', cpu_model: '85', cpu_model_name: 'Test CPU', cpu_architecture: 'x86_64' },
  snapshot: { status: 1, cpu_count: 8, memory_total_bytes: String(32 * 1024 ** 3), ...snapshot },
  sandbox_ids: sandboxIds,
  ...extra,
});

async function nodeOf(c: TestSchedulerClient, sandboxId: string): Promise<string> {
  const res = (await c.call('LookupNode', { sandbox_id: sandboxId })) as { node: { node_id: string } };
  return res.node.node_id;
}

describe('scheduler process with Redis bindings', () => {
  let s: SchedulerProcess;
  let c: TestSchedulerClient;

  beforeAll(async () => {
    await clearBindings();
    s = await startSchedulerProcess(baseConfig(redisUrl(DB)));
    c = schedulerClient(s.grpcAddress);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    await clearBindings();
    admin.disconnect();
  });

  it('lists the static nodes and places round-robin; refuses when every node is over its limit', async () => {
    expect(await c.call('ListNodes', {})).toEqual({ nodes: [A, B] });
    const placed = [];
    for (let i = 0; i < 4; i++)
      placed.push(((await c.call('Schedule', {})) as { node: { node_id: string } }).node.node_id);
    expect(new Set(placed)).toEqual(new Set([A.node_id, B.node_id]));
    expect(placed[0]).not.toBe(placed[1]);
    expect(placed[0]).toBe(placed[2]);

    await c.call('Heartbeat', heartbeat(A, [], { sandbox_count: 51 }));
    await c.call('Heartbeat', heartbeat(B, [], { sandbox_count: 51 }));
    expect(await c.fail('Schedule', { hint: { new_sandbox: { metadata: { team: 'x' } } } })).toEqual({
      code: status.UNAVAILABLE,
      details: 'no nodes available',
    });
    await c.call('Heartbeat', heartbeat(B, [], { sandbox_count: 50 }));
    const cold = {
      hint: { new_cold_sandbox: { cpu_count: 2, memory_mb: '512', images: ['docker.io/library/alpine'] } },
    };
    expect(await c.call('Schedule', cold)).toEqual({ node: B });
  });

  it('binds from rosters and records, moves sandboxes between nodes, reconciles, and answers NotFound', async () => {
    await c.call('Heartbeat', heartbeat(A, ['s1', 's2']));
    expect(await nodeOf(c, 's1')).toBe(A.node_id);
    await c.call('RecordAssignment', { sandbox_id: 's3', node: B });
    expect(await nodeOf(c, 's3')).toBe(B.node_id);
    await c.call('Heartbeat', heartbeat(B, ['s1', 's3']));
    expect(await nodeOf(c, 's1')).toBe(B.node_id);
    await c.call('Heartbeat', heartbeat(A, []));
    expect(await c.fail('LookupNode', { sandbox_id: 's2' })).toEqual({
      code: status.NOT_FOUND,
      details: 'sandbox assignment not found',
    });
    expect(await nodeOf(c, 's1')).toBe(B.node_id);
    // The reference's layout, readable by its schedulers and gateways.
    expect(await admin.get(`${PREFIX}:sandbox:s3`)).toBe(JSON.stringify({ node: B }));
    expect((await admin.smembers(`${PREFIX}:node:${B.node_id}`)).sort()).toEqual(['s1', 's3']);
    expect(await admin.exists(`${PREFIX}:node:${A.node_id}`)).toBe(0);
  });

  it('refuses unknown nodes and bad input with the reference’s codes and messages, and keeps serving', async () => {
    const notInList = { code: status.INVALID_ARGUMENT, details: 'node is not in scheduler node list' };
    expect(
      await c.fail('Heartbeat', heartbeat({ node_id: 'intruder', endpoint: 'http://x' }, ['s1'])),
    ).toEqual(notInList);
    expect(
      await c.fail('RecordAssignment', {
        sandbox_id: 's9',
        node: { node_id: 'intruder', endpoint: 'http://x' },
      }),
    ).toEqual(notInList);
    // Known id, other endpoint: not that node.
    expect(
      await c.fail('RecordAssignment', { sandbox_id: 's9', node: { ...A, endpoint: 'http://evil:8000' } }),
    ).toEqual(notInList);
    expect(await nodeOf(c, 's1')).toBe(B.node_id);
    const invalid = (details: string) => ({ code: status.INVALID_ARGUMENT, details });
    expect(await c.fail('Heartbeat', { node_id: A.node_id })).toEqual(
      invalid('node_id and service_instance_id are required'),
    );
    expect(await c.fail('RecordAssignment', { sandbox_id: ' ', node: A })).toEqual(
      invalid('sandbox_id is required'),
    );
    expect(await c.fail('RecordAssignment', { sandbox_id: 's9' })).toEqual(
      invalid('node_id and endpoint are required'),
    );
    expect(await c.fail('LookupNode', {})).toEqual(invalid('sandbox_id is required'));
    expect(await c.fail('LookupNode', { sandbox_id: 'x'.repeat(513) })).toEqual(
      invalid('sandbox_id is longer than 512 bytes'),
    );
    expect(await c.fail('Heartbeat', heartbeat(A, ['ok', 'y'.repeat(600)]))).toEqual(
      invalid('sandbox_ids entry is longer than 512 bytes'),
    );
    expect(await c.fail('GetNode', {})).toEqual(invalid('node_id is required'));
    expect(await c.fail('GetNode', { node_id: 'ghost' })).toEqual({
      code: status.NOT_FOUND,
      details: 'observed node not found',
    });
    expect(await c.fail('UnregisterNode', { node_id: A.node_id })).toEqual(
      invalid('node_id and service_instance_id are required'),
    );
    expect(await c.fail('RecordP2pArtifact', { cluster_id: 'c', backend: 'tcp', key: 'k' })).toEqual(
      invalid('cluster_id, backend, key, and node_id are required'),
    );
    expect(await c.fail('LookupP2pArtifact', { cluster_id: 'c', backend: 'tcp' })).toEqual(
      invalid('cluster_id, backend, and key are required'),
    );

    // Over gRPC's 4 MiB: refused before it is parsed.
    const huge = await c.fail('RecordAssignment', { sandbox_id: 'z'.repeat(5 * 1024 * 1024), node: A });
    expect(huge.code).toBe(status.RESOURCE_EXHAUSTED);
    // Bytes that are no protobuf, and a method that does not exist.
    const garbage = await c.raw(
      '/scheduler.v1.Scheduler/LookupNode',
      Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]),
    );
    // INTERNAL, as grpc-go answers a request it cannot unmarshal.
    expect(garbage).toMatchObject({ code: status.INTERNAL });
    expect(await c.raw('/scheduler.v1.Scheduler/DropAllBindings', Buffer.alloc(0))).toMatchObject({
      code: status.UNIMPLEMENTED,
    });
    expect(await c.raw('/grpc.reflection.v1.ServerReflection/Info', Buffer.alloc(0))).toMatchObject({
      code: status.UNIMPLEMENTED,
    });
    // A client that keeps sending after its oversized message was refused: the server ends the stream
    // (RST_STREAM NO_ERROR) instead of leaving it half-open for as long as the client likes.
    const refused = await new Promise<{ status: unknown; rstCode: number }>((resolve) => {
      const session = h2connect(`http://${s.grpcAddress}`);
      session.on('error', () => {});
      const stream = session.request({
        ':method': 'POST',
        ':path': '/scheduler.v1.Scheduler/RecordAssignment',
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      stream.on('error', () => {});
      let status: unknown;
      stream.on('response', (headers) => (status ??= headers['grpc-status']));
      stream.on('trailers', (trailers) => (status ??= trailers['grpc-status']));
      stream.on('close', () => {
        resolve({ status, rstCode: stream.rstCode });
        session.close();
      });
      stream.resume();
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(5 * 1024 * 1024, 1);
      stream.write(prefix);
      stream.write(Buffer.alloc(32 * 1024));
    });
    expect(refused).toEqual({ status: String(status.RESOURCE_EXHAUSTED), rstCode: 0 });
    // Not gRPC at all: HTTP/1.1, and an HTTP/2 stream reset midway.
    await expect(
      fetch(`http://${s.grpcAddress}/scheduler.v1.Scheduler/ListNodes`, { method: 'POST' }),
    ).rejects.toThrow();
    await new Promise<void>((resolve) => {
      const session = h2connect(`http://${s.grpcAddress}`);
      session.on('error', () => {});
      const stream = session.request({
        ':method': 'POST',
        ':path': '/scheduler.v1.Scheduler/Heartbeat',
        'content-type': 'application/grpc',
      });
      stream.on('error', () => {});
      stream.write(Buffer.from([0, 0, 0, 0x10, 0]));
      stream.close(0x8);
      session.close(() => resolve());
    });
    expect(await c.call('ListNodes', {})).toEqual({ nodes: [A, B] });
  });

  it('reports observed nodes with derived status, accepts sandbox events, and unregisters a node', async () => {
    await c.call('Heartbeat', heartbeat(A, ['u1', 'u2'], { sandbox_count: 2, allocated_cpu: 4 }));
    const observed = (await c.call('ListObservedNodes', { cluster_id: 'cluster-1' })) as {
      nodes: Record<string, unknown>[];
    };
    const a = observed.nodes.find((n) => n.node_id === A.node_id)!;
    expect(a).toMatchObject({
      endpoint: A.endpoint,
      cluster_id: 'cluster-1',
      service_instance_id: 'node-a-instance-1',
      version: '0.1.0',
      machine_info: { cpu_model_name: 'Test CPU' },
      snapshot: { status: 1, sandbox_count: 2, allocated_cpu: 4, cpu_count: 8 },
    });
    expect(Number(a.last_seen_unix_ms)).toBeGreaterThan(0);
    expect(await c.call('ListObservedNodes', { cluster_id: 'other' })).toEqual({ nodes: [] });
    expect(await c.call('GetNode', { node_id: A.node_id, cluster_id: 'cluster-1' })).toMatchObject({
      node: { node_id: A.node_id },
    });
    expect(await c.fail('GetNode', { node_id: A.node_id, cluster_id: 'other' })).toMatchObject({
      code: status.NOT_FOUND,
    });
    expect(
      await c.call('ReportSandboxEvent', {
        node_id: A.node_id,
        cluster_id: 'cluster-1',
        service_instance_id: 'node-a-instance-1',
        events: [
          { sandbox_id: 'u1', event_type: 1, requested_cpu: 2, requested_memory_bytes: String(1024 ** 3) },
          { sandbox_id: 'u3', event_type: 5 },
        ],
      }),
    ).toEqual({});

    expect(
      await c.fail('UnregisterNode', { node_id: A.node_id, service_instance_id: 'an-older-instance' }),
    ).toEqual({
      code: status.FAILED_PRECONDITION,
      details: 'service instance mismatch',
    });
    expect(await nodeOf(c, 'u1')).toBe(A.node_id);
    await c.call('UnregisterNode', { node_id: A.node_id, service_instance_id: 'node-a-instance-1' });
    expect(await c.fail('LookupNode', { sandbox_id: 'u1' })).toMatchObject({ code: status.NOT_FOUND });
    expect(await c.fail('GetNode', { node_id: A.node_id })).toMatchObject({ code: status.NOT_FOUND });
    // Unregistering what is not registered is not an error (a node shutting down twice).
    await c.call('UnregisterNode', { node_id: A.node_id, service_instance_id: 'node-a-instance-1' });
  });

  it('serves the P2P artifact index: record, look up ready peers, forget, and forget a node', async () => {
    const p2p = (node: typeof A, port: number) => ({
      p2p_endpoint: { backend: 'tcp', address: `127.0.0.1:${port}` },
    });
    await c.call('Heartbeat', heartbeat(A, [], {}, p2p(A, 7001)));
    await c.call('Heartbeat', heartbeat(B, ['s1', 's3'], {}, p2p(B, 7002)));
    const key = { cluster_id: 'cluster-1', backend: 'tcp', key: 'sha256:layer-1' };
    await c.call('RecordP2pArtifact', { ...key, node_id: A.node_id });
    await c.call('RecordP2pArtifact', { ...key, node_id: B.node_id });
    expect(await c.fail('RecordP2pArtifact', { ...key, node_id: 'intruder' })).toEqual({
      code: status.INVALID_ARGUMENT,
      details: 'node is not in scheduler node list',
    });
    const peers = (res: Record<string, unknown>) =>
      (res.peers as { node_id: string; endpoint: { address: string } }[])
        .map((p) => `${p.node_id}@${p.endpoint.address}`)
        .sort();
    expect(peers(await c.call('LookupP2pArtifact', { ...key, exclude_node_id: A.node_id }))).toEqual([
      'node-b@127.0.0.1:7002',
    ]);
    expect(peers(await c.call('LookupP2pArtifact', { ...key, backend: 'rdma' }))).toEqual([]);
    expect(
      peers(
        await c.call('ListP2pPeers', { cluster_id: 'cluster-1', backend: 'tcp', exclude_node_id: B.node_id }),
      ),
    ).toEqual(['node-a@127.0.0.1:7001']);
    await c.call('ForgetP2pArtifact', { ...key, node_id: B.node_id });
    expect(peers(await c.call('LookupP2pArtifact', key))).toEqual(['node-a@127.0.0.1:7001']);
    await c.call('UnregisterNode', { node_id: A.node_id, service_instance_id: 'node-a-instance-1' });
    expect(peers(await c.call('LookupP2pArtifact', key))).toEqual([]);
  });

  it('exports the reference metrics', async () => {
    const text = await (await fetch(s.metricsUrl)).text();
    expect(text).toMatch(
      /agentenv_scheduler_rpc_duration_seconds_count\{rpc="Heartbeat",status="OK"\} [1-9]/,
    );
    expect(text).toMatch(
      /agentenv_scheduler_rpc_duration_seconds_count\{rpc="Heartbeat",status="InvalidArgument"\} [1-9]/,
    );
    expect(text).toMatch(
      /agentenv_scheduler_schedule_duration_seconds_count\{strategy="round_robin",status="Unavailable"\} 1/,
    );
    expect(text).toMatch(/agentenv_scheduler_schedule_assignments_total\{strategy="round_robin"\} 5/);
    expect(text).toMatch(/agentenv_scheduler_observed_nodes\{status="ready"\} 1/);
    expect((await fetch(s.metricsUrl.replace('/metrics', '/other'))).status).toBe(404);
  });

  it('keeps bindings across a scheduler restart (they live in Redis)', async () => {
    await c.call('RecordAssignment', { sandbox_id: 'survivor', node: B });
    c.close();
    expect(await s.stop()).toBe(0);
    s = await startSchedulerProcess(baseConfig(redisUrl(DB)), { grpcPort: s.grpcPort });
    c = schedulerClient(s.grpcAddress);
    // No heartbeat since the restart: the answer comes from Redis.
    expect(await nodeOf(c, 'survivor')).toBe(B.node_id);
    expect(await nodeOf(c, 's1')).toBe(B.node_id);
  });

  it('runs query-only: LookupNode from the same Redis, every other RPC unimplemented', async () => {
    const q = await startSchedulerProcess(baseConfig(redisUrl(DB)), { args: ['-query-only'] });
    const qc = schedulerClient(q.grpcAddress);
    try {
      expect(await nodeOf(qc, 'survivor')).toBe(B.node_id);
      expect(await qc.fail('LookupNode', { sandbox_id: 'never' })).toMatchObject({ code: status.NOT_FOUND });
      expect(await qc.fail('Schedule', {})).toMatchObject({ code: status.UNIMPLEMENTED });
      expect(await qc.fail('Heartbeat', heartbeat(B, []))).toMatchObject({ code: status.UNIMPLEMENTED });
      // Our own client (Connect's gRPC transport), as gateways and nodes will use it.
      const own = createSchedulerClient(q.grpcAddress);
      expect((await own.lookupNode({ sandboxId: 'survivor' })).node?.nodeId).toBe(B.node_id);
    } finally {
      qc.close();
      await q.stop();
    }
  });

  it('answers Unavailable while Redis is unreachable, and recovers when it is back', async () => {
    const proxy = new TcpProxy(Number(new URL(redisUrl()).port || 6379));
    await proxy.up();
    const r = await startSchedulerProcess(baseConfig(`redis://127.0.0.1:${proxy.port}/${DB}`));
    const rc = schedulerClient(r.grpcAddress);
    try {
      await rc.call('Heartbeat', heartbeat(A, ['outage-1']));
      expect(await nodeOf(rc, 'outage-1')).toBe(A.node_id);
      await proxy.down();
      const unavailable = { code: status.UNAVAILABLE, details: 'binding store unavailable' };
      expect(await rc.fail('LookupNode', { sandbox_id: 'outage-1' })).toEqual(unavailable);
      expect(await rc.fail('RecordAssignment', { sandbox_id: 'outage-2', node: A })).toEqual(unavailable);
      expect(await rc.fail('Heartbeat', heartbeat(A, ['outage-1']))).toEqual(unavailable);
      // Placement needs no store.
      expect(await rc.call('Schedule', {})).toHaveProperty('node');
      await proxy.up();
      await eventually(async () => expect(await nodeOf(rc, 'outage-1')).toBe(A.node_id), 15_000, 200);
      await rc.call('RecordAssignment', { sandbox_id: 'outage-2', node: A });
      expect(await nodeOf(rc, 'outage-2')).toBe(A.node_id);
    } finally {
      rc.close();
      await r.stop();
      await proxy.down();
    }
  });
});

describe('scheduler process and a draining node', () => {
  let s: SchedulerProcess;
  let c: TestSchedulerClient;
  beforeAll(async () => {
    s = await startSchedulerProcess(baseConfig(undefined));
    c = schedulerClient(s.grpcAddress);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
  });

  it('places nothing on a node that reports itself LINGERING (draining), whose bindings still answer', async () => {
    const LINGERING = 4;
    await c.call('Heartbeat', heartbeat(A, ['drain-1'], { status: LINGERING }));
    await c.call('Heartbeat', heartbeat(B, []));
    for (let i = 0; i < 4; i++) expect(await c.call('Schedule', {})).toEqual({ node: B });
    expect(await nodeOf(c, 'drain-1')).toBe(A.node_id);
    // Its sandbox moves when the node that took it reports it; the draining node's roster then lacks it.
    await c.call('Heartbeat', heartbeat(B, ['drain-1']));
    await c.call('Heartbeat', heartbeat(A, [], { status: LINGERING }));
    expect(await nodeOf(c, 'drain-1')).toBe(B.node_id);
    // Back to READY (a restarted node), it is placed on again.
    await c.call('Heartbeat', heartbeat(A, []));
    const placed = new Set<string>();
    for (let i = 0; i < 4; i++)
      placed.add(((await c.call('Schedule', {})) as { node: { node_id: string } }).node.node_id);
    expect(placed).toEqual(new Set([A.node_id, B.node_id]));
  });
});

describe('scheduler process without Redis', () => {
  it('rebuilds its bindings from the heartbeat rosters after a restart', async () => {
    let s = await startSchedulerProcess(baseConfig(undefined));
    let c = schedulerClient(s.grpcAddress);
    try {
      await c.call('Heartbeat', heartbeat(A, ['m1', 'm2']));
      await c.call('Heartbeat', heartbeat(B, ['m3']));
      expect(await nodeOf(c, 'm1')).toBe(A.node_id);
      c.close();
      // kill -9: nothing is flushed anywhere.
      await s.stop('SIGKILL');
      s = await startSchedulerProcess(baseConfig(undefined), { grpcPort: s.grpcPort });
      c = schedulerClient(s.grpcAddress);
      expect(await c.fail('LookupNode', { sandbox_id: 'm1' })).toMatchObject({ code: status.NOT_FOUND });
      await c.call('Heartbeat', heartbeat(A, ['m1', 'm2']));
      await c.call('Heartbeat', heartbeat(B, ['m3']));
      expect([await nodeOf(c, 'm1'), await nodeOf(c, 'm2'), await nodeOf(c, 'm3')]).toEqual([
        A.node_id,
        A.node_id,
        B.node_id,
      ]);
    } finally {
      c.close();
      await s.stop();
    }
  });

  it('refuses a bad config with the key in the message and exits non-zero', async () => {
    await expect(startSchedulerProcess({ scheduler: { binding_ttl: 30 } })).rejects.toThrow(
      /exited \(1\) before listening:\naenv scheduler: invalid configuration: scheduler.binding_ttl must be a duration string like "30s", got numeric value 30/,
    );
  });
});
