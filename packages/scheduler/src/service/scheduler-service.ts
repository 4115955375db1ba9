// The scheduler.v1.Scheduler RPCs (docs/cluster.md#rpcs): validation, status codes and messages as the
// reference's, so its gateways and nodes read our answers the way they read its own.
import { Code, ConnectError, type ServiceImpl } from '@connectrpc/connect';
import { create } from '@bufbuild/protobuf';
import { NodeSchema, type Scheduler, type HeartbeatRequest, type ScheduleRequestHint } from '@aenv/protocol';
import type { ArtifactIndex } from '../artifacts/artifact-index.js';
import type { BindingStore } from '../bindings/binding-store.js';
import type { NodeResourceLimit } from '../config/cluster-config.js';
import type { SandboxEventLog } from '../events/sandbox-event-log.js';
import type { Logger } from '../log.js';
import { filterByResourceLimit } from '../placement/resource-filter.js';
import { NoNodesError, type Strategy } from '../placement/strategies.js';
import {
  NodeNotInRegistryError,
  ServiceInstanceMismatchError,
  type NodeRegistry,
  type NodeRef,
} from '../registry/node-registry.js';
import type { SchedulerMetrics } from '../server/metrics.js';

/** Longest id (sandbox, node, service instance) accepted; longer ones are refused, not stored. */
export const MAX_ID_BYTES = 512;

export interface SchedulerDeps {
  registry: NodeRegistry;
  store: BindingStore;
  strategy: Strategy;
  artifacts: ArtifactIndex;
  artifactLookupNodeLimit: number;
  events: SandboxEventLog;
  resourceLimit: NodeResourceLimit | undefined;
  metrics: SchedulerMetrics;
  log: Logger;
}

const invalid = (message: string) => new ConnectError(message, Code.InvalidArgument);
const storeUnavailable = () => new ConnectError('binding store unavailable', Code.Unavailable);
const notInNodeList = () => invalid('node is not in scheduler node list');

/** Trimmed id; refuses it when longer than {@link MAX_ID_BYTES}. */
function id(value: string, field: string): string {
  const v = value.trim();
  if (Buffer.byteLength(v) > MAX_ID_BYTES) throw invalid(`${field} is longer than ${MAX_ID_BYTES} bytes`);
  return v;
}

function nodeMessage(node: NodeRef) {
  return create(NodeSchema, { nodeId: node.id, endpoint: node.endpoint });
}

function describeHint(hint: ScheduleRequestHint | undefined): string {
  if (hint?.kind.case === 'newColdSandbox') {
    const c = hint.kind.value;
    return `new_cold_sandbox cpu=${c.cpuCount} memory_mb=${c.memoryMb} images=${c.images.length}`;
  }
  return hint?.kind.case === 'newSandbox' ? 'new_sandbox' : 'none';
}

/** LookupNode, shared by the full and the query-only scheduler. */
export async function lookupNode(store: BindingStore, log: Logger, sandboxIdRaw: string) {
  const sandboxId = id(sandboxIdRaw, 'sandbox_id');
  if (sandboxId === '') throw invalid('sandbox_id is required');
  let node: NodeRef | undefined;
  try {
    node = await store.get(sandboxId);
  } catch (e) {
    log.warn({ sandboxId, err: (e as Error).message }, 'binding store lookup failed');
    throw storeUnavailable();
  }
  if (!node) throw new ConnectError('sandbox assignment not found', Code.NotFound);
  return { node: nodeMessage(node) };
}

