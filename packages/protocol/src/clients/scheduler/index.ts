import { createClient, type Client } from '@connectrpc/connect';
import { Scheduler } from '../../gen/scheduler/v1/scheduler_pb.js';
import { createGrpcUnaryTransport } from './grpc-unary-transport.js';

export type SchedulerClient = Client<typeof Scheduler>;

/**
 * A scheduler.v1 client over plain gRPC (h2c), for nodes and gateways. `address` is `host:port` (the
 * reference's form) or an http:// URL.
 */
export function createSchedulerClient(address: string, opts: { timeoutMs?: number } = {}): SchedulerClient {
  const baseUrl = address.includes('://') ? address : `http://${address}`;
  return createClient(Scheduler, createGrpcUnaryTransport({ baseUrl, defaultTimeoutMs: opts.timeoutMs }));
}
