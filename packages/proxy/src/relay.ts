// Relaying one HTTP exchange to a fixed upstream (a node, as a gateway does it): the client's body re-framed
// (framing.ts), hop-by-hop fields dropped (headers.ts), the answer streamed back chunk by chunk or, when the
// caller must read it, buffered up to a bound. Unlike SandboxProxy it authorises nothing: the upstream does.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { connect as connectTls } from 'node:tls';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { requestFraming } from './framing.js';
import { downstreamResponseHeaders, endToEnd } from './headers.js';

/** No answer (or not all of it) within the relay's time bound. */
export class RelayTimeout extends Error {}
/** A buffered answer larger than its bound. */
export class RelayResponseTooLarge extends Error {}
/** The upstream could not be reached or broke off before answering. */
export class RelayUpstreamError extends Error {}

export interface RelayTarget {
  /** `http://host:port` */
  origin: string;
  /** Path and query as sent upstream (already escaped). */
  path: string;
  headers: Record<string, string | string[]>;
}

/** The answer of a buffered relay, before it is written to the client. */
export interface BufferedAnswer {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

export interface RelayOptions {
  dispatcher: Dispatcher;
  /** Bound on the whole exchange; undefined for streams (never time-bounded). */
  timeoutMs?: number;
  /** The request body when the caller already read it; else the client's stream is forwarded. */
  body?: Buffer;
  /**
   * Buffer the answer (at most this many bytes) and hand it to `onAnswer` before it is sent; over the bound the
   * exchange fails with RelayResponseTooLarge and nothing is sent.
   */
  buffer?: { maxBytes: number; onAnswer(answer: BufferedAnswer): Promise<void> | void };
}

/**
 * The request headers for the upstream: end-to-end fields of the client's request (Host kept), Content-Length
 * from the framing check, and X-Forwarded-For/Host/Proto/Method/URI.
 */
export function forwardedHeaders(
  req: IncomingMessage,
  bodyLength?: number,
): Record<string, string | string[]> {
  const out = endToEnd(req.headers);
  delete out.expect;
  delete out['content-length'];
  const framing = requestFraming(req);
  const length = bodyLength ?? framing.length;
  if (length !== undefined && (framing.hasBody || bodyLength !== undefined))
    out['content-length'] = String(length);
  const prior = req.headers['x-forwarded-for'];
  const client = req.socket.remoteAddress ?? '';
  const priorText = Array.isArray(prior) ? prior.join(', ') : prior;
  out['x-forwarded-for'] = priorText ? `${priorText}, ${client}` : client;
  if (req.headers.host) out['x-forwarded-host'] = req.headers.host;
  out['x-forwarded-proto'] = 'http';
  out['x-forwarded-method'] = req.method ?? 'GET';
  out['x-forwarded-uri'] = req.url ?? '/';
  return out;
}

/**
 * Sends `req` to `target` and its answer to `res`. Rejects (nothing written yet) with RelayTimeout,
 * RelayResponseTooLarge or RelayUpstreamError; after the first byte went out a failure only destroys `res`.
 * Driven by undici's dispatch handler (as SandboxProxy is), not its request API: no body stream, pipeline or
 * abort signal per exchange, which halves the relay's CPU time per request (docs/benchmarks.md#gateway).
 */
export function relayRequest(
  req: IncomingMessage,
  res: ServerResponse,
  target: RelayTarget,
  opts: RelayOptions,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const framing = requestFraming(req);
    const body = opts.body ?? (framing.hasBody ? req : null);
    let controller: Dispatcher.DispatchController | undefined;
    let pendingAbort: Error | undefined;
    let timedOut = false;
    let settled = false;
    /** Whether the answer's head went to `res` (from then on a failure only destroys it). */
    let started = false;
    /** Whether any of the answer's body (or its end) was handed to `res`. */
    let bodyWritten = false;
    let draining = false;
    let buffered: {
      status: number;
      headers: Record<string, string | string[]>;
      chunks: Buffer[];
      size: number;
    };
    const abort = (reason: Error) => {
      if (controller) controller.abort(reason);
      else pendingAbort = reason;
    };
    const timer =
      opts.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            abort(new RelayTimeout('no upstream answer in time'));
          }, opts.timeoutMs);
    const onClose = () => {
      if (!res.writableFinished) abort(new RelayUpstreamError('client went away'));
    };
    res.on('close', onClose);
    const settle = (err?: Error) => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      res.off('close', onClose);
      if (err) reject(err);
      else resolve();
    };
    const onDrain = () => {
      draining = false;
      controller?.resume();
    };
    const answerBuffered = async (b: typeof buffered) => {
      if (timer) clearTimeout(timer);
      const data = Buffer.concat(b.chunks, b.size);
      await opts.buffer!.onAnswer({ status: b.status, headers: b.headers, body: data });
      b.headers['content-length'] = String(data.length);
      res.writeHead(b.status, b.headers).end(data);
    };
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart: (c) => {
        controller = c;
        if (pendingAbort) c.abort(pendingAbort);
      },
      onResponseStart: (c, statusCode, upHeaders) => {
        if (statusCode < 200) return;
        const headers = downstreamResponseHeaders(upHeaders);
        if (opts.buffer) {
          buffered = { status: statusCode, headers, chunks: [], size: 0 };
          return;
        }
        try {
          res.writeHead(statusCode, headers);
          started = true;
          // A stream's headers go out at once (clients wait for them before the first message): after this
          // read's body, if any, so that a head and the data that came with it leave in one write.
          if (headers['content-length'] === undefined)
            queueMicrotask(() => {
              if (!bodyWritten && !res.destroyed) res.flushHeaders();
            });
        } catch (err) {
          // A header Node will not send: nothing was written yet.
          c.abort(err as Error);
        }
      },
      onResponseData: (c, chunk) => {
        if (opts.buffer) {
          buffered.size += chunk.length;
          if (buffered.size > opts.buffer.maxBytes)
            c.abort(new RelayResponseTooLarge(`upstream response larger than ${opts.buffer.maxBytes} bytes`));
          else buffered.chunks.push(chunk);
          return;
        }
        bodyWritten = true;
        if (!res.write(chunk) && !draining) {
          draining = true;
          c.pause();
          res.once('drain', onDrain);
        }
      },
      onResponseEnd: () => {
        if (settled) return;
        if (!opts.buffer) {
          bodyWritten = true;
          res.end();
          return settle();
        }
        answerBuffered(buffered).then(
          () => settle(),
          (e: unknown) => settle(e as Error),
        );
      },
      onResponseError: (_c, err) => {
        if (settled) return;
        if (started) {
          res.destroy();
          return settle();
        }
        if (err instanceof RelayResponseTooLarge) return settle(err);
        if (timedOut) return settle(new RelayTimeout('no upstream answer in time'));
        settle(err instanceof RelayUpstreamError ? err : new RelayUpstreamError(err.message));
      },
    };
    opts.dispatcher.dispatch(
      {
        origin: target.origin,
        path: target.path,
        method: (req.method ?? 'GET') as Dispatcher.HttpMethod,
        headers: target.headers,
        body,
        headersTimeout: 0,
        bodyTimeout: 0,
        // A chunked body of unknown end must not leave its connection to be reused for someone else.
        reset: body === req && framing.length === undefined,
      },
      handler,
    );
  });
}

