import { NodeStatus, type SchedulerClient } from '@aenv/protocol';
import type { HostMetrics } from '../observability/host-metrics.js';
import type { SandboxCountersView } from '../orchestrator/orchestrator.js';

/** A HeartbeatRequest as the scheduler client takes it. */
export type HeartbeatInit = Parameters<SchedulerClient['heartbeat']>[0];
export type NodeSnapshotInit = NonNullable<HeartbeatInit['snapshot']>;

const bytes = (n: number): bigint => BigInt(Math.max(0, Math.floor(n)));
const u32 = (n: number): number => Math.max(0, Math.min(0xffff_ffff, Math.round(n)));

/**
 * The snapshot of a heartbeat (scheduler.v1 NodeSnapshot): the same figures as GET /nodes. Running and
 * starting sandboxes count in allocated_*, paused ones only in paused_*; sandbox_count is the running ones.
 */
export function nodeSnapshot(
  counters: SandboxCountersView,
  host: HostMetrics,
  opts: { lingering: boolean; nowMs: number },
): NodeSnapshotInit {
  return {
    status: opts.lingering ? NodeStatus.LINGERING : NodeStatus.READY,
    allocatedCpu: u32(counters.allocatedCPU),
    allocatedMemoryBytes: bytes(counters.allocatedMemoryBytes),
    cpuPercent: u32(host.cpuPercent),
    cpuCount: u32(host.cpuCount),
    memoryUsedBytes: bytes(host.memoryUsedBytes),
    memoryTotalBytes: bytes(host.memoryTotalBytes),
    disks: host.disks.map((d) => ({
      mountPoint: d.mountPoint,
      device: d.device,
      filesystemType: d.filesystemType,
      usedBytes: bytes(d.usedBytes),
      totalBytes: bytes(d.totalBytes),
    })),
    sandboxCount: u32(counters.sandboxCount),
    sandboxStartingCount: u32(counters.sandboxStartingCount),
    createSuccesses: bytes(counters.createSuccesses),
    createFails: bytes(counters.createFails),
    reportedAtUnixMs: BigInt(opts.nowMs),
    pausedSandboxCount: u32(counters.sandboxPausedCount),
    pausedAllocatedCpu: u32(counters.pausedAllocatedCPU),
    pausedAllocatedMemoryBytes: bytes(counters.pausedAllocatedMemoryBytes),
  };
}
