// `aenv scheduler` in kubernetes discovery mode against a fake API server on loopback: the EndpointSlices
// of the headless node Service become the node list, watch events change it, pod selectors drop or
// drain nodes, and only discovered pods may heartbeat.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../testing/eventually.js';
import { FakeKubeApi } from '../testing/fake-kube-api.js';
import { grpc, schedulerClient, type TestSchedulerClient } from '../testing/grpc-client.js';
import { startSchedulerProcess, type SchedulerProcess } from '../testing/scheduler-process.js';

const NS = 'aenv-test';
const SERVICE = 'aenv-nodes';
const SLICE_SELECTOR = `kubernetes.io/service-name=${SERVICE}`;
const IGNORE = 'aenv.io/scheduler=ignore';
const NO_SCHEDULE = 'aenv.io/drain in (true)';

const endpoint = (
  pod: string,
  address: string,
  conditions: Record<string, boolean> = { ready: true, serving: true, terminating: false },
) => ({
  addresses: [address],
  conditions,
  targetRef: { kind: 'Pod', name: pod, namespace: NS },
});

const slice = (name: string, addressType: string, endpoints: unknown[], port = 8000) => ({
  apiVersion: 'discovery.k8s.io/v1',
  kind: 'EndpointSlice',
  metadata: { name, labels: { 'kubernetes.io/service-name': SERVICE } },
  addressType,
  endpoints,
  ports: [{ name: 'http', port, protocol: 'TCP' }],
});

const pod = (name: string) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name } });

describe('kubernetes discovery (EndpointSlice watch of the headless node Service)', () => {
  const api = new FakeKubeApi(NS);
  const dir = mkdtempSync(join(tmpdir(), 'aenv-kube-test-'));
  let s: SchedulerProcess;
  let c: TestSchedulerClient;

  beforeAll(async () => {
    await api.start();
    api.writeKubeconfig(join(dir, 'kubeconfig'));
    api.put(
      'endpointslices',
      slice('nodes-v4', 'IPv4', [endpoint('node-0', '10.1.0.10'), endpoint('node-1', '10.1.0.11')]),
      [SLICE_SELECTOR],
    );
    api.put('endpointslices', slice('nodes-v6', 'IPv6', [endpoint('node-6', 'fd00::6')]), [SLICE_SELECTOR]);
    // Another Service's slice: not selected, never listed.
    api.put('endpointslices', slice('other', 'IPv4', [endpoint('stranger', '10.9.9.9')]), [
      'kubernetes.io/service-name=other',
    ]);
    s = await startSchedulerProcess(
      {
        scheduler: {
          discovery: {
            mode: 'kubernetes',
            kubernetes: {
              namespace: NS,
              service_name: SERVICE,
              port: 8000,
              scheme: 'http',
              ignore_pod_selector: IGNORE,
              no_schedule_pod_selector: NO_SCHEDULE,
            },
          },
        },
      },
      { env: { KUBECONFIG: join(dir, 'kubeconfig') } },
    );
    c = schedulerClient(s.grpcAddress);
  });
  afterAll(async () => {
    c?.close();
    await s?.stop();
    await api.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const listed = async () =>
    ((await c.call('ListNodes', {})) as { nodes: { node_id: string; endpoint: string }[] }).nodes;
  const scheduled = async (n: number) => {
    const ids = new Set<string>();
    for (let i = 0; i < n; i++)
      ids.add(((await c.call('Schedule', {})) as { node: { node_id: string } }).node.node_id);
    return [...ids].sort();
  };

  it('lists the serving endpoints of the Service as nodes, pod name as id, IPv6 bracketed', async () => {
    expect(
      await eventually(async () => {
        const nodes = await listed();
        expect(nodes).toHaveLength(3);
        return nodes;
      }),
    ).toEqual([
      { node_id: 'node-0', endpoint: 'http://10.1.0.10:8000' },
      { node_id: 'node-1', endpoint: 'http://10.1.0.11:8000' },
      { node_id: 'node-6', endpoint: 'http://[fd00::6]:8000' },
    ]);
    expect(api.requests).toContain(
      `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices?labelSelector=${encodeURIComponent(SLICE_SELECTOR)}`,
    );
    expect(
      api.requests.some(
        (r) => r.startsWith(`/api/v1/namespaces/${NS}/pods?`) && r.includes(encodeURIComponent(IGNORE)),
      ),
    ).toBe(true);
    expect(await scheduled(6)).toEqual(['node-0', 'node-1', 'node-6']);
  });

  it('follows watch events: a new pod joins, a terminating one lingers (listed, not scheduled), a deleted one leaves', async () => {
    api.put(
      'endpointslices',
      slice('nodes-v4', 'IPv4', [
        endpoint('node-0', '10.1.0.10', { ready: false, serving: true, terminating: true }),
        endpoint('node-1', '10.1.0.11'),
        endpoint('node-2', '10.1.0.12'),
        endpoint('node-3', '10.1.0.13', { ready: false, serving: false, terminating: false }),
      ]),
      [SLICE_SELECTOR],
    );
    await eventually(async () =>
      expect((await listed()).map((n) => n.node_id)).toEqual(['node-0', 'node-1', 'node-2', 'node-6']),
    );
    expect(await scheduled(8)).toEqual(['node-1', 'node-2', 'node-6']);
    api.delete('endpointslices', 'nodes-v6');
    await eventually(async () =>
      expect((await listed()).map((n) => n.node_id)).toEqual(['node-0', 'node-1', 'node-2']),
    );
  });

  it('drops pods matching ignore_pod_selector and drains pods matching no_schedule_pod_selector', async () => {
    api.put('pods', pod('node-1'), [IGNORE]);
    api.put('pods', pod('node-2'), [NO_SCHEDULE]);
    await eventually(async () =>
      expect((await listed()).map((n) => n.node_id)).toEqual(['node-0', 'node-2']),
    );
    await c.call('Heartbeat', { node_id: 'node-2', service_instance_id: 'i', snapshot: { status: 1 } });
    const observed = (await c.call('GetNode', { node_id: 'node-2' })) as {
      node: { snapshot: { status: number } };
    };
    expect(observed.node.snapshot.status).toBe(4); // LINGERING
    expect(await c.fail('Schedule', {})).toEqual({
      code: grpc.status.UNAVAILABLE,
      details: 'no nodes available',
    });
    api.delete('pods', 'node-1');
    await eventually(async () => expect(await scheduled(1)).toEqual(['node-1']));
  });

  it('takes heartbeats only from discovered pods', async () => {
    await c.call('Heartbeat', {
      node_id: 'node-1',
      service_instance_id: 'i',
      sandbox_ids: ['k1'],
      snapshot: { status: 1 },
    });
    expect(await c.call('LookupNode', { sandbox_id: 'k1' })).toEqual({
      node: { node_id: 'node-1', endpoint: 'http://10.1.0.11:8000' },
    });
    expect(await c.fail('Heartbeat', { node_id: 'stranger', service_instance_id: 'i' })).toEqual({
      code: grpc.status.INVALID_ARGUMENT,
      details: 'node is not in scheduler node list',
    });
  });
});
