import type { NodeSnapshot } from '@aenv/protocol';

/**
 * A heartbeat snapshot's figures as doubles, converted once per heartbeat instead of once per node on every
 * Schedule (the proto's 64-bit fields are BigInt). Exact below 8 PiB.
 */
export interface NodeFigures {
  status: NodeSnapshot['status'];
  sandboxCount: number;
  sandboxStartingCount: number;
  cpuPercent: number;
  cpuCount: number;
  allocatedCpu: number;
  memoryUsedBytes: number;
  memoryTotalBytes: number;
  allocatedMemoryBytes: number;
  pausedSandboxCount: number;
  pausedAllocatedCpu: number;
  pausedAllocatedMemoryBytes: number;
}

export function figuresOf(s: NodeSnapshot): NodeFigures {
  return {
    status: s.status,
    sandboxCount: s.sandboxCount,
    sandboxStartingCount: s.sandboxStartingCount,
    cpuPercent: s.cpuPercent,
    cpuCount: s.cpuCount,
    allocatedCpu: s.allocatedCpu,
    memoryUsedBytes: Number(s.memoryUsedBytes),
    memoryTotalBytes: Number(s.memoryTotalBytes),
    allocatedMemoryBytes: Number(s.allocatedMemoryBytes),
    pausedSandboxCount: s.pausedSandboxCount,
    pausedAllocatedCpu: s.pausedAllocatedCpu,
    pausedAllocatedMemoryBytes: Number(s.pausedAllocatedMemoryBytes),
  };
}
