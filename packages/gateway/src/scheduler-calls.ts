// The scheduler as the gateway uses it: every call timed into the metrics, lookups through the query-only
// scheduler when one is configured, and a view of node health refreshed in the background so that moving a
// sandbox off a lingering, unhealthy or vanished node (docs/cluster.md#moving-sandboxes) costs no extra call.
import { performance } from 'node:perf_hooks';
import { Code, ConnectError } from '@connectrpc/connect';
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
/**
 * Sandbox traffic reuses a binding it looked up this long ago (docs/cluster.md#sandbox-traffic-and-bindings):
 * one exec or file call is several requests in a row, each would otherwise cost a LookupNode round trip.
 */
const TRAFFIC_BINDING_TTL_MS = 1_000;
const TRAFFIC_BINDINGS_MAX = 10_000;
const RECORD_TIMEOUT_CAP_MS = 5_000;

export class SchedulerCalls {
  private discovered: Set<string> | undefined;
  private statuses = new Map<string, NodeStatus>();
  private timer: NodeJS.Timeout | undefined;
  /** Bindings recently looked up for sandbox traffic (a cache: losing it changes nothing but latency). */
  private readonly recent = new Map<string, { node: Node; at: number }>();

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
    if (!r.node) throw new ConnectError('sandbox assignment not found', Code.NotFound);
    return r.node;
  }

  /** {@link lookup} for sandbox traffic: a binding seen in the last second is reused. */
  async lookupForTraffic(sandboxId: string): Promise<Node> {
    const hit = this.recent.get(sandboxId);
    if (hit && performance.now() - hit.at < TRAFFIC_BINDING_TTL_MS) return hit.node;
    const node = await this.lookup(sandboxId);
    this.remember(sandboxId, node);
    return node;
  }

  /** Forgets a cached binding (its node failed, or the sandbox moved). */
  forget(sandboxId: string): void {
    this.recent.delete(sandboxId);
  }

  remember(sandboxId: string, node: Node): void {
    this.recent.delete(sandboxId);
    if (this.recent.size >= TRAFFIC_BINDINGS_MAX) this.recent.delete(this.recent.keys().next().value!);
    this.recent.set(sandboxId, { node, at: performance.now() });
  }

  async schedule(hint: ScheduleRequestHint | undefined): Promise<Node> {
    const r = await this.timed('Schedule', () => this.main.schedule(hint ? { hint } : {}, this.opts()));
    if (!r.node) throw new ConnectError('no nodes available', Code.Unavailable);
    return r.node;
  }

  async record(sandboxId: string, node: Node): Promise<void> {
    const timeoutMs = Math.min(this.requestTimeoutMs, RECORD_TIMEOUT_CAP_MS);
    this.forget(sandboxId);
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

  /** Whether `node` is gone: unhealthy by its heartbeats, or no longer discovered (a draining node is not). */
  lost(node: Node): boolean {
    if (this.discovered && !this.discovered.has(node.nodeId)) return true;
    return this.statuses.get(node.nodeId) === NodeStatus.UNHEALTHY;
  }

  /** Whether `node`'s heartbeats stopped (UNHEALTHY): it is not counted on to answer for its sandboxes. */
  silent(node: Pick<Node, 'nodeId'>): boolean {
    return this.statuses.get(node.nodeId) === NodeStatus.UNHEALTHY;
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