export function createSchedulerService(d: SchedulerDeps): ServiceImpl<typeof Scheduler> {
  const { registry, store, strategy, artifacts, events, log } = d;

  function checkRoster(req: HeartbeatRequest): void {
    for (const sandboxId of req.sandboxIds) id(sandboxId, 'sandbox_ids entry');
  }

  return {
    async schedule(req) {
      const started = performance.now();
      let code = Code[Code.Unavailable];
      try {
        const candidates = registry.candidates();
        const eligible = filterByResourceLimit(candidates, d.resourceLimit);
        let node: NodeRef;
        try {
          node = strategy.select(eligible, req.hint);
        } catch (e) {
          if (e instanceof NoNodesError) {
            log.debug({ candidates: candidates.length, hint: describeHint(req.hint) }, 'no node eligible');
            throw new ConnectError('no nodes available', Code.Unavailable);
          }
          code = Code[Code.Internal];
          throw e;
        }
        code = 'OK';
        log.debug({ nodeId: node.id, eligible: eligible.length, hint: describeHint(req.hint) }, 'scheduled');
        return { node: nodeMessage(node) };
      } finally {
        d.metrics.observeSchedule(strategy.name, code, (performance.now() - started) / 1000);
      }
    },

    async listNodes() {
      return { nodes: registry.discovered().map(nodeMessage) };
    },

    async lookupNode(req) {
      return lookupNode(store, log, req.sandboxId);
    },

    async recordAssignment(req) {
      const sandboxId = id(req.sandboxId, 'sandbox_id');
      if (sandboxId === '') throw invalid('sandbox_id is required');
      const node = { id: id(req.node?.nodeId ?? '', 'node_id'), endpoint: (req.node?.endpoint ?? '').trim() };
      if (node.id === '' || node.endpoint === '') throw invalid('node_id and endpoint are required');
      if (!registry.contains(node)) {
        log.warn(
          { sandboxId, nodeId: node.id, endpoint: node.endpoint },
          'assignment for an unknown node refused',
        );
        throw notInNodeList();
      }
      try {
        await store.record(sandboxId, node);
      } catch (e) {
        log.warn({ sandboxId, nodeId: node.id, err: (e as Error).message }, 'binding store record failed');
        throw storeUnavailable();
      }
      return {};
    },

    async heartbeat(req) {
      req.nodeId = id(req.nodeId, 'node_id');
      req.serviceInstanceId = id(req.serviceInstanceId, 'service_instance_id');
      if (req.nodeId === '' || req.serviceInstanceId === '')
        throw invalid('node_id and service_instance_id are required');
      checkRoster(req);
      let node: NodeRef;
      try {
        node = registry.heartbeat(req);
      } catch (e) {
        if (e instanceof NodeNotInRegistryError) {
          log.warn({ nodeId: req.nodeId }, 'heartbeat from a node not in the node list refused');
          throw notInNodeList();
        }
        throw e;
      }
      strategy.onHeartbeat?.(node.id);
      try {
        await store.reconcileNode(node, req.sandboxIds);
      } catch (e) {
        log.warn({ nodeId: node.id, err: (e as Error).message }, 'binding reconcile from a heartbeat failed');
        throw storeUnavailable();
      }
      // cpu_config_json (the cluster-wide Firecracker CPU template) is not computed: docs/cluster.md.
      return { cpuConfigJson: '' };
    },

    async reportSandboxEvent(req) {
      const nodeId = id(req.nodeId, 'node_id');
      // Events of nodes outside the node list are accepted (as the reference) but not kept.
      if (registry.resolve(nodeId)) events.append(nodeId, req.clusterId, req.serviceInstanceId, req.events);
      log.debug({ nodeId, events: req.events.length }, 'sandbox events received');
      return {};
    },

    async listObservedNodes(req) {
      return { nodes: registry.listObserved(req.clusterId) };
    },

    async listP2pPeers(req) {
      return { peers: registry.p2pPeers(req.clusterId, req.backend, req.excludeNodeId) };
    },

    async recordP2pArtifact(req) {
      const nodeId = id(req.nodeId, 'node_id');
      if ([req.clusterId, req.backend, req.key, nodeId].some((v) => v.trim() === ''))
        throw invalid('cluster_id, backend, key, and node_id are required');
      id(req.key, 'key');
      id(req.clusterId, 'cluster_id');
      id(req.backend, 'backend');
      if (!registry.resolve(nodeId)) throw notInNodeList();
      artifacts.record(req.clusterId, req.backend, req.key, nodeId);
      return {};
    },

    async forgetP2pArtifact(req) {
      if ([req.clusterId, req.backend, req.key, req.nodeId].some((v) => v.trim() === ''))
        throw invalid('cluster_id, backend, key, and node_id are required');
      artifacts.forget(req.clusterId, req.backend, req.key, req.nodeId);
      return {};
    },

    async lookupP2pArtifact(req) {
      if ([req.clusterId, req.backend, req.key].some((v) => v.trim() === ''))
        throw invalid('cluster_id, backend, and key are required');
      const holders = artifacts.lookup(req.clusterId, req.backend, req.key);
      if (holders.length === 0) return { peers: [] };
      const peers = registry.p2pPeers(req.clusterId, req.backend, req.excludeNodeId, holders);
      return { peers: d.artifactLookupNodeLimit > 0 ? peers.slice(0, d.artifactLookupNodeLimit) : peers };
    },

    async getNode(req) {
      const nodeId = id(req.nodeId, 'node_id');
      if (nodeId === '') throw invalid('node_id is required');
      const node = registry.getObserved(nodeId, req.clusterId);
      if (!node) throw new ConnectError('observed node not found', Code.NotFound);
      return { node };
    },

    async unregisterNode(req) {
      const nodeId = id(req.nodeId, 'node_id');
      const serviceInstanceId = id(req.serviceInstanceId, 'service_instance_id');
      if (nodeId === '' || serviceInstanceId === '')
        throw invalid('node_id and service_instance_id are required');
      try {
        registry.unregister(nodeId, serviceInstanceId);
      } catch (e) {
        if (e instanceof ServiceInstanceMismatchError)
          throw new ConnectError('service instance mismatch', Code.FailedPrecondition);
        throw e;
      }
      try {
        await store.reconcileNode({ id: nodeId, endpoint: '' }, []);
      } catch (e) {
        log.warn({ nodeId, err: (e as Error).message }, 'binding removal on unregister failed');
        throw storeUnavailable();
      }
      artifacts.forgetNode(nodeId);
      strategy.onHeartbeat?.(nodeId);
      log.info({ nodeId }, 'node unregistered');
      return {};
    },
  };
}
