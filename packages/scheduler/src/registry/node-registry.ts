// Which nodes exist (discovery) and what they last said about themselves (heartbeats).
import { clone, create } from '@bufbuild/protobuf';
import {
  NodeSnapshotSchema,
  NodeStatus,
  ObservedNodeSchema,
  P2pPeerSchema,
  type HeartbeatRequest,
  type ObservedNode,
  type P2pEndpoint,
  type P2pPeer,
} from '@aenv/protocol';
import { figuresOf, type NodeFigures } from './node-figures.js';
import { deriveNodeStatus } from './node-status.js';

/** A node as discovery knows it: its id and the base URL of its HTTP API. */
export interface NodeRef {
  id: string;
  endpoint: string;
}

/** A discovered node with what placement needs of its last heartbeat. */
export interface CandidateNode {
  node: NodeRef;
  /** The last heartbeat's figures; undefined = no heartbeat yet. */
  snapshot: NodeFigures | undefined;
  /** Status derived now (CONNECTING when no heartbeat yet). */
  status: NodeStatus;
}

const byId = (a: NodeRef, b: NodeRef) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

export class NodeNotInRegistryError extends Error {
  constructor() {
    super('node is not in scheduler node list');
  }
}

export class ServiceInstanceMismatchError extends Error {
  constructor() {
    super('service instance mismatch');
  }
}

interface ObservedRecord {
  node: ObservedNode;
  p2p: P2pEndpoint | undefined;
  /** node.lastSeenUnixMs as a number: status is derived for every node on every Schedule. */
  lastSeenMs: number;
}

interface DiscoveredEntry {
  node: NodeRef;
  lingering: boolean;
  /** Reused by every Schedule (its snapshot and status are refreshed in place): no allocation per node. */
  candidate: CandidateNode;
}

export class NodeRegistry {
  #discovered = new Map<string, DiscoveredEntry>();
  /** The discovered set sorted by id, kept with it: Schedule reads it on every call. */
  #sorted: DiscoveredEntry[] = [];
  #observed = new Map<string, ObservedRecord>();

