// The paused retention of sandboxes no node holds (docs/cluster.md#sandboxes-held-by-no-node): their node was lost
// or drained, so no node applies `paused_retention_secs` to them. One node of the cluster — the first by id of the
// nodes the scheduler sees up and not draining — looks for them now and then and kills those past it.
import { NodeStatus, type Node, type SchedulerClient } from '@aenv/protocol';
import { findUnheldPauses, killUnheld, unheldExpired, type UnheldPause } from '../backend/unheld-pauses.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';

/**
 * How often a node asks who sweeps, and the sweeper looks (a list of the repository's small documents), in
 * heartbeat intervals: the scheduler's view of who is up changes no faster than the heartbeats.
 */
export const UNHELD_SWEEP_HEARTBEATS = 3;
const SCHEDULER_CALL_TIMEOUT_MS = 5_000;

export interface ClusterView {
  /** Nodes that list their own sandboxes: discovered, and not lost by their heartbeats. */
  listed: Set<string>;
  /** The node that expires sandboxes no node holds; undefined when there is none. */
  sweeper: string | undefined;
}

/**
 * The gateway's rule (docs/cluster.md#moving-sandboxes): a discovered node whose heartbeats stopped (UNHEALTHY) is
 * lost, every other discovered node holds its own sandboxes. The sweeper is the first by id of those that are not
 * draining (LINGERING), so every node that asks the same scheduler names the same one.
 */
export function clusterView(
  nodes: readonly Pick<Node, 'nodeId'>[],
  observed: readonly { nodeId: string; snapshot?: { status: NodeStatus } | undefined }[],
): ClusterView {
  const status = new Map(observed.map((n) => [n.nodeId, n.snapshot?.status ?? NodeStatus.UNSPECIFIED]));
  const listed = new Set(nodes.map((n) => n.nodeId).filter((id) => status.get(id) !== NodeStatus.UNHEALTHY));
  const sweeper = [...listed].filter((id) => status.get(id) !== NodeStatus.LINGERING).sort()[0];
  return { listed, sweeper };
}

/** The view as the scheduler gives it now. */
export async function schedulerView(
  client: Pick<SchedulerClient, 'listNodes' | 'listObservedNodes'>,
): Promise<ClusterView> {
  const opts = { timeoutMs: SCHEDULER_CALL_TIMEOUT_MS };
  const [nodes, observed] = await Promise.all([
    client.listNodes({}, opts),
    client.listObservedNodes({ clusterId: '' }, opts),
  ]);
  return clusterView(nodes.nodes, observed.nodes);
}

export interface UnheldRetentionDeps {
  nodeId: string;
  repository: SnapshotRepository;
  /** This node's `paused_retention_secs` in ms: for a copy that does not record its node's. */
  fallbackRetentionMs: number;
  view: () => Promise<ClusterView>;
  /** Told of each sandbox killed (its lifecycle events). */
  onKilled?: (pause: UnheldPause) => void;
  logger: Logger;
  intervalMs: number;
  now?: () => number;
}

export class UnheldRetention {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;

  constructor(private readonly deps: UnheldRetentionDeps) {}

  /**
   * One pass: when this node is the sweeper, kills every sandbox no node holds that is past its retention, and
   * removes copies of sandboxes killed before whose delete failed. Returns the sandboxes killed.
   */
  async sweep(): Promise<string[]> {
    const { deps } = this;
    const view = await deps.view();
    if (view.sweeper !== deps.nodeId) return [];
    const found = await findUnheldPauses(deps.repository, view.listed, deps.logger);
    for (const id of found.killedCopies)
      await deps.repository.delete(id).catch((err: unknown) => {
        deps.logger.warn({ err, recordId: id }, 'could not remove the shared copy of a killed sandbox');
      });
    const now = (deps.now ?? Date.now)();
    const killed: string[] = [];
    for (const pause of found.unheld) {
      if (!unheldExpired(pause, now, deps.fallbackRetentionMs)) continue;
      const id = pause.sandbox.id;
      try {
        if (!(await killUnheld(deps.repository, pause, deps.nodeId))) continue; // taken over meanwhile
      } catch (err) {
        deps.logger.warn(
          { err, sandboxId: id },
          'could not delete an expired paused sandbox held by no node; will retry',
        );
        continue;
      }
      killed.push(id);
      deps.logger.info(
        { sandboxId: id, pausedAt: pause.sandbox.paused?.pausedAt, node: pause.node },
        'paused sandbox held by no node deleted: retention expired',
      );
      deps.onKilled?.(pause);
    }
    return killed;
  }

  start(): void {
    const tick = () => {
      this.running = this.sweep()
        .catch((err: unknown) =>
          this.deps.logger.warn({ err }, 'sweep of paused sandboxes held by no node failed'),
        )
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(tick, this.deps.intervalMs).unref();
        });
    };
    this.timer = setTimeout(tick, this.deps.intervalMs).unref();
  }

  /** Stops sweeping; resolves once a pass in progress has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
