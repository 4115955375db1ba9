import {
  createServer,
  STATUS_CODES,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, {
  LogController,
  type FastifyInstance,
  type FastifyError,
  type FastifyBaseLogger,
  type FastifyReply,
} from 'fastify';
import type { Logger } from '../util/log.js';
import { newRequestId, runInRequest } from '../util/request-context.js';
import { unhandledFaultPoint } from '../util/crash-point.js';
import type { ServerMetrics } from '../observability/metrics.js';
import type { DataPlane } from '@aenv/proxy';
import { claimerOf } from './data-planes.js';
import { hasValidApiKey } from '../api/auth.js';
import { ApiError, errorAnswer, internalErrorMessage } from '../api/errors.js';

export interface HttpServerOptions {
  apiKey: string;
  bodyLimitBytes: number;
  logger: Logger;
  metrics: ServerMetrics;
  /**
   * The data-plane handlers in the order they are asked (front-door/data-planes.ts); the first that claims a
   * request serves it, and a request none claims goes to the control plane.
   */
  dataPlanes?: readonly DataPlane[];
  /** How long a client has to send a request's headers; HEADERS_TIMEOUT_MS unless a test needs it short. */
  headersTimeoutMs?: number;
}

/**
 * A client must send a request's headers within this time (else 408 and the connection is cut: a slow-loris
 * client holds nothing for long). A request's body has no time bound — volume content writes, `/files` and
 * template uploads stream as long as they take (Node's default `requestTimeout` cut every request at 300 s) —
 * and is bounded in size by its route (body limit, quota).
 */
export const HEADERS_TIMEOUT_MS = 60_000;
/** Node's own interval for checking those deadlines; shorter for a shorter headers timeout. */
const TIMEOUT_CHECK_MS = 30_000;

const OPEN_PATHS = new Set(['/health', '/metrics']);
/** Longest path parameter routed (template aliases may have 255 characters); longer ones get a 414. */
const MAX_PARAM_LENGTH = 512;
const REQUEST_ID = Symbol('aenv.requestId');
const LAST_EXCHANGE = Symbol('aenv.lastExchange');

type TaggedRequest = IncomingMessage & { [REQUEST_ID]?: string };
/** A client connection, with the request its parser last started and that request's answer. */
type TrackedSocket = Duplex & { [LAST_EXCHANGE]?: { req: IncomingMessage; res: ServerResponse } };

/**
 * True when the parser failed inside the body of a request that was already answered (refused before its body
 * was read, e.g. for a missing key or token): the error belongs to that request, and a second answer would be
 * read by the client as the answer to its next request (docs/security.md, "Request smuggling").
 */
function failedInAnsweredBody(socket: Duplex): boolean {
  const last = (socket as TrackedSocket)[LAST_EXCHANGE];
  return last !== undefined && !last.req.complete && last.res.headersSent;
}

function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

function errorBody(status: number, message: string): string {
  return JSON.stringify({ code: status, message });
}

/** A `{code, message}` answer written on the raw response (outside Fastify); a started answer is cut instead. */
function answerRaw(res: ServerResponse, status: number, message: string, requestId: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = errorBody(status, message);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    'x-request-id': requestId,
    connection: 'close',
  });
  res.end(body);
}

/**
 * A `{code, message}` answer written on a socket that has no HTTP response object (upgrades, parse errors),
 * then the connection is closed: nothing after the bad bytes is read as a request. A socket whose current
 * answer already started is only closed (the bytes would land inside that answer).
 */
function answerSocket(socket: Duplex, status: number, message: string): void {
  if (socket.destroyed) return;
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (!socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const body = errorBody(status, message);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
}

/** What Node's HTTP parser rejected, as the status and message a client reads (docs/security.md). */
function clientErrorAnswer(err: NodeJS.ErrnoException): { status: number; message: string } {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, message: 'request headers are too large' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
    case 'ERR_HTTP_HEADERS_TIMEOUT':
      return { status: 408, message: 'the request was not received in time' };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { status: 413, message: 'chunk extensions are too large' };
    default:
      return { status: 400, message: `malformed HTTP request (${err.code ?? 'parse error'})` };
  }
}

/**
 * The message of an error the framework raised itself (routing, body parsing, content type, limits), in words
 * that do not depend on Fastify's own texts where those echo the raw input back.
 */
function frameworkMessage(err: FastifyError): string {
  switch (err.code) {
    case 'FST_ERR_BAD_URL':
      return 'malformed URL: a path segment is not valid percent-encoding';
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return `a path parameter is longer than ${MAX_PARAM_LENGTH} characters`;
    default:
      return err.message;
  }
}

/**
 * The node's HTTP front: one Node server; sandbox traffic goes to the data plane, everything else to the
 * Fastify control plane with API-key auth, `{code, message}` errors and request metrics.
 *
 * No request can take the process down or get an answer in another shape: the data-plane entry is guarded
 * here, every framework error (bad URL, body, content type, limits, HTTP parse errors, shutting down) is
 * answered as `{code, message}`, and each request runs in its own context so that any later failure of it
 * names its request id (docs/security.md, "Hostile API callers").
 */
