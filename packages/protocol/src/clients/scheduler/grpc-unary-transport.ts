// A Connect `Transport` for unary gRPC calls over one HTTP/2 connection (h2c): what the scheduler clients use,
// every scheduler.v1 RPC being unary. Connect's own gRPC transport spends about three times the CPU per call
// (async iterables, abort signals, web Headers both ways) and ends each request in a frame of its own; here a
// call is one write of HEADERS and DATA, and a gateway's create pays two of them (docs/benchmarks.md#gateway).
import { connect, constants, type ClientHttp2Session, type OutgoingHttpHeaders } from 'node:http2';
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type DescMethodUnary,
  type MessageInitShape,
} from '@bufbuild/protobuf';
import { Code, ConnectError, type Transport } from '@connectrpc/connect';
import type { UnaryResponse } from '@connectrpc/connect';
import { decodeUnaryFrame, encodeUnaryFrame } from '../../grpc-unary-frame.js';

/** Largest answer accepted (a ListObservedNodes of many nodes is the largest the scheduler gives). */
const MAX_RESPONSE_BYTES = 64 * 1024 * 1024;
const USER_AGENT = 'aenv-scheduler-client';

/** gRPC's mapping of an HTTP status without a grpc-status (doc/http-grpc-status-mapping.md). */
function codeFromHttpStatus(status: number): Code {
  switch (status) {
    case 400:
      return Code.Internal;
    case 401:
      return Code.Unauthenticated;
    case 403:
      return Code.PermissionDenied;
    case 404:
      return Code.Unimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return Code.Unavailable;
    default:
      return Code.Unknown;
  }
}

/** The code of a stream reset by the peer (as Connect maps it); undefined for NO_ERROR and STREAM_CLOSED. */
function codeFromResetCode(rst: number): Code | undefined {
  switch (rst) {
    case constants.NGHTTP2_REFUSED_STREAM:
      return Code.Unavailable;
    case constants.NGHTTP2_CANCEL:
      return Code.Canceled;
    case constants.NGHTTP2_ENHANCE_YOUR_CALM:
      return Code.ResourceExhausted;
    case constants.NGHTTP2_INADEQUATE_SECURITY:
    case constants.NGHTTP2_HTTP_1_1_REQUIRED:
      return Code.PermissionDenied;
    case constants.NGHTTP2_NO_ERROR:
    case constants.NGHTTP2_STREAM_CLOSED:
      return undefined;
    default:
      return Code.Internal;
  }
}

const UNAVAILABLE_CAUSES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ERR_HTTP2_GOAWAY_SESSION',
  'ERR_HTTP2_INVALID_SESSION',
  'ERR_HTTP2_SESSION_ERROR',
]);

/**
 * A transport failure as a ConnectError: a scheduler that cannot be reached, or went away, is Unavailable
 * (whatever error of Node's carries that cause: a pending stream is cancelled *caused by* ECONNREFUSED).
 */
function fromNodeError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  let unavailable: Error | undefined;
  const seen = new Set<unknown>();
  for (let r: unknown = e; r instanceof Error && !seen.has(r); r = (r as { cause?: unknown }).cause) {
    seen.add(r);
    const code = (r as { code?: unknown }).code;
    if (typeof code === 'string' && UNAVAILABLE_CAUSES.has(code)) unavailable = r;
  }
  const err = unavailable
    ? new ConnectError(unavailable.message, Code.Unavailable)
    : new ConnectError((e as Error)?.message ?? String(e), Code.Internal);
  err.cause = e;
  return err;
}

function percentDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function single(v: string | string[] | number | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v === undefined ? undefined : String(v);
}

function webHeaders(h: Record<string, string | string[] | number | undefined> | undefined): Headers {
  const out = new Headers();
  if (!h) return out;
  for (const [k, v] of Object.entries(h)) {
    if (k.startsWith(':') || v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) out.append(k, String(one));
  }
  return out;
}

