import { Registry, Histogram, Gauge, collectDefaultMetrics } from 'prom-client';

/** The node's Prometheus registry and the HTTP metrics every request records. */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly httpDuration: Histogram<'method' | 'route' | 'route_source' | 'status'>;
  readonly sandboxStage: Histogram<'operation' | 'stage' | 'status'>;
  readonly sandboxInflight: Gauge<'operation' | 'stage'>;

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'aenv_' });
    this.httpDuration = new Histogram({
      name: 'agentenv_http_request_duration_seconds',
      help: 'HTTP request duration by method, matched route, route source and status',
      labelNames: ['method', 'route', 'route_source', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [this.registry],
    });
    this.sandboxStage = new Histogram({
      name: 'agentenv_sandbox_stage_duration_seconds',
      help: 'Duration of sandbox lifecycle operations (create, kill, pause, resume, fork, snapshot) by outcome',
      labelNames: ['operation', 'stage', 'status'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers: [this.registry],
    });
    this.sandboxInflight = new Gauge({
      name: 'agentenv_sandbox_stage_inflight',
      help: 'Sandbox lifecycle operations in progress',
      labelNames: ['operation', 'stage'],
      registers: [this.registry],
    });
  }

  /** Times a sandbox operation (or one stage of it) into agentenv_sandbox_stage_duration_seconds / _inflight. */
  async observe<T>(operation: string, fn: () => Promise<T>, stage = 'total'): Promise<T> {
    const labels = { operation, stage };
    this.sandboxInflight.inc(labels);
    const end = this.sandboxStage.startTimer(labels);
    try {
      const out = await fn();
      end({ status: 'ok' });
      return out;
    } catch (e) {
      end({ status: 'error' });
      throw e;
    } finally {
      this.sandboxInflight.dec(labels);
    }
  }

  /** Exposes per-state sandbox counts read from `counts` at scrape time. */
  trackSandboxStates(counts: () => Record<string, number>): void {
    new Gauge({
      name: 'aenv_sandboxes',
      help: 'Sandboxes on this node by state',
      labelNames: ['state'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [state, n] of Object.entries(counts())) this.set({ state }, n);
      },
    });
  }
}