  constructor(
    private readonly reportTtlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Replaces the discovered set; observed records of nodes that left it are dropped (as the reference). */
  setDiscovered(active: readonly NodeRef[], lingering: readonly NodeRef[]): void {
    const next = new Map<string, DiscoveredEntry>();
    const add = (node: NodeRef, isLingering: boolean) =>
      next.set(node.id, {
        node,
        lingering: isLingering,
        candidate: { node, snapshot: undefined, status: NodeStatus.CONNECTING },
      });
    for (const node of active) add(node, false);
    for (const node of lingering) add(node, true);
    this.#discovered = next;
    this.#sorted = [...next.values()].sort((a, b) => byId(a.node, b.node));
    for (const [id, record] of this.#observed) {
      const entry = next.get(id);
      if (entry) entry.candidate.snapshot = record.node.snapshot && figuresOf(record.node.snapshot);
      else this.#observed.delete(id);
    }
  }

  /** Every discovered node, lingering ones included, by id. */
  discovered(): NodeRef[] {
    return this.#sorted.map((d) => d.node);
  }

  /**
   * Discovered, non-lingering nodes by id, with their last snapshot: what Schedule chooses from. The
   * objects are shared and refreshed by the next call; use them before awaiting anything.
   */
  candidates(): CandidateNode[] {
    const nowMs = this.now();
    const out: CandidateNode[] = [];
    for (const entry of this.#sorted) {
      if (entry.lingering) continue;
      const c = entry.candidate;
      const record = this.#observed.get(entry.node.id);
      c.status = record ? this.#status(record, nowMs) : NodeStatus.CONNECTING;
      out.push(c);
    }
    return out;
  }

  /** The node is discovered under this id with exactly this endpoint. */
  contains(node: NodeRef): boolean {
    return this.#discovered.get(node.id)?.node.endpoint === node.endpoint;
  }

  resolve(id: string): NodeRef | undefined {
    return this.#discovered.get(id)?.node;
  }

  /** Records a heartbeat; returns the discovered node it came from. */
  heartbeat(req: HeartbeatRequest): NodeRef {
    const discovered = this.#discovered.get(req.nodeId);
    if (!discovered) throw new NodeNotInRegistryError();
    const nowMs = this.now();
    const previous = this.#observed.get(req.nodeId);
    const machineInfo = req.machineInfo;
    // A node sends its CPU template once; later heartbeats may leave it out.
    if (machineInfo && machineInfo.cpuConfigJson === '' && previous?.node.machineInfo)
      machineInfo.cpuConfigJson = previous.node.machineInfo.cpuConfigJson;
    const snapshot = req.snapshot ?? create(NodeSnapshotSchema);
    if (snapshot.reportedAtUnixMs === 0n) snapshot.reportedAtUnixMs = BigInt(nowMs);
    if (snapshot.status === NodeStatus.UNSPECIFIED) snapshot.status = NodeStatus.CONNECTING;
    this.#observed.set(req.nodeId, {
      node: create(ObservedNodeSchema, {
        nodeId: req.nodeId,
        endpoint: discovered.node.endpoint,
        clusterId: req.clusterId,
        serviceInstanceId: req.serviceInstanceId,
        version: req.version,
        commit: req.commit,
        machineInfo,
        snapshot,
        lastSeenUnixMs: BigInt(nowMs),
      }),
      p2p: req.p2pEndpoint,
      lastSeenMs: nowMs,
    });
    discovered.candidate.snapshot = figuresOf(snapshot);
    return discovered.node;
  }

  /** Forgets a node's heartbeat state, if the caller is the process instance that sent it. */
  unregister(nodeId: string, serviceInstanceId: string): void {
    const record = this.#observed.get(nodeId);
    if (!record) return;
    if (record.node.serviceInstanceId !== serviceInstanceId) throw new ServiceInstanceMismatchError();
    this.#observed.delete(nodeId);
    const entry = this.#discovered.get(nodeId);
    if (entry) entry.candidate.snapshot = undefined;
  }

  listObserved(clusterId: string): ObservedNode[] {
    const nowMs = this.now();
    const cluster = clusterId.trim();
    const out: ObservedNode[] = [];
    for (const record of this.#observed.values()) {
      if (cluster !== '' && record.node.clusterId !== cluster) continue;
      out.push(this.#view(record, nowMs));
    }
    return out.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  }

  getObserved(nodeId: string, clusterId: string): ObservedNode | undefined {
    const record = this.#observed.get(nodeId);
    if (!record) return undefined;
    const cluster = clusterId.trim();
    if (cluster !== '' && record.node.clusterId !== cluster) return undefined;
    return this.#view(record, this.now());
  }

  /**
   * READY observed nodes with a P2P endpoint, optionally limited to `onlyNodeIds`, of this cluster (all when
   * empty) and backend (any when empty), without `excludeNodeId`.
   */
  p2pPeers(
    clusterId: string,
    backend: string,
    excludeNodeId: string,
    onlyNodeIds?: readonly string[],
  ): P2pPeer[] {
    const nowMs = this.now();
    const cluster = clusterId.trim();
    const wanted = backend.trim();
    const exclude = excludeNodeId.trim();
    const records =
      onlyNodeIds === undefined
        ? [...this.#observed.values()]
        : onlyNodeIds.map((id) => this.#observed.get(id)).filter((r): r is ObservedRecord => r !== undefined);
    const peers: P2pPeer[] = [];
    for (const record of records) {
      const { node, p2p } = record;
      if (cluster !== '' && node.clusterId !== cluster) continue;
      if (node.nodeId === exclude) continue;
      if (!p2p || p2p.backend === '' || p2p.address === '') continue;
      if (wanted !== '' && p2p.backend !== wanted) continue;
      if (this.#status(record, nowMs) !== NodeStatus.READY) continue;
      peers.push(
        create(P2pPeerSchema, {
          nodeId: node.nodeId,
          endpoint: { backend: p2p.backend, address: p2p.address },
        }),
      );
    }
    return peers;
  }

  #status(record: ObservedRecord, nowMs: number): NodeStatus {
    const discovered = this.#discovered.get(record.node.nodeId);
    return deriveNodeStatus({
      reported: record.node.snapshot?.status ?? NodeStatus.UNSPECIFIED,
      lastSeenMs: record.lastSeenMs,
      nowMs,
      reportTtlMs: this.reportTtlMs,
      discovered: discovered !== undefined,
      lingering: discovered?.lingering ?? false,
    });
  }

  #view(record: ObservedRecord, nowMs: number): ObservedNode {
    const out = clone(ObservedNodeSchema, record.node);
    const discovered = this.#discovered.get(out.nodeId);
    if (discovered && discovered.node.endpoint !== '') out.endpoint = discovered.node.endpoint;
    out.snapshot ??= create(NodeSnapshotSchema);
    out.snapshot.status = this.#status(record, nowMs);
    return out;
  }
}
