import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { NodeSnapshotSchema, NodeStatus } from '@aenv/protocol';
import type { NodeResourceLimit } from '../config/cluster-config.js';
import { figuresOf } from '../registry/node-figures.js';
import type { CandidateNode } from '../registry/node-registry.js';
import { filterByResourceLimit } from './resource-filter.js';

const GiB = 1024n ** 3n;
type SnapshotInit = MessageInitShape<typeof NodeSnapshotSchema>;

function node(
  id: string,
  snapshot?: MessageInitShape<typeof NodeSnapshotSchema>,
  status = NodeStatus.READY,
): CandidateNode {
  return {
    node: { id, endpoint: `http://${id}` },
    snapshot: snapshot
      ? figuresOf(create(NodeSnapshotSchema, { status: NodeStatus.READY, ...snapshot }))
      : undefined,
    status,
  };
}

const ids = (nodes: CandidateNode[]) => nodes.map((n) => n.node.id);

describe('filterByResourceLimit', () => {
  it('keeps nodes without a heartbeat and drops stale or not-ready ones, with or without limits', () => {
    const nodes = [
      node('fresh', {}),
      node('silent'),
      node('stale', {}, NodeStatus.UNHEALTHY),
      node('draining', { status: NodeStatus.LINGERING }),
      node('connecting', { status: NodeStatus.CONNECTING }),
      node('unspecified', { status: NodeStatus.UNSPECIFIED }),
    ];
    expect(ids(filterByResourceLimit(nodes, undefined))).toEqual(['fresh', 'silent', 'unspecified']);
    expect(ids(filterByResourceLimit(nodes, {}))).toEqual(['fresh', 'silent', 'unspecified']);
  });

  it.each<[keyof NodeResourceLimit, number, SnapshotInit, SnapshotInit]>([
    ['maxSandboxCount', 10, { sandboxCount: 10 }, { sandboxCount: 11 }],
    ['maxSandboxStartingCount', 2, { sandboxStartingCount: 2 }, { sandboxStartingCount: 3 }],
    ['maxCpuUsedPercent', 80, { cpuPercent: 80 }, { cpuPercent: 81 }],
    // allocated·100/cpu_count, rounded down: 6·100/4 = 150, 7·100/4 = 175; may exceed 100 (overcommit).
    ['maxCpuAllocatedPercent', 150, { allocatedCpu: 6, cpuCount: 4 }, { allocatedCpu: 7, cpuCount: 4 }],
    [
      'maxMemoryUsedPercent',
      50,
      { memoryUsedBytes: 4n * GiB, memoryTotalBytes: 8n * GiB },
      { memoryUsedBytes: 5n * GiB, memoryTotalBytes: 8n * GiB },
    ],
    [
      'maxMemoryAllocatedPercent',
      100,
      { allocatedMemoryBytes: 8n * GiB, memoryTotalBytes: 8n * GiB },
      { allocatedMemoryBytes: 9n * GiB, memoryTotalBytes: 8n * GiB },
    ],
    [
      'maxSandboxCountIncludingPaused',
      10,
      { sandboxCount: 5, pausedSandboxCount: 5 },
      { sandboxCount: 5, pausedSandboxCount: 6 },
    ],
    [
      'maxAllocatedCpuIncludingPaused',
      8,
      { allocatedCpu: 4, pausedAllocatedCpu: 4 },
      { allocatedCpu: 4, pausedAllocatedCpu: 5 },
    ],
    [
      'maxAllocatedMemoryBytesIncludingPaused',
      2 ** 33,
      { allocatedMemoryBytes: 4n * GiB, pausedAllocatedMemoryBytes: 4n * GiB },
      { allocatedMemoryBytes: 4n * GiB, pausedAllocatedMemoryBytes: 4n * GiB + 1n },
    ],
  ])('%s = %d keeps a node at the limit and drops one above it', (key, value, at, above) => {
    const kept = filterByResourceLimit([node('at', at), node('above', above), node('silent')], {
      [key]: value,
    });
    expect(ids(kept)).toEqual(['at', 'silent']);
  });

  it('ignores percentage limits a node cannot be judged on (no cpu count or memory total)', () => {
    const limit = { maxCpuAllocatedPercent: 10, maxMemoryUsedPercent: 10, maxMemoryAllocatedPercent: 10 };
    expect(
      ids(filterByResourceLimit([node('empty', { allocatedCpu: 50, memoryUsedBytes: GiB })], limit)),
    ).toEqual(['empty']);
  });

  it('applies every limit at once', () => {
    const limit = { maxSandboxCount: 100, maxCpuUsedPercent: 90 };
    expect(
      ids(
        filterByResourceLimit(
          [node('ok', { sandboxCount: 3, cpuPercent: 20 }), node('hot', { sandboxCount: 3, cpuPercent: 95 })],
          limit,
        ),
      ),
    ).toEqual(['ok']);
  });
});