interface Connection {
  session: ClientHttp2Session;
  inflight: number;
  /** When a frame last arrived on any of its streams (performance.now()). */
  lastHeardAt: number;
  /** Why the connection failed (its streams are closed with no error of their own). */
  error?: Error;
}

/**
 * A gRPC transport (application/grpc+proto, no compression) for unary calls to `baseUrl` (`http://host:port`).
 * One HTTP/2 connection, made on the first call and again after it closes, goes away or answers nothing for a
 * whole deadline; it does not keep the process alive while no call is in flight. Streaming calls are refused.
 */
export function createGrpcUnaryTransport(opts: { baseUrl: string; defaultTimeoutMs?: number }): Transport {
  const url = new URL(opts.baseUrl);
  const prefix = url.pathname.replace(/\/+$/, '');
  let current: Connection | undefined;

  const drop = (c: Connection) => {
    if (current === c) current = undefined;
  };
  const connection = (): Connection => {
    if (current && !current.session.closed && !current.session.destroyed) return current;
    const session = connect(url.origin);
    const c: Connection = { session, inflight: 0, lastHeardAt: performance.now() };
    // Its streams fail with the session's error; the next call makes a new connection.
    session.on('error', (e) => {
      c.error = e;
      drop(c);
    });
    session.on('goaway', () => drop(c));
    session.on('close', () => drop(c));
    session.unref();
    current = c;
    return c;
  };

  return {
    unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: Parameters<Transport['unary']>[3],
      input: MessageInitShape<I>,
    ): Promise<UnaryResponse<I, O>> {
      const deadlineMs =
        timeoutMs === undefined ? opts.defaultTimeoutMs : timeoutMs <= 0 ? undefined : timeoutMs;
      return new Promise<UnaryResponse<I, O>>((resolve, reject) => {
        if (signal?.aborted) {
          reject(ConnectError.from(signal.reason, Code.Canceled));
          return;
        }
        let body: Uint8Array;
        try {
          body = toBinary(method.input, create(method.input, input));
        } catch (e) {
          reject(new ConnectError(`cannot encode request: ${(e as Error).message}`, Code.Internal));
          return;
        }
        const frame = encodeUnaryFrame(body);
        const headers: OutgoingHttpHeaders = {
          ':method': 'POST',
          ':path': `${prefix}/${method.parent.typeName}/${method.name}`,
          'content-type': 'application/grpc+proto',
          te: 'trailers',
          'user-agent': USER_AGENT,
        };
        if (deadlineMs !== undefined) headers['grpc-timeout'] = `${Math.max(1, Math.ceil(deadlineMs))}m`;
        if (header) new Headers(header).forEach((v, k) => (headers[k] = v));

        const c = connection();
        const started = performance.now();
        let stream: ReturnType<ClientHttp2Session['request']>;
        try {
          stream = c.session.request(headers);
        } catch (e) {
          drop(c);
          reject(fromNodeError(e));
          return;
        }
        if (c.inflight++ === 0) c.session.ref();
        let settled = false;
        let failure: ConnectError | undefined;
        let status = 0;
        let head: Record<string, string | string[] | number | undefined> | undefined;
        let trailers: Record<string, string | string[] | number | undefined> | undefined;
        const chunks: Buffer[] = [];
        let size = 0;
        const onAbort = () => fail(ConnectError.from(signal!.reason, Code.Canceled));
        const timer =
          deadlineMs === undefined
            ? undefined
            : setTimeout(() => {
                // A connection that answered nothing at all for a whole deadline is dropped (a peer that
                // vanished without closing it would otherwise stall every later call).
                if (c.lastHeardAt < started) {
                  drop(c);
                  c.session.destroy();
                }
                fail(new ConnectError('the operation timed out', Code.DeadlineExceeded));
              }, deadlineMs);
        signal?.addEventListener('abort', onAbort, { once: true });

        const done = () => {
          settled = true;
          if (timer) clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          if (--c.inflight === 0 && !c.session.destroyed) c.session.unref();
        };
        function fail(e: ConnectError) {
          if (settled) return;
          done();
          if (!stream.closed) stream.close(constants.NGHTTP2_CANCEL);
          reject(e);
        }
        const heard = () => (c.lastHeardAt = performance.now());

        stream.on('response', (h) => {
          heard();
          head = h;
          status = Number(h[':status']);
        });
        stream.on('data', (chunk: Buffer) => {
          heard();
          size += chunk.length;
          if (size > MAX_RESPONSE_BYTES)
            return fail(
              new ConnectError(`answer larger than ${MAX_RESPONSE_BYTES} bytes`, Code.ResourceExhausted),
            );
          chunks.push(chunk);
        });
        stream.on('trailers', (t) => {
          heard();
          trailers = t;
        });
        stream.on('error', (e) => (failure ??= fromNodeError(e)));
        stream.on('close', () => {
          if (settled) return;
          let outcome: ConnectError | UnaryResponse<I, O>;
          try {
            outcome = answer();
          } catch (e) {
            outcome = e instanceof ConnectError ? e : new ConnectError(String(e), Code.Internal);
          }
          done();
          if (outcome instanceof ConnectError) reject(outcome);
          else resolve(outcome);
        });
        stream.end(frame);

        function answer(): ConnectError | UnaryResponse<I, O> {
          if (!head) {
            // A connection that failed says why (ECONNREFUSED: Unavailable); else a reset says what it means.
            const why = failure ?? (c.error ? fromNodeError(c.error) : undefined);
            if (why?.code === Code.Unavailable) return why;
            const rst = codeFromResetCode(stream.rstCode ?? 0);
            if (rst !== undefined)
              return new ConnectError(`http/2 stream closed with error code ${stream.rstCode}`, rst);
            return why ?? new ConnectError('connection closed before an answer', Code.Unavailable);
          }
          if (status !== 200) return new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status));
          const type = single(head['content-type']) ?? '';
          if (!/^application\/grpc(\+proto)?(;|$)/i.test(type))
            return new ConnectError(`unsupported content type ${type}`, Code.Unknown);
          // A trailers-only answer carries its status in the head.
          const from = trailers ?? head;
          const grpcStatus = single(from['grpc-status']);
          if (grpcStatus === undefined) {
            const rst = codeFromResetCode(stream.rstCode ?? 0);
            if (rst !== undefined)
              return new ConnectError(`http/2 stream closed with error code ${stream.rstCode}`, rst);
            return failure ?? new ConnectError('protocol error: missing status', Code.Internal);
          }
          const code = Number(grpcStatus);
          if (!Number.isInteger(code) || code < 0 || code > 16)
            return new ConnectError(`protocol error: invalid grpc-status ${grpcStatus}`, Code.Internal);
          if (code !== 0)
            return new ConnectError(
              percentDecode(single(from['grpc-message']) ?? ''),
              code,
              webHeaders(from),
            );
          const bytes = decodeUnaryFrame(
            chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size),
            'output',
          );
          let message;
          try {
            message = fromBinary(method.output, bytes);
          } catch (e) {
            return new ConnectError(
              `protocol error: cannot decode answer: ${(e as Error).message}`,
              Code.Internal,
            );
          }
          const h = head;
          let header: Headers | undefined;
          let trailer: Headers | undefined;
          // Made only when read (an onHeader or onTrailer callback): no caller of the scheduler reads them.
          return {
            stream: false,
            service: method.parent,
            method,
            get header() {
              return (header ??= webHeaders(h));
            },
            message,
            get trailer() {
              return (trailer ??= webHeaders(trailers));
            },
          };
        }
      });
    },
    stream() {
      return Promise.reject(new ConnectError('streaming calls are not supported', Code.Unimplemented));
    },
  };
}
