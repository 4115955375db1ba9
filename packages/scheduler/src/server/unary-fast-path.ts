// The scheduler's unary RPCs served without Connect's handler (docs/benchmarks.md#gateway): the same method
// implementations, the same metrics and error answers, for the requests every node and gateway sends (gRPC,
// protobuf, no compression). Connect's handler costs about three times the CPU per call (a handler context with
// an abort signal and three web Headers, async iterables around one message) and sends the trailers in a write
// of their own; a gateway's create waits on two of these calls. Anything else (another content type, a
// compressed message, an unknown method) is left to Connect's handler, which answers it as before.
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { constants } from 'node:http2';
import { create, fromBinary, toBinary, type DescMethodUnary, type DescService } from '@bufbuild/protobuf';
import {
  Code,
  ConnectError,
  createHandlerContext,
  type HandlerContext,
  type ServiceImpl,
} from '@connectrpc/connect';
import { decodeUnaryFrame, encodeUnaryFrame } from '@aenv/protocol';
import type { Logger } from '../log.js';
import type { SchedulerMetrics } from './metrics.js';

type AnyImpl = (req: unknown, context: HandlerContext) => unknown;
type ContextInit = Parameters<typeof createHandlerContext>[0];
type Controller = ReturnType<typeof createHandlerContext>;

export interface FastPathOptions {
  service: DescService;
  impl: Partial<ServiceImpl<DescService>>;
  maxMessageBytes: number;
  metrics: SchedulerMetrics;
  log: Logger;
  /** The answer of an error (shared with Connect's interceptor: only ConnectErrors reach the caller). */
  wireError(e: unknown, rpc: string): ConnectError;
  /** grpc-message as the gRPC spec encodes it. */
  encodeMessage(message: string): string;
}

/** `grpc-timeout` in ms (`1..8 digits` + H, M, S, m, u or n), or undefined. */
function parseTimeout(v: string | undefined): number | undefined {
  const m = v === undefined ? null : /^(\d{1,8})([HMSmun])$/.exec(v);
  if (!m) return undefined;
  const unit = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 0.001, n: 0.000001 }[m[2] as 'H'];
  return Number(m[1]) * unit;
}

/**
 * The handler's context, made only if the handler reads more than its method: none of the scheduler's does,
 * and making one (an abort signal, a deadline timer, three Headers) is most of what this path saves.
 */
function lazyContext(init: ContextInit): { context: HandlerContext; made(): Controller | undefined } {
  let real: Controller | undefined;
  const get = () => (real ??= createHandlerContext(init));
  const context: HandlerContext = {
    method: init.method,
    service: init.service,
    requestMethod: init.requestMethod,
    protocolName: init.protocolName,
    url: init.url,
    get signal() {
      return get().signal;
    },
    get timeoutMs() {
      return get().timeoutMs;
    },
    get requestHeader() {
      return get().requestHeader;
    },
    get responseHeader() {
      return get().responseHeader;
    },
    get responseTrailer() {
      return get().responseTrailer;
    },
    get values() {
      return get().values;
    },
  };
  return { context, made: () => real };
}

function isPlainGrpc(req: Http2ServerRequest): 'application/grpc' | 'application/grpc+proto' | undefined {
  const type = req.headers['content-type']?.toLowerCase();
  if (type !== 'application/grpc' && type !== 'application/grpc+proto') return undefined;
  const enc = req.headers['grpc-encoding'];
  return enc === undefined || (typeof enc === 'string' && enc.toLowerCase() === 'identity')
    ? type
    : undefined;
}

/** Resets a stream whose answer is complete while the client is still sending (as grpc-go does). */
function endUnread(req: Http2ServerRequest): void {
  const stream = req.stream;
  if (!req.complete && !stream.destroyed && !stream.closed) stream.close(constants.NGHTTP2_NO_ERROR);
}

/**
 * A handler that serves a request (and returns true) when it is a plain gRPC call of one of `impl`'s methods;
 * false leaves the request untouched for the next handler.
 */
