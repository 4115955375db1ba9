import type { FastifyInstance } from 'fastify';
import { isUuid, type NodeDetail, type NodeDrainProgress, type NodeResponse } from '@aenv/protocol';
import type { HostMetricsSampler } from '../../observability/host-metrics.js';
import { ApiError } from '../errors.js';
import type { SandboxCountersView } from '../../orchestrator/orchestrator.js';

export interface NodeIdentityView {
  nodeId: string;
  clusterId: string;
  serviceInstanceId: string;
  version: string;
  commit: string;
  machineInfo: { cpuFamily: string; cpuModel: string; cpuModelName: string; cpuArchitecture: string };
}

/** Sandbox counters the orchestrator keeps (docs/differences.md). */
export type SandboxCounters = SandboxCountersView;

export interface NodesRouteDeps {
  enabled: boolean;
  identity: NodeIdentityView;
  host: HostMetricsSampler;
  counters: () => SandboxCounters;
  /** The drain's progress while the node drains (node-drain.ts). */
  drainProgress?: () => NodeDrainProgress | undefined;
}

function clusterMatches(query: unknown, clusterId: string): boolean {
  const q = (query as { clusterID?: unknown }).clusterID;
  if (q === undefined || q === '') return true;
  if (typeof q !== 'string' || !isUuid(q))
    throw new ApiError(400, `invalid clusterID "${String(q)}": must be a UUID`);
  return q.toLowerCase() === clusterId.toLowerCase();
}

/** `GET /nodes` and `GET /nodes/{nodeID}` (docs/differences.md). */
export function registerNodeRoutes(app: FastifyInstance, deps: NodesRouteDeps): void {
  const view = async (): Promise<NodeResponse> => {
    const host = await deps.host.sample();
    const c = deps.counters();
    const id = deps.identity;
    return {
      version: id.version,
      commit: id.commit,
      id: id.nodeId,
      serviceInstanceID: id.serviceInstanceId,
      clusterID: id.clusterId,
      machineInfo: id.machineInfo,
      status: deps.drainProgress?.() ? 'draining' : 'ready',
      sandboxCount: c.sandboxCount,
      metrics: {
        allocatedCPU: c.allocatedCPU,
        cpuPercent: host.cpuPercent,
        cpuCount: host.cpuCount,
        allocatedMemoryBytes: c.allocatedMemoryBytes,
        memoryUsedBytes: host.memoryUsedBytes,
        memoryTotalBytes: host.memoryTotalBytes,
        disks: host.disks,
        pausedAllocatedCPU: c.pausedAllocatedCPU,
        pausedAllocatedMemoryBytes: c.pausedAllocatedMemoryBytes,
      },
      createSuccesses: c.createSuccesses,
      createFails: c.createFails,
      sandboxStartingCount: c.sandboxStartingCount,
      sandboxPausedCount: c.sandboxPausedCount,
    };
  };

  app.get('/nodes', async (req) => {
    if (!deps.enabled || !clusterMatches(req.query, deps.identity.clusterId)) return [];
    return [await view()];
  });

  app.get<{ Params: { nodeID: string } }>('/nodes/:nodeID', async (req) => {
    if (!deps.enabled) throw new ApiError(404, 'observability is disabled on this node');
    if (!clusterMatches(req.query, deps.identity.clusterId) || req.params.nodeID !== deps.identity.nodeId) {
      throw new ApiError(404, `node ${req.params.nodeID} not found`);
    }
    const { sandboxStartingCount: _omit, ...rest } = await view();
    const drain = deps.drainProgress?.();
    const detail: NodeDetail = { ...rest, cachedBuilds: [], ...(drain ? { drain } : {}) };
    return detail;
  });
}
