import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { HeartbeatRequestSchema, NodeStatus, type HeartbeatRequest } from '@aenv/protocol';
import { NodeNotInRegistryError, NodeRegistry, ServiceInstanceMismatchError } from './node-registry.js';

const A = { id: 'a', endpoint: 'http://10.0.0.1:8000' };
const B = { id: 'b', endpoint: 'http://10.0.0.2:8000' };
const C = { id: 'c', endpoint: 'http://10.0.0.3:8000' };

type HeartbeatInit = Exclude<MessageInitShape<typeof HeartbeatRequestSchema>, HeartbeatRequest>;

function hb(nodeId: string, init: HeartbeatInit = {}): HeartbeatRequest {
  const shape: HeartbeatInit = {
    nodeId,
    serviceInstanceId: `${nodeId}-1`,
    clusterId: 'c1',
    snapshot: { status: NodeStatus.READY, cpuCount: 4 },
    ...init,
  };
  return create(HeartbeatRequestSchema, shape);
}

function setup() {
  let now = 1_000_000;
  const registry = new NodeRegistry(30_000, () => now);
  registry.setDiscovered([B, A], [C]);
  return { registry, advance: (ms: number) => (now += ms) };
}

describe('NodeRegistry', () => {
  it('lists discovered nodes by id; candidates leave lingering ones out', () => {
    const { registry } = setup();
    expect(registry.discovered().map((n) => n.id)).toEqual(['a', 'b', 'c']);
    expect(registry.candidates().map((n) => [n.node.id, n.snapshot, n.status])).toEqual([
      ['a', undefined, NodeStatus.CONNECTING],
      ['b', undefined, NodeStatus.CONNECTING],
    ]);
  });

  it('refuses heartbeats of nodes outside the discovered set and matches id and endpoint', () => {
    const { registry } = setup();
    expect(() => registry.heartbeat(hb('x'))).toThrow(NodeNotInRegistryError);
    expect(registry.contains(A)).toBe(true);
    expect(registry.contains({ id: 'a', endpoint: 'http://10.0.0.9:8000' })).toBe(false);
    expect(registry.resolve('c')).toEqual(C);
  });

  it('keeps the last heartbeat with the discovered endpoint and derives status when read', () => {
    const { registry, advance } = setup();
    registry.heartbeat(hb('a', { machineInfo: { cpuModelName: 'x', cpuConfigJson: '{"t":1}' } }));
    registry.heartbeat(hb('c'));
    registry.heartbeat(
      hb('a', { machineInfo: { cpuModelName: 'y' }, snapshot: { status: NodeStatus.UNSPECIFIED } }),
    );
    const a = registry.getObserved('a', '')!;
    expect(a.endpoint).toBe(A.endpoint);
    expect(a.machineInfo?.cpuConfigJson).toBe('{"t":1}');
    expect(a.snapshot?.status).toBe(NodeStatus.CONNECTING);
    expect(a.snapshot?.reportedAtUnixMs).toBe(1_000_000n);
    expect(registry.getObserved('c', '')?.snapshot?.status).toBe(NodeStatus.LINGERING);
    expect(registry.getObserved('a', 'other-cluster')).toBeUndefined();
    expect(registry.listObserved('c1').map((n) => n.nodeId)).toEqual(['a', 'c']);
    advance(30_001);
    expect(registry.listObserved('').map((n) => n.snapshot?.status)).toEqual([
      NodeStatus.UNHEALTHY,
      NodeStatus.UNHEALTHY,
    ]);
    expect(registry.candidates().find((n) => n.node.id === 'a')?.status).toBe(NodeStatus.UNHEALTHY);
  });

  it('forgets observed nodes that leave discovery', () => {
    const { registry } = setup();
    registry.heartbeat(hb('a'));
    registry.setDiscovered([B], []);
    expect(registry.getObserved('a', '')).toBeUndefined();
    expect(() => registry.heartbeat(hb('a'))).toThrow(NodeNotInRegistryError);
  });

  it('unregisters only the instance that registered', () => {
    const { registry } = setup();
    registry.heartbeat(hb('a'));
    expect(() => registry.unregister('a', 'someone-else')).toThrow(ServiceInstanceMismatchError);
    registry.unregister('a', 'a-1');
    expect(registry.getObserved('a', '')).toBeUndefined();
    registry.unregister('a', 'anything');
  });

  it('lists ready P2P peers by cluster and backend, without the excluded node', () => {
    const { registry, advance } = setup();
    registry.heartbeat(hb('a', { p2pEndpoint: { backend: 'tcp', address: '10.0.0.1:7000' } }));
    registry.heartbeat(hb('b', { p2pEndpoint: { backend: 'rdma', address: '10.0.0.2:7000' } }));
    registry.heartbeat(hb('c', { p2pEndpoint: { backend: 'tcp', address: '10.0.0.3:7000' } }));
    const ids = (peers: { nodeId: string }[]) => peers.map((p) => p.nodeId).sort();
    expect(ids(registry.p2pPeers('c1', '', ''))).toEqual(['a', 'b']);
    expect(ids(registry.p2pPeers('c1', 'tcp', ''))).toEqual(['a']);
    expect(ids(registry.p2pPeers('', '', 'a'))).toEqual(['b']);
    expect(ids(registry.p2pPeers('zz', '', ''))).toEqual([]);
    expect(ids(registry.p2pPeers('', '', '', ['b', 'ghost']))).toEqual(['b']);
    expect(registry.p2pPeers('', 'tcp', '')[0]?.endpoint).toMatchObject({
      backend: 'tcp',
      address: '10.0.0.1:7000',
    });
    advance(31_000);
    expect(registry.p2pPeers('', '', '')).toEqual([]);
  });
});