/**
 * A WebSocket (or other) upgrade tunnelled to the upstream as bytes: the request head is rewritten, then both
 * sockets are piped both ways with no time bound; the upstream's handshake answer (101 or a refusal) reaches
 * the client as it was sent. Calls `onUnreachable` when no connection to the upstream could be made.
 */
export function relayUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  target: {
    host: string;
    port: number;
    tls?: boolean;
    path: string;
    headers: Record<string, string | string[]>;
  },
  onUnreachable: (err: Error) => void,
): void {
  client.pause();
  const up = target.tls
    ? connectTls({ host: target.host, port: target.port, servername: target.host })
    : connect({ host: target.host, port: target.port });
  let connected = false;
  const lines = [`${req.method ?? 'GET'} ${target.path} HTTP/1.1`];
  const headers = { ...target.headers, connection: 'Upgrade', upgrade: String(req.headers.upgrade ?? '') };
  for (const [k, v] of Object.entries(headers)) {
    for (const one of Array.isArray(v) ? v : [v]) {
      if (/[\r\n]/.test(one)) continue;
      lines.push(`${k}: ${one}`);
    }
  }
  up.once(target.tls ? 'secureConnect' : 'connect', () => {
    connected = true;
    up.setNoDelay(true);
    up.write(lines.join('\r\n') + '\r\n\r\n');
    if (head.length) up.write(head);
    up.pipe(client);
    client.pipe(up);
    client.resume();
  });
  const close = () => {
    up.destroy();
    client.destroy();
  };
  up.on('error', (e) => {
    if (!connected) onUnreachable(e);
    else close();
  });
  up.on('close', close);
  client.on('error', close);
  client.on('close', close);
}
