import { Registry, Histogram, collectDefaultMetrics } from 'prom-client';

/** The node's Prometheus registry and the HTTP metrics every request records. */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly httpDuration: Histogram<'method' | 'route' | 'route_source' | 'status'>;

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'aenv_' });
    this.httpDuration = new Histogram({
      name: 'agentenv_http_request_duration_seconds',
      help: 'HTTP request duration by method, matched route, route source and status',
      labelNames: ['method', 'route', 'route_source', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [this.registry],
    });
  }
}
