import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ListenAddress } from '../config/listen-address.js';
import type { Logger } from '../log.js';
import type { SchedulerMetrics } from './metrics.js';

export interface MetricsServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Prometheus text at GET /metrics. */
export async function startMetricsServer(
  address: ListenAddress,
  metrics: SchedulerMetrics,
  log: Logger,
): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    metrics.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      (e: Error) => {
        log.error({ err: e.message }, 'metrics collection failed');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable\n');
      },
    );
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const done = () => {
      server.off('error', reject);
      resolve();
    };
    if (address.host === undefined) server.listen(address.port, done);
    else server.listen(address.port, address.host, done);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
