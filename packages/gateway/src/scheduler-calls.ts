// The scheduler as the gateway uses it: every call timed into the metrics, lookups through the query-only
// scheduler when one is configured, and a view of node health refreshed in the background so that moving a
// sandbox off a lingering, unhealthy or vanished node (docs/cluster.md#moving-sandboxes) costs no extra call.
import { ConnectError } from '@connectrpc/connect';
import {
  NodeStatus,
  type Node,
  type ObservedNode,
  type ScheduleRequestHint,
  type SchedulerClient,
} from '@aenv/protocol';
import type { Logger } from 'pino';
import type { GatewayMetrics } from './metrics.js';

const HEALTH_REFRESH_MS = 1_000;
const RECORD_TIMEOUT_CAP_MS = 5_000;

export class SchedulerCalls {
  private discovered: Set<string> | undefined;
  private statuses = new Map<string, NodeStatus>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly main: SchedulerClient,
    private readonly lookups: SchedulerClient,
    private readonly metrics: GatewayMetrics,
    private readonly requestTimeoutMs: number,
    private readonly log: Logger,
  ) {}

  private async timed<T>(rpc: string, call: () => Promise<T>): Promise<T> {
    const end = this.metrics.schedulerRpc.startTimer({ rpc });
    try {
      const r = await call();
      end({ code: 'ok' });
      return r;
    } catch (e) {
      end({ code: e instanceof ConnectError ? String(e.code) : 'transport' });
      throw e;
    }
  }

  private opts(timeoutMs = this.requestTimeoutMs) {
    return { timeoutMs };
  }

  async lookup(sandboxId: string): Promise<Node> {
    const r = await this.timed('LookupNode', () => this.lookups.lookupNode({ sandboxId }, this.opts()));
    if (!r.node) throw new ConnectError('sandbox assignment not found', 5);
    return r.node;
  }

  async schedule(hint: ScheduleRequestHint | undefined): Promise<Node> {
    const r = await this.timed('Schedule', () => this.main.schedule(hint ? { hint } : {}, this.opts()));
    if (!r.node) throw new ConnectError('no nodes available', 14);
    return r.node;
  }

  async record(sandboxId: string, node: Node): Promise<void> {
    const timeoutMs = Math.min(this.requestTimeoutMs, RECORD_TIMEOUT_CAP_MS);
    await this.timed('RecordAssignment', () =>
      this.main.recordAssignment({ sandboxId, node }, { timeoutMs }),
    );
  }

  async listNodes(): Promise<Node[]> {
    return (await this.timed('ListNodes', () => this.main.listNodes({}, this.opts()))).nodes;
  }

  async observed(): Promise<ObservedNode[]> {
    return (
      await this.timed('ListObservedNodes', () => this.main.listObservedNodes({ clusterId: '' }, this.opts()))
    ).nodes;
  }

  async getNode(nodeId: string): Promise<ObservedNode | undefined> {
    return (await this.timed('GetNode', () => this.main.getNode({ nodeId, clusterId: '' }, this.opts())))
      .node;
  }

  /**
   * Whether sandboxes bound to `node` should be moved on a connect, resume or data-plane request: the node is
   * lingering (draining) or unhealthy by its heartbeats, or no longer discovered. Unknown (no view yet, no
   * heartbeats from it) is not a reason to move.
   */
  unfit(node: Node): boolean {
    if (this.discovered && !this.discovered.has(node.nodeId)) return true;
    const s = this.statuses.get(node.nodeId);
    return s === NodeStatus.LINGERING || s === NodeStatus.UNHEALTHY;
  }

  async refreshHealth(): Promise<void> {
    try {
      const [nodes, observed] = await Promise.all([this.listNodes(), this.observed()]);
      this.discovered = new Set(nodes.map((n) => n.nodeId));
      this.statuses = new Map(observed.map((n) => [n.nodeId, n.snapshot?.status ?? NodeStatus.UNSPECIFIED]));
    } catch (e) {
      // Keep the last view: a scheduler outage must not make every node look gone.
      this.log.debug({ err: (e as Error).message }, 'node health refresh failed');
    }
  }

  startHealthRefresh(): void {
    void this.refreshHealth();
    this.timer = setInterval(() => void this.refreshHealth(), HEALTH_REFRESH_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
