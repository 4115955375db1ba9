// The scheduler's metrics (docs/cluster.md#metrics): the reference's names and labels, so the same
// dashboards read either scheduler; served by prom-client on scheduler.metrics_listen_addr.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ObservedNode } from '@aenv/protocol';
import { nodeStatusLabel } from '../registry/node-status.js';

const DURATION_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
];
const STATUS_LABELS = ['ready', 'connecting', 'unhealthy', 'lingering', 'unspecified'];

export class SchedulerMetrics {
  readonly registry = new Registry();
  readonly #rpc: Histogram<'rpc' | 'status'>;
  readonly #schedule: Histogram<'strategy' | 'status'>;
  readonly #assignments: Counter<'strategy'>;

  /** `observed` is read at every scrape (omit it for a query-only scheduler, which observes nothing). */
  constructor(observed?: () => readonly ObservedNode[]) {
    collectDefaultMetrics({ register: this.registry });
    this.#rpc = new Histogram({
      name: 'agentenv_scheduler_rpc_duration_seconds',
      help: 'Scheduler gRPC duration by RPC and status.',
      labelNames: ['rpc', 'status'],
      buckets: DURATION_BUCKETS,
      registers: [this.registry],
    });
    this.#schedule = new Histogram({
      name: 'agentenv_scheduler_schedule_duration_seconds',
      help: 'Scheduler Schedule duration by strategy and status.',
      labelNames: ['strategy', 'status'],
      buckets: DURATION_BUCKETS,
      registers: [this.registry],
    });
    this.#assignments = new Counter({
      name: 'agentenv_scheduler_schedule_assignments_total',
      help: 'Successful scheduler assignments by strategy.',
      labelNames: ['strategy'],
      registers: [this.registry],
    });
    if (observed) {
      new Gauge({
        name: 'agentenv_scheduler_observed_nodes',
        help: 'Observed node count by derived status.',
        labelNames: ['status'],
        registers: [this.registry],
        collect() {
          const counts = new Map(STATUS_LABELS.map((s) => [s, 0]));
          for (const n of observed()) {
            const label = nodeStatusLabel(n.snapshot?.status ?? 0);
            counts.set(label, (counts.get(label) ?? 0) + 1);
          }
          for (const [status, count] of counts) this.set({ status }, count);
        },
      });
    }
  }

  observeRpc(rpc: string, status: string, seconds: number): void {
    this.#rpc.observe({ rpc, status }, seconds);
  }

  observeSchedule(strategy: string, status: string, seconds: number): void {
    this.#schedule.observe({ strategy, status }, seconds);
    if (status === 'OK') this.#assignments.inc({ strategy });
  }
}
