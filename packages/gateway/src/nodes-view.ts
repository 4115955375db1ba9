// `GET /nodes` at the gateway: the scheduler's observed nodes in the API's `Node` JSON shape
// (docs/cluster.md#how-the-gateway-routes; lingering shows as "unspecified", as the reference's gateway does).
import { NodeStatus, type ObservedNode } from '@aenv/protocol';

const STATUS: Record<number, string> = {
  [NodeStatus.READY]: 'ready',
  [NodeStatus.CONNECTING]: 'connecting',
  [NodeStatus.UNHEALTHY]: 'unhealthy',
};

export function nodeView(n: ObservedNode): Record<string, unknown> {
  const s = n.snapshot;
  const m = n.machineInfo;
  return {
    version: n.version,
    commit: n.commit,
    id: n.nodeId,
    serviceInstanceID: n.serviceInstanceId,
    clusterID: n.clusterId,
    machineInfo: {
      cpuFamily: m?.cpuFamily ?? '',
      cpuModel: m?.cpuModel ?? '',
      cpuModelName: m?.cpuModelName ?? '',
      cpuArchitecture: m?.cpuArchitecture ?? '',
    },
    status: STATUS[s?.status ?? NodeStatus.UNSPECIFIED] ?? 'unspecified',
    sandboxCount: s?.sandboxCount ?? 0,
    metrics: {
      allocatedCPU: s?.allocatedCpu ?? 0,
      cpuPercent: s?.cpuPercent ?? 0,
      cpuCount: s?.cpuCount ?? 0,
      allocatedMemoryBytes: Number(s?.allocatedMemoryBytes ?? 0n),
      memoryUsedBytes: Number(s?.memoryUsedBytes ?? 0n),
      memoryTotalBytes: Number(s?.memoryTotalBytes ?? 0n),
      disks: (s?.disks ?? []).map((d) => ({
        mountPoint: d.mountPoint,
        device: d.device,
        filesystemType: d.filesystemType,
        usedBytes: Number(d.usedBytes),
        totalBytes: Number(d.totalBytes),
      })),
      pausedAllocatedCPU: s?.pausedAllocatedCpu ?? 0,
      pausedAllocatedMemoryBytes: Number(s?.pausedAllocatedMemoryBytes ?? 0n),
    },
    createSuccesses: Number(s?.createSuccesses ?? 0n),
    createFails: Number(s?.createFails ?? 0n),
    sandboxStartingCount: s?.sandboxStartingCount ?? 0,
    sandboxPausedCount: s?.pausedSandboxCount ?? 0,
  };
}
