// The gateway's Prometheus metrics (docs/cluster.md#gateway-metrics), served on `gateway.metrics_listen_addr`.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Histogram, Registry } from 'prom-client';
import type { ListenAddress } from '@aenv/scheduler';

export class GatewayMetrics {
  readonly registry = new Registry();
  readonly httpRequest = new Histogram({
    name: 'agentenv_gateway_http_request_duration_seconds',
    help: 'Requests served by the gateway, by route kind, method and status.',
    labelNames: ['route', 'method', 'status'] as const,
    registers: [this.registry],
  });
  readonly upstreamProxy = new Histogram({
    name: 'agentenv_gateway_upstream_proxy_duration_seconds',
    help: 'Exchanges forwarded to nodes, by route kind and outcome.',
    labelNames: ['route', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly schedulerRpc = new Histogram({
    name: 'agentenv_gateway_scheduler_rpc_duration_seconds',
    help: 'Calls to the scheduler, by RPC and gRPC code.',
    labelNames: ['rpc', 'code'] as const,
    registers: [this.registry],
  });
}

export async function startMetricsServer(
  address: ListenAddress,
  metrics: GatewayMetrics,
): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    metrics.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      () => res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable\n'),
    );
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await listen(server, address);
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export function listen(server: Server, address: ListenAddress): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const done = () => {
      server.off('error', reject);
      resolve();
    };
    if (address.host === undefined) server.listen(address.port, done);
    else server.listen(address.port, address.host, done);
  });
}
