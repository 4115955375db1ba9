import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  grpc,
  schedulerClient,
  type Plain,
  type TestSchedulerClient,
} from '../../packages/scheduler/src/testing/grpc-client.js';
import { endNode, eventually, freePort, REPO, startServer, useSdk, type TestServer } from './harness.js';

const NODE_ID = 'hbnode';
const NODE_STATUS_READY = 1;

/**
 * A real node reporting to a real `aenv scheduler` (docs/cluster.md#node-heartbeats): it registers with its
 * figures, a create and a kill show in them and in the bindings, and a restarted scheduler (bindings in
 * memory, so only heartbeats can bring them back) gets the node and its sandboxes again.
 */
describe('node heartbeats to the scheduler', () => {
  let sched: SchedulerProcess;
  let node: TestServer;
  let rpc: TestSchedulerClient;
  let nodeUrl: string;

  const startScheduler = (grpcPort?: number) =>
    startSchedulerProcess(
      { scheduler: { nodes: [{ id: NODE_ID, endpoint: nodeUrl }] } },
      grpcPort ? { grpcPort } : {},
    );
  const observed = async (): Promise<Plain | undefined> => {
    const r = await rpc.call('ListObservedNodes', { cluster_id: '' });
    return (r.nodes as Plain[]).find((n) => n.node_id === NODE_ID);
  };
  const snapshotOf = async (): Promise<Plain | undefined> =>
    (await observed())?.snapshot as Plain | undefined;
  const boundNode = async (sandboxId: string): Promise<string | undefined> => {
    try {
      const r = await rpc.call('LookupNode', { sandbox_id: sandboxId });
      return (r.node as Plain).node_id as string;
    } catch {
      return undefined;
    }
  };
  const nodeView = async () => {
    const r = await node.api('GET', '/nodes');
    expect(r.status).toBe(200);
    return r.body[0];
  };

  beforeAll(async () => {
    const port = await freePort();
    nodeUrl = `http://127.0.0.1:${port}`;
    sched = await startScheduler();
    rpc = schedulerClient(sched.grpcAddress);
    node = await startServer(
      {
        name: 'hbeat',
        toml: [
          '[cluster]',
          `scheduler_endpoint = "http://${sched.grpcAddress}"`,
          '[observability.scheduler_report]',
          'enabled = true',
          'interval_secs = 1',
          '[node_identity]',
          `node_id = "${NODE_ID}"`,
        ].join('\n'),
      },
      port,
    );
    useSdk(node);
  });
  afterAll(async () => {
    rpc?.close();
    await sched?.stop();
  });

  it('registers with its identity and the figures GET /nodes shows', async () => {
    await eventually(async () => (await observed()) !== undefined, 'the node to register', 300, 100);
    const n = (await observed())!;
    const view = await nodeView();
    expect(n).toMatchObject({
      node_id: NODE_ID,
      endpoint: nodeUrl,
      service_instance_id: view.serviceInstanceID,
      version: view.version,
      commit: view.commit,
      machine_info: { cpu_architecture: view.machineInfo.cpuArchitecture },
    });
    const s = n.snapshot as Plain;
    expect(s.status).toBe(NODE_STATUS_READY);
    expect(s.cpu_count).toBe(view.metrics.cpuCount);
    expect(s.memory_total_bytes).toBe(String(view.metrics.memoryTotalBytes));
    expect(s.sandbox_count).toBe(0);
    expect((s.disks as Plain[]).length).toBe(view.metrics.disks.length);
    const listed = (await rpc.call('ListNodes', {})).nodes as Plain[];
    expect(listed).toContainEqual({ node_id: NODE_ID, endpoint: nodeUrl });
  });

  let sbx: Sandbox;
  it('shows a create in its figures and binds the sandbox to the node', async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000 });
    const view = await nodeView();
    expect(view.metrics.allocatedCPU).toBeGreaterThan(0);
    await eventually(
      async () => (await snapshotOf())?.sandbox_count === 1,
      'the heartbeat to count the sandbox',
      300,
      100,
    );
    const s = (await snapshotOf())!;
    expect(s.allocated_cpu).toBe(view.metrics.allocatedCPU);
    expect(s.allocated_memory_bytes).toBe(String(view.metrics.allocatedMemoryBytes));
    expect(s.create_successes).toBe(String(view.createSuccesses));
    expect(await boundNode(sbx.sandboxId)).toBe(NODE_ID);
    // The create was also reported as a lifecycle event.
    await eventually(
      () =>
        sched
          .output()
          .split('\n')
          .some((l) => l.includes('"sandbox events received"') && l.includes(`"nodeId":"${NODE_ID}"`)),
      'the CREATE event to reach the scheduler',
      300,
      100,
    );
  });

  it('re-registers with a restarted scheduler, its sandboxes bound again, after one logged outage', async () => {
    const port = sched.grpcPort;
    expect(await sched.stop()).toBe(0);
    const outage = /"msg":"scheduler unreachable/g;
    await eventually(
      () => (node.logs().match(outage) ?? []).length === 1,
      'the node to see the outage',
      300,
      100,
    );
    // Several beats fail while it is down; the outage is still logged once.
    await eventually(
      () => (node.logs().match(/"msg":"heartbeat failed; retrying"/g) ?? []).length >= 2,
      'two failed heartbeats',
      300,
      100,
    );
    sched = await startScheduler(port);
    rpc.close();
    rpc = schedulerClient(sched.grpcAddress);
    await eventually(
      async () => (await boundNode(sbx.sandboxId)) === NODE_ID,
      'the binding to return',
      600,
      100,
    );
    expect((await snapshotOf())?.sandbox_count).toBe(1);
    expect((node.logs().match(outage) ?? []).length).toBe(1);
    expect((node.logs().match(/"msg":"scheduler reachable again/g) ?? []).length).toBe(1);
  });

  it('drops a killed sandbox from the roster, then unregisters on a graceful stop', async () => {
    await sbx.kill();
    await eventually(
      async () => (await snapshotOf())?.sandbox_count === 0,
      'the heartbeat to drop the sandbox',
      300,
      100,
    );
    expect(await boundNode(sbx.sandboxId)).toBeUndefined();
    const err = await rpc.fail('LookupNode', { sandbox_id: sbx.sandboxId });
    expect(err.code).toBe(grpc.status.NOT_FOUND);
    expect(await endNode(node)).toEqual({ stray: [], exitCode: 0 });
    expect(await observed()).toBeUndefined();
  });
});

describe('scheduler reporting without an endpoint', () => {
  it('refuses to start, naming the keys', () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-hb-conf-'));
    try {
      const config = join(dir, 'c.toml');
      // Own dirs and prefix: were the check to regress, the node would start here, not on the host's.
      writeFileSync(
        config,
        [
          `home_path = "${join(dir, 'home')}"`,
          `runtime_path = "${join(dir, 'run')}"`,
          'resource_prefix = "ehbref"',
          '[observability.scheduler_report]',
          'enabled = true',
        ].join('\n') + '\n',
        { mode: 0o600 },
      );
      const r = spawnSync(
        process.execPath,
        [join(REPO, 'packages/cli/dist/main.js'), 'server', '--config', config],
        { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' }, timeout: 60_000 },
      );
      expect(r.status).toBe(2);
      expect(r.stderr).toContain('aenv: invalid configuration:');
      expect(r.stderr).toContain('cluster.scheduler_endpoint is not set');
      expect(r.stderr).toContain('observability.scheduler_report.enabled');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
