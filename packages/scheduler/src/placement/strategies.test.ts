import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { NodeSnapshotSchema, NodeStatus, ScheduleRequestHintSchema } from '@aenv/protocol';
import { figuresOf } from '../registry/node-figures.js';
import type { CandidateNode } from '../registry/node-registry.js';
import {
  createStrategy,
  LeastAllocatedStrategy,
  NoNodesError,
  RandomStrategy,
  RoundRobinStrategy,
} from './strategies.js';

const GiB = 1024n ** 3n;

function node(id: string, snapshot?: MessageInitShape<typeof NodeSnapshotSchema>): CandidateNode {
  return {
    node: { id, endpoint: `http://${id}` },
    snapshot: snapshot
      ? figuresOf(create(NodeSnapshotSchema, { status: NodeStatus.READY, ...snapshot }))
      : undefined,
    status: NodeStatus.READY,
  };
}

const cold = (cpuCount: number, memoryMb: number) =>
  create(ScheduleRequestHintSchema, {
    kind: { case: 'newColdSandbox', value: { cpuCount, memoryMb: BigInt(memoryMb) } },
  });

describe('strategies', () => {
  it('round_robin walks the list and wraps', () => {
    const s = new RoundRobinStrategy();
    const nodes = [node('a'), node('b'), node('c')];
    expect([1, 2, 3, 4, 5].map(() => s.select(nodes, undefined).id)).toEqual(['a', 'b', 'c', 'a', 'b']);
  });

  it('random takes the index its random source gives', () => {
    const values = [0, 0.5, 0.999999];
    const s = new RandomStrategy(() => values.shift()!);
    const nodes = [node('a'), node('b'), node('c')];
    expect([1, 2, 3].map(() => s.select(nodes).id)).toEqual(['a', 'b', 'c']);
  });

  it('every strategy refuses an empty list with "no nodes available"', () => {
    for (const name of ['round_robin', 'random', 'least_allocated'] as const)
      expect(() => createStrategy(name).select([], undefined)).toThrow(NoNodesError);
    expect(new NoNodesError().message).toBe('no nodes available');
  });

  it('least_allocated picks the node whose busier resource stays lowest with the hint added', () => {
    const s = new LeastAllocatedStrategy();
    // cpu-heavy: 6/8 cpu, 2/32 GiB; memory-heavy: 1/8 cpu, 28/32 GiB; balanced: 4/8 cpu, 16/32 GiB.
    const nodes = [
      node('cpu-heavy', {
        cpuCount: 8,
        allocatedCpu: 6,
        memoryTotalBytes: 32n * GiB,
        allocatedMemoryBytes: 2n * GiB,
        sandboxCount: 3,
      }),
      node('memory-heavy', {
        cpuCount: 8,
        allocatedCpu: 1,
        memoryTotalBytes: 32n * GiB,
        allocatedMemoryBytes: 28n * GiB,
        sandboxCount: 1,
      }),
      node('balanced', {
        cpuCount: 8,
        allocatedCpu: 4,
        memoryTotalBytes: 32n * GiB,
        allocatedMemoryBytes: 16n * GiB,
        sandboxCount: 2,
      }),
    ];
    expect(s.select(nodes, cold(1, 512)).id).toBe('balanced');
  });

  it('least_allocated counts the cold hint: a big request avoids the node it would overfill', () => {
    const nodes = [
      // small: 0/4 cpu now, but +4 cpu = 100%; large: 8/16 cpu, +4 = 75%.
      node('small', { cpuCount: 4, allocatedCpu: 0, memoryTotalBytes: 64n * GiB }),
      node('large', { cpuCount: 16, allocatedCpu: 8, memoryTotalBytes: 64n * GiB }),
    ];
    expect(new LeastAllocatedStrategy().select(nodes, cold(1, 256)).id).toBe('small');
    expect(new LeastAllocatedStrategy().select(nodes, cold(4, 256)).id).toBe('large');
  });

  it('least_allocated spreads a burst between heartbeats and forgets it when the node reports', () => {
    const s = new LeastAllocatedStrategy();
    const nodes = [
      node('a', { cpuCount: 8, memoryTotalBytes: 16n * GiB }),
      node('b', { cpuCount: 8, memoryTotalBytes: 16n * GiB, allocatedCpu: 1 }),
    ];
    // a: 2/8 → b: 3/8 → a: 4/8 (pending 2+2) → b: 5/8 ...
    expect([1, 2, 3, 4].map(() => s.select(nodes, cold(2, 1024)).id)).toEqual(['a', 'b', 'a', 'b']);
    s.onHeartbeat('a');
    s.onHeartbeat('b');
    expect(s.select(nodes, cold(2, 1024)).id).toBe('a');
  });

  it('least_allocated sizes other requests as the node average or 2 vCPU / 1 GiB, and puts nodes without figures last', () => {
    const s = new LeastAllocatedStrategy();
    const nodes = [
      node('silent'),
      node('busy-few', {
        cpuCount: 8,
        allocatedCpu: 4,
        sandboxCount: 1,
        memoryTotalBytes: 64n * GiB,
        allocatedMemoryBytes: GiB,
      }),
      node('idle-many', {
        cpuCount: 8,
        allocatedCpu: 3,
        sandboxCount: 6,
        memoryTotalBytes: 64n * GiB,
        allocatedMemoryBytes: 3n * GiB,
      }),
    ];
    // busy-few: (4 + 4)/8 = 100%; idle-many: (3 + 0.5)/8 = 44%.
    expect(s.select(nodes, undefined).id).toBe('idle-many');
    expect(new LeastAllocatedStrategy().select([node('silent'), node('quiet')], undefined).id).toBe('silent');
  });

  it('least_allocated takes turns between equal nodes', () => {
    const s = new LeastAllocatedStrategy();
    const nodes = [node('x'), node('y'), node('z')];
    expect([1, 2, 3].map(() => s.select(nodes, undefined).id)).toEqual(['x', 'y', 'z']);
  });
});
