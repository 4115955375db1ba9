import { NodeStatus } from '@aenv/protocol';

export interface StatusInputs {
  /** What the node put in its last heartbeat's snapshot. */
  reported: NodeStatus;
  /** When that heartbeat arrived (0 = never). */
  lastSeenMs: number;
  nowMs: number;
  reportTtlMs: number;
  /** The node is in the discovered set (static list, or a serving EndpointSlice endpoint). */
  discovered: boolean;
  /** Discovered but terminating, or matched by no_schedule_pod_selector. */
  lingering: boolean;
}

/**
 * The status ListObservedNodes/GetNode show (docs/cluster.md#node-status), as the reference derives it:
 * a stale heartbeat wins over everything, then "not (or no longer) discovered", then lingering; an
 * active node keeps what it reported, UNSPECIFIED read as CONNECTING.
 */
export function deriveNodeStatus(i: StatusInputs): NodeStatus {
  if (i.lastSeenMs > 0 && i.nowMs - i.lastSeenMs > i.reportTtlMs) return NodeStatus.UNHEALTHY;
  if (!i.discovered) return NodeStatus.CONNECTING;
  if (i.lingering) return NodeStatus.LINGERING;
  return i.reported === NodeStatus.UNSPECIFIED ? NodeStatus.CONNECTING : i.reported;
}

/** Lower-case label of a status for metrics and logs (lingering included, unlike the gateway's JSON). */
export function nodeStatusLabel(status: NodeStatus): string {
  switch (status) {
    case NodeStatus.READY:
      return 'ready';
    case NodeStatus.CONNECTING:
      return 'connecting';
    case NodeStatus.UNHEALTHY:
      return 'unhealthy';
    case NodeStatus.LINGERING:
      return 'lingering';
    default:
      return 'unspecified';
  }
}
