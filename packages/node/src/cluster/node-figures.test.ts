import { describe, expect, it } from 'vitest';
import { NodeStatus } from '@aenv/protocol';
import { nodeSnapshot } from './node-figures.js';

const counters = {
  sandboxCount: 2,
  sandboxStartingCount: 1,
  sandboxPausedCount: 3,
  allocatedCPU: 5,
  allocatedMemoryBytes: 1536 * 1024 ** 2,
  pausedAllocatedCPU: 6,
  pausedAllocatedMemoryBytes: 3 * 1024 ** 3,
  createSuccesses: 40,
  createFails: 2,
};
const host = {
  cpuPercent: 37.6,
  cpuCount: 8,
  memoryUsedBytes: 5e9,
  memoryTotalBytes: 16e9,
  disks: [
    { mountPoint: '/', device: '/dev/sda1', filesystemType: 'ext4', usedBytes: 10e9, totalBytes: 100e9 },
  ],
};

describe('heartbeat snapshot figures', () => {
  it('carries the orchestrator counters and the host sample in the proto units', () => {
    expect(nodeSnapshot(counters, host, { lingering: false, nowMs: 1_700_000_000_123 })).toEqual({
      status: NodeStatus.READY,
      allocatedCpu: 5,
      allocatedMemoryBytes: 1536n * 1024n ** 2n,
      cpuPercent: 38,
      cpuCount: 8,
      memoryUsedBytes: 5_000_000_000n,
      memoryTotalBytes: 16_000_000_000n,
      disks: [
        {
          mountPoint: '/',
          device: '/dev/sda1',
          filesystemType: 'ext4',
          usedBytes: 10_000_000_000n,
          totalBytes: 100_000_000_000n,
        },
      ],
      sandboxCount: 2,
      sandboxStartingCount: 1,
      createSuccesses: 40n,
      createFails: 2n,
      reportedAtUnixMs: 1_700_000_000_123n,
      pausedSandboxCount: 3,
      pausedAllocatedCpu: 6,
      pausedAllocatedMemoryBytes: 3n * 1024n ** 3n,
    });
  });

  it('says LINGERING while the node shuts down', () => {
    expect(nodeSnapshot(counters, host, { lingering: true, nowMs: 0 }).status).toBe(NodeStatus.LINGERING);
  });

  it('never sends a negative or fractional figure (they do not fit the unsigned fields)', () => {
    const s = nodeSnapshot(
      { ...counters, allocatedCPU: -1, allocatedMemoryBytes: -5 },
      { ...host, memoryUsedBytes: 1.7, cpuPercent: -3 },
      { lingering: false, nowMs: 0 },
    );
    expect([s.allocatedCpu, s.allocatedMemoryBytes, s.memoryUsedBytes, s.cpuPercent]).toEqual([0, 0n, 1n, 0]);
  });
});
