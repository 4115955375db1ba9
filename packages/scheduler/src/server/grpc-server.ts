// The gRPC endpoint: HTTP/2 without TLS (h2c, what gRPC clients use for plain-text), Connect's router with
// only the gRPC protocol enabled, so grpcurl, grpc-go (the reference's gateway and nodes) and grpc-js
// clients talk to it unchanged (docs/cluster.md#the-grpc-endpoint).
import {
  constants,
  createServer,
  type Http2Server,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type ServerHttp2Session,
} from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { DescService } from '@bufbuild/protobuf';
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type Interceptor,
  type ServiceImpl,
} from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import type { Logger } from '../log.js';
import type { ListenAddress } from '../config/listen-address.js';
import type { SchedulerMetrics } from './metrics.js';
import { unaryFastPath } from './unary-fast-path.js';

/** gRPC's customary receive limit; larger requests are refused with RESOURCE_EXHAUSTED. */
export const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
const MAX_CONCURRENT_STREAMS = 1000;
const GRACEFUL_CLOSE_MS = 5000;

export interface GrpcServer {
  readonly port: number;
  close(): Promise<void>;
}

/** What a failed call answers: only errors the handlers chose reach the caller; anything else is Internal. */
function wireError(e: unknown, rpc: string, log: Logger): ConnectError {
  if (e instanceof ConnectError) return e;
  log.error({ rpc, err: e instanceof Error ? e.stack : String(e) }, 'rpc failed');
  return new ConnectError('internal error', Code.Internal);
}

function metricsAndErrors(metrics: SchedulerMetrics, log: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    const rpc = req.method.name;
    try {
      const res = await next(req);
      metrics.observeRpc(rpc, 'OK', (performance.now() - started) / 1000);
      return res;
    } catch (e) {
      const err = wireError(e, rpc, log);
      metrics.observeRpc(rpc, Code[err.code], (performance.now() - started) / 1000);
      throw err;
    }
  };
}

/**
 * grpc-message percent-encoded as the gRPC spec says (only bytes outside printable ASCII, and '%'). Connect
 * encodes it with encodeURIComponent, which grpc-js decodes only partly ("a%2C b" for "a, b").
 */
export function grpcMessageEncode(message: string): string {
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function reencodeMessage(headers: unknown): void {
  if (typeof headers !== 'object' || headers === null) return;
  const h = headers as Record<string, unknown>;
  if (typeof h['grpc-message'] !== 'string') return;
  let raw: string;
  try {
    raw = decodeURIComponent(h['grpc-message']);
  } catch {
    return;
  }
  h['grpc-message'] = grpcMessageEncode(raw);
}

/** Resets a stream whose answer is complete while the client is still sending its request. */
function endUnread(req: Http2ServerRequest): void {
  const stream = req.stream;
  if (!req.complete && !stream.destroyed && !stream.closed) stream.close(constants.NGHTTP2_NO_ERROR);
}

/**
 * Per-stream fixes around Connect's handler: grpc-message encoded per spec, and a stream answered before its
 * request was read to the end (a refused oversized message) is reset with NO_ERROR, as grpc-go does, instead
 * of staying half-open while the client is still sending.
 */
function withStreamFixes(handler: (req: Http2ServerRequest, res: Http2ServerResponse) => void) {
  return (req: Http2ServerRequest, res: Http2ServerResponse) => {
    // After the compat layer sent the trailers (its 'wantTrailers' listener runs first).
    res.stream.once('wantTrailers', () => setImmediate(() => endUnread(req)));
    const writeHead = res.writeHead.bind(res) as (...args: unknown[]) => Http2ServerResponse;
    res.writeHead = ((...args: unknown[]) => {
      reencodeMessage(args[args.length - 1]);
      return writeHead(...args);
    }) as typeof res.writeHead;
    const addTrailers = res.addTrailers.bind(res);
    res.addTrailers = (trailers) => {
      reencodeMessage(trailers);
      addTrailers(trailers);
    };
    handler(req, res);
  };
}

/** A path that names no method gets a gRPC answer (UNIMPLEMENTED), not an HTTP 404. */
function unimplemented(req: Http2ServerRequest, res: Http2ServerResponse): void {
  const grpc = (req.headers['content-type'] ?? '').startsWith('application/grpc');
  if (!grpc) {
    res.writeHead(415, { 'content-type': 'text/plain' });
    res.end('this endpoint speaks gRPC only\n');
    return;
  }
  // A trailers-only response: one HEADERS frame carrying the status, ending the stream.
  res.stream.respond(
    {
      ':status': 200,
      'content-type': 'application/grpc+proto',
      'grpc-status': String(Code.Unimplemented),
      'grpc-message': grpcMessageEncode(`unknown method ${req.url}`),
    },
    { endStream: true },
  );
  setImmediate(() => endUnread(req));
}

export async function startGrpcServer(opts: {
  address: ListenAddress;
  routes: (router: ConnectRouter) => void;
  /** The same service's unary methods, served by the fast path (unary-fast-path.ts) when a call allows it. */
  fast?: { service: DescService; impl: Partial<ServiceImpl<DescService>> };
  metrics: SchedulerMetrics;
  log: Logger;
}): Promise<GrpcServer> {
  const handler = connectNodeAdapter({
    routes: opts.routes,
    grpc: true,
    grpcWeb: false,
    connect: false,
    readMaxBytes: MAX_MESSAGE_BYTES,
    interceptors: [metricsAndErrors(opts.metrics, opts.log)],
    fallback: unimplemented as never,
  });
  const viaConnect = withStreamFixes(handler as never);
  const fast = opts.fast
    ? unaryFastPath({
        ...opts.fast,
        maxMessageBytes: MAX_MESSAGE_BYTES,
        metrics: opts.metrics,
        log: opts.log,
        wireError: (e, rpc) => wireError(e, rpc, opts.log),
        encodeMessage: grpcMessageEncode,
      })
    : undefined;
  const server: Http2Server = createServer(
    { settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS } },
    (req, res) => {
      if (!fast?.(req, res)) viaConnect(req, res);
    },
  );
  const sessions = new Set<ServerHttp2Session>();
  server.on('session', (session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
    // A peer that breaks the protocol ends its own session, never the process.
    session.on('error', (e) => opts.log.debug({ err: e.message }, 'http2 session error'));
  });
  server.on('sessionError', (e) => opts.log.debug({ err: e.message }, 'http2 session error'));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const done = () => {
      server.off('error', reject);
      resolve();
    };
    if (opts.address.host === undefined) server.listen(opts.address.port, done);
    else server.listen(opts.address.port, opts.address.host, done);
  });
  server.on('error', (e) => opts.log.error({ err: e.message }, 'grpc server error'));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sessions) s.close();
        setTimeout(() => {
          for (const s of sessions) s.destroy();
        }, GRACEFUL_CLOSE_MS).unref();
      }),
  };
}