export function unaryFastPath(
  o: FastPathOptions,
): (req: Http2ServerRequest, res: Http2ServerResponse) => boolean {
  const methods = new Map<string, { method: DescMethodUnary; fn: AnyImpl }>();
  for (const method of o.service.methods) {
    const fn = o.impl[method.localName as keyof typeof o.impl] as AnyImpl | undefined;
    if (method.methodKind === 'unary' && typeof fn === 'function')
      methods.set(`/${o.service.typeName}/${method.name}`, {
        method: method as DescMethodUnary,
        fn: fn.bind(o.impl),
      });
  }

  const answer = (
    req: Http2ServerRequest,
    res: Http2ServerResponse,
    type: string,
    outcome: { frame: Buffer } | { error: ConnectError },
    extra?: Controller,
  ) => {
    if (res.stream.destroyed || res.stream.closed) return;
    const trailers: Record<string, string> =
      'frame' in outcome
        ? { 'grpc-status': '0' }
        : {
            'grpc-status': String(outcome.error.code),
            'grpc-message': o.encodeMessage(outcome.error.rawMessage),
          };
    const headers: Record<string, string> = { 'content-type': type };
    if (extra) {
      extra.responseHeader.forEach((v, k) => (headers[k] = v));
      extra.responseTrailer.forEach((v, k) => (trailers[k] ??= v));
    }
    // Headers, message and trailers leave in one write.
    res.writeHead(200, headers);
    res.addTrailers(trailers);
    if ('frame' in outcome) res.end(outcome.frame);
    else {
      // An answer before the request was read to its end (an oversized message): the stream is then reset.
      if (!req.complete) res.stream.once('wantTrailers', () => setImmediate(() => endUnread(req)));
      res.end();
    }
  };

  const call = async (
    req: Http2ServerRequest,
    res: Http2ServerResponse,
    type: string,
    entry: { method: DescMethodUnary; fn: AnyImpl },
    body: Buffer,
  ) => {
    const rpc = entry.method.name;
    const started = performance.now();
    let lazy: ReturnType<typeof lazyContext> | undefined;
    try {
      const message = decodeUnaryFrame(body, 'input');
      let input: unknown;
      try {
        input = fromBinary(entry.method.input, message);
      } catch (e) {
        throw new ConnectError(`parse binary: ${(e as Error).message}`, Code.Internal);
      }
      const timeoutMs = parseTimeout(req.headers['grpc-timeout'] as string | undefined);
      lazy = lazyContext({
        service: o.service,
        method: entry.method,
        protocolName: 'grpc',
        requestMethod: 'POST',
        url: req.url,
        ...(timeoutMs === undefined ? {} : { timeoutMs }),
        requestHeader: Object.entries(req.headers).flatMap(([k, v]) =>
          k.startsWith(':') || v === undefined ? [] : [[k, String(v)] as [string, string]],
        ),
      });
      const output = await entry.fn(input, lazy.context);
      const bytes = toBinary(entry.method.output, create(entry.method.output, output as never));
      const frame = encodeUnaryFrame(bytes);
      o.metrics.observeRpc(rpc, 'OK', (performance.now() - started) / 1000);
      answer(req, res, type, { frame }, lazy.made());
    } catch (e) {
      const error = o.wireError(e, rpc);
      o.metrics.observeRpc(rpc, Code[error.code], (performance.now() - started) / 1000);
      answer(req, res, type, { error }, lazy?.made());
    } finally {
      lazy?.made()?.abort();
    }
  };

  return (req, res) => {
    if (req.method !== 'POST') return false;
    const entry = methods.get(req.url);
    if (!entry) return false;
    const type = isPlainGrpc(req);
    if (!type) return false;
    const chunks: Buffer[] = [];
    let size = 0;
    let declared: number | undefined;
    let refused = false;
    req.on('data', (chunk: Buffer) => {
      if (refused) return;
      chunks.push(chunk);
      size += chunk.length;
      if (declared === undefined && size >= 5) declared = Buffer.concat(chunks, size).readUInt32BE(1);
      // Refused as soon as the prefix says too much, before the rest is read.
      if ((declared ?? 0) > o.maxMessageBytes || size > o.maxMessageBytes + 5) {
        refused = true;
        chunks.length = 0;
        const error = new ConnectError(
          `message size ${declared ?? size} is larger than configured readMaxBytes ${o.maxMessageBytes}`,
          Code.ResourceExhausted,
        );
        o.metrics.observeRpc(entry.method.name, Code[error.code], 0);
        answer(req, res, type, { error });
      }
    });
    req.on('end', () => {
      if (!refused)
        void call(req, res, type, entry, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    });
    return true;
  };
}