export function createHttpServer(opts: HttpServerOptions): { app: FastifyInstance; server: Server } {
  let server: Server | undefined;
  let closing = false;
  const log = opts.logger;
  const dataPlanes = opts.dataPlanes ?? [];

  const app = Fastify({
    loggerInstance: opts.logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: opts.bodyLimitBytes,
    maxParamLength: MAX_PARAM_LENGTH,
    onProtoPoisoning: 'remove',
    onConstructorPoisoning: 'remove',
    // Answered below in the documented shape instead of Fastify's own body.
    return503OnClosing: false,
    requestIdHeader: false,
    genReqId: (raw) => (raw as TaggedRequest)[REQUEST_ID] ?? newRequestId(),
    // The logger adds `requestId` to every line of a request (util/log.ts); a binding would repeat it.
    childLoggerFactory: (logger, bindings, childOpts) => {
      const { reqId: _reqId, ...rest } = bindings as Record<string, unknown>;
      return logger.child(rest, childOpts);
    },
    frameworkErrors: (err, req, reply) => {
      const status =
        typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500
          ? err.statusCode
          : 500;
      if (status >= 500) req.log.error({ err, url: req.url }, 'framework error');
      const message = status >= 500 ? internalErrorMessage(req.id) : frameworkMessage(err);
      // (the generic reply type of this option cannot take a status code: the raw response is typed plainly)
      const answer = reply as unknown as FastifyReply;
      void answer.code(status).header('x-request-id', req.id).send({ code: status, message });
    },
    clientErrorHandler: (err, socket) => {
      if (err.code === 'ECONNRESET' || socket.destroyed) return;
      const { status, message } = clientErrorAnswer(err);
      log.debug({ err: { code: err.code, message: err.message }, status }, 'malformed HTTP request');
      if (failedInAnsweredBody(socket)) socket.destroy();
      else answerSocket(socket, status, message);
    },
    serverFactory: (handler) => {
      const headersTimeout = opts.headersTimeoutMs ?? HEADERS_TIMEOUT_MS;
      const timeouts = {
        headersTimeout,
        requestTimeout: 0,
        connectionsCheckingInterval: Math.min(TIMEOUT_CHECK_MS, Math.max(10, Math.floor(headersTimeout / 2))),
      };
      server = createServer({ noDelay: true, keepAliveTimeout: 65_000, ...timeouts }, (req, res) => {
        const requestId = newRequestId();
        (req as TaggedRequest)[REQUEST_ID] = requestId;
        (req.socket as TrackedSocket)[LAST_EXCHANGE] = { req, res };
        runInRequest(requestId, () => {
          if (closing) return answerRaw(res, 503, 'the server is shutting down', requestId);
          unhandledFaultPoint('request');
          let claimer: DataPlane | undefined;
          try {
            claimer = claimerOf(dataPlanes, req);
            claimer?.handle(req, res);
          } catch (err) {
            log.error({ err, method: req.method, url: req.url }, 'data-plane request failed');
            return answerRaw(res, 500, internalErrorMessage(requestId), requestId);
          }
          if (!claimer) handler(req, res);
        });
      });
      server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        const requestId = newRequestId();
        runInRequest(requestId, () => {
          try {
            if (closing) return answerSocket(socket, 503, 'the server is shutting down');
            const claimer = claimerOf(dataPlanes, req);
            if (claimer) claimer.upgrade(req, socket, head);
            else answerSocket(socket, 404, `no WebSocket endpoint at ${pathOf(req.url ?? '/')}`);
          } catch (err) {
            log.error({ err, url: req.url }, 'data-plane upgrade failed');
            answerSocket(socket, 500, internalErrorMessage(requestId));
          }
        });
      });
      return server;
    },
  });

  app.addHook('preClose', async () => {
    closing = true;
  });

  // An empty JSON body means "no body" (e.g. POST /timeout without one uses the default); anything else must parse.
  const defaultJson = app.getDefaultJsonParser('remove', 'remove');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (typeof body === 'string' && body.trim() === '') return done(null, undefined);
    defaultJson(req, body as string, (err, value) => {
      if (err) return done(new ApiError(400, `malformed JSON body: ${err.message}`), undefined);
      done(null, value);
    });
  });

  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
    if (OPEN_PATHS.has(pathOf(req.url)) && (req.method === 'GET' || req.method === 'HEAD')) return;
    if (!hasValidApiKey(req.raw, opts.apiKey)) {
      await reply.code(401).send();
    }
  });

  app.addHook('onResponse', async (req, reply) => {
    const matched = req.routeOptions.url;
    opts.metrics.httpDuration.observe(
      {
        method: req.method,
        route: matched ?? 'unmatched',
        route_source: matched ? 'control_plane' : 'not_found',
        status: String(reply.statusCode),
      },
      reply.elapsedTime / 1000,
    );
    if (reply.statusCode >= 500) {
      req.log.warn({ method: req.method, url: req.url, status: reply.statusCode }, 'request failed');
    } else {
      req.log.debug(
        { method: req.method, url: req.url, status: reply.statusCode, ms: reply.elapsedTime },
        'request',
      );
    }
  });

  app.setNotFoundHandler((req, reply) => {
    void reply.code(404).send({ code: 404, message: `route not found: ${req.method} ${pathOf(req.url)}` });
  });

  app.setErrorHandler((err: Error, req, reply) => {
    const answer =
      'validation' in err && (err as FastifyError).validation
        ? errorAnswer(new ApiError(400, err.message))
        : errorAnswer(err, { method: req.method, path: req.routeOptions.url ?? '' });
    if (!answer.exposed || answer.status >= 500)
      req.log.error({ err, method: req.method, url: req.url }, 'request error');
    void reply.code(answer.status).send(answer.body);
  });

  if (!server) throw new Error('fastify did not call the server factory');
  return { app, server };
}
