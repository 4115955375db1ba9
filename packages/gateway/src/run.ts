// Starting a gateway: its HTTP front, its metrics endpoint and its scheduler clients.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createSchedulerClient } from '@aenv/protocol';
import { parseListenAddress, type ClusterConfig } from '@aenv/scheduler';
import type { Logger } from 'pino';
import { Gateway } from './gateway.js';
import { GatewayMetrics, listen, startMetricsServer } from './metrics.js';
import { SchedulerCalls } from './scheduler-calls.js';

export interface RunningGateway {
  readonly port: number;
  readonly metricsPort: number;
  stop(): Promise<void>;
}

export async function startGateway(
  config: ClusterConfig,
  apiKey: string,
  log: Logger,
): Promise<RunningGateway> {
  const g = config.gateway;
  const metrics = new GatewayMetrics();
  const main = createSchedulerClient(g.schedulerAddr);
  const lookups = g.queryOnlySchedulerAddr.trim()
    ? createSchedulerClient(g.queryOnlySchedulerAddr.trim())
    : main;
  const scheduler = new SchedulerCalls(main, lookups, metrics, g.requestTimeoutMs, log);
  const gateway = new Gateway({ config: g, apiKey, scheduler, metrics, log });
  const server: Server = createServer((req, res) => gateway.handle(req, res));
  server.on('upgrade', (req, socket, head) => gateway.upgrade(req, socket, head));
  server.on('clientError', (_e, socket) => {
    if (socket.writable)
      socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    else socket.destroy();
  });
  // Streams are not time-bounded; a client that never finishes its headers is.
  server.headersTimeout = 30_000;
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;
  await listen(server, parseListenAddress(g.httpListenAddr));
  const metricsServer = await startMetricsServer(parseListenAddress(g.metricsListenAddr), metrics);
  scheduler.startHealthRefresh();
  const port = (server.address() as AddressInfo).port;
  log.info(
    {
      port,
      metricsPort: metricsServer.port,
      scheduler: g.schedulerAddr,
      requestTimeoutMs: g.requestTimeoutMs,
    },
    'gateway listening',
  );
  return {
    port,
    metricsPort: metricsServer.port,
    stop: async () => {
      scheduler.stop();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await metricsServer.close();
      await gateway.close();
    },
  };
}
