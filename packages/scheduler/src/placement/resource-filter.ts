import { NodeStatus } from '@aenv/protocol';
import type { NodeResourceLimit } from '../config/cluster-config.js';
import type { CandidateNode } from '../registry/node-registry.js';

/**
 * The nodes Schedule may choose from (docs/cluster.md#placement): a node without a heartbeat yet is kept
 * (nothing to judge it by); one whose heartbeat went stale (UNHEALTHY) or that reports anything but READY
 * is dropped; the rest must be within every configured ceiling. Comparisons are "greater than the limit
 * excludes", percentages are whole numbers rounded down, as in the reference.
 */
export function filterByResourceLimit(
  nodes: readonly CandidateNode[],
  limit: NodeResourceLimit | undefined,
): CandidateNode[] {
  return nodes.filter((n) => {
    if (n.snapshot === undefined) return true;
    if (n.status === NodeStatus.UNHEALTHY) return false;
    const reported = n.snapshot.status;
    if (reported !== NodeStatus.UNSPECIFIED && reported !== NodeStatus.READY) return false;
    return limit === undefined || withinLimit(n, limit);
  });
}

function over(value: number, max: number | undefined): boolean {
  return max !== undefined && value > max;
}

function withinLimit(n: CandidateNode, limit: NodeResourceLimit): boolean {
  const s = n.snapshot!;
  if (over(s.sandboxCount, limit.maxSandboxCount)) return false;
  if (over(s.sandboxStartingCount, limit.maxSandboxStartingCount)) return false;
  if (over(s.cpuPercent, limit.maxCpuUsedPercent)) return false;
  if (limit.maxCpuAllocatedPercent !== undefined && s.cpuCount > 0) {
    if (Math.floor((s.allocatedCpu * 100) / s.cpuCount) > limit.maxCpuAllocatedPercent) return false;
  }
  const memoryTotal = s.memoryTotalBytes;
  if (memoryTotal > 0) {
    if (over(Math.floor((s.memoryUsedBytes * 100) / memoryTotal), limit.maxMemoryUsedPercent)) return false;
    if (over(Math.floor((s.allocatedMemoryBytes * 100) / memoryTotal), limit.maxMemoryAllocatedPercent))
      return false;
  }
  if (over(s.sandboxCount + s.pausedSandboxCount, limit.maxSandboxCountIncludingPaused)) return false;
  if (over(s.allocatedCpu + s.pausedAllocatedCpu, limit.maxAllocatedCpuIncludingPaused)) return false;
  const memoryIncludingPaused = s.allocatedMemoryBytes + s.pausedAllocatedMemoryBytes;
  if (over(memoryIncludingPaused, limit.maxAllocatedMemoryBytesIncludingPaused)) return false;
  return true;
}
