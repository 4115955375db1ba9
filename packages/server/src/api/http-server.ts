import {
  createServer,
  STATUS_CODES,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { Duplex } from 'node:stream';
import { randomBytes } from 'node:crypto';
import Fastify, {
  LogController,
  type FastifyInstance,
  type FastifyError,
  type FastifyBaseLogger,
} from 'fastify';
import type { Logger } from '../util/log.js';
import type { ServerMetrics } from '../observability/metrics.js';
import { hasValidApiKey } from './auth.js';
import { ApiError, toApiError } from './errors.js';

/** The sandbox data plane (proxy): it claims requests before the control-plane router sees them. */
export interface DataPlane {
  /** True when the request is sandbox traffic (reference §2.7 classification). */
  claims(req: IncomingMessage): boolean;
  handle(req: IncomingMessage, res: ServerResponse): void;
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
}

export interface HttpServerOptions {
  apiKey: string;
  bodyLimitBytes: number;
  logger: Logger;
  metrics: ServerMetrics;
  dataPlane?: DataPlane;
}

const OPEN_PATHS = new Set(['/health', '/metrics']);

function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  const status =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? 431
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ERR_HTTP_HEADERS_TIMEOUT'
        ? 408
        : 400;
  const pending = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (err.code === 'ECONNRESET' || !socket.writable || pending?.headersSent) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify({
    code: status,
    message: `malformed HTTP request (${err.code ?? 'parse error'})`,
  });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
}

/**
 * The node's HTTP front: one Node server; sandbox traffic goes to the data plane, everything else to the
 * Fastify control plane with API-key auth, `{code, message}` errors and request metrics.
 */
export function createHttpServer(opts: HttpServerOptions): { app: FastifyInstance; server: Server } {
  let server: Server | undefined;
  const app = Fastify({
    loggerInstance: opts.logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: opts.bodyLimitBytes,
    onProtoPoisoning: 'remove',
    onConstructorPoisoning: 'remove',
    return503OnClosing: true,
    requestIdHeader: 'x-request-id',
    genReqId: () => randomBytes(8).toString('hex'),
    serverFactory: (handler) => {
      server = createServer({ noDelay: true, keepAliveTimeout: 65_000 }, (req, res) => {
        if (opts.dataPlane?.claims(req)) opts.dataPlane.handle(req, res);
        else handler(req, res);
      });
      // What Node's parser refuses (CL with TE, repeated CL, obs-fold, bad chunks…) answers in the
      // documented shape, then the connection closes (docs/security.md, "Request smuggling").
      server.on('clientError', answerClientError);
      server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        if (opts.dataPlane?.claims(req)) opts.dataPlane.upgrade(req, socket, head);
        else socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      });
      return server;
    },
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

  app.setErrorHandler((err: FastifyError | ApiError, req, reply) => {
    let apiErr: ApiError;
    if (err instanceof ApiError) apiErr = err;
    else if ('validation' in err && err.validation) apiErr = new ApiError(400, err.message);
    else if (typeof (err as FastifyError).statusCode === 'number' && (err as FastifyError).statusCode! < 500)
      apiErr = new ApiError((err as FastifyError).statusCode!, err.message);
    else apiErr = toApiError(err);
    if (apiErr.status >= 500) req.log.error({ err, url: req.url }, 'request error');
    void reply.code(apiErr.status).send(apiErr.toJSON());
  });

  if (!server) throw new Error('fastify did not call the server factory');
  return { app, server };
}
