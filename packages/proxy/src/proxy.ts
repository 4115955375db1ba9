import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import { ENVD_UNAUTHORIZED_MESSAGE, ErrorKind, isDomainError } from '@aenv/protocol';
import type { Logger } from 'pino';
import type { DataPlane } from './data-plane.js';
import { classify, RoutingError, type DataPlaneRoute } from './routing.js';
import { AutoResumeTimeout, type ProxyTarget, type SandboxDirectory } from './directory.js';
import { FramingError, requestFraming, type BodyFraming } from './framing.js';
import { downstreamResponseHeaders, maskedHost, upstreamRequestHeaders } from './headers.js';
import { envdUrl, SignedUrlBudgetExceeded } from './signed-urls.js';

export interface SandboxProxyOptions {
  domains: readonly string[];
  envdPort: number;
  platformApiKey: string;
  directory: SandboxDirectory;
  logger: Logger;
  connectTimeoutMs?: number;
  responseTimeoutMs?: number;
}

/** An answer to the client instead of forwarding. `json` bodies follow E2B's proxy shapes; others are plain text. */
class ProxyReply extends Error {
  constructor(
    readonly status: number,
    readonly body: string | Record<string, unknown>,
  ) {
    super(typeof body === 'string' ? body : String(body.message ?? status));
  }
}

const clientError = (status: number, message: string) => new ProxyReply(status, { code: status, message });

const CLAIM = Symbol('aenv.proxyClaim');
/** Largest non-101 answer to an upgrade request relayed to the client (it is buffered to frame it). */
const MAX_UPGRADE_REFUSAL_BYTES = 64 * 1024;

type Claim = DataPlaneRoute | { signedFiles: true; upstreamPath: string } | RoutingError;
type ClaimedRequest = IncomingMessage & { [CLAIM]?: Claim };

interface Instance {
  /** Keep-alive connections to this sandbox instance only (one pool per port): never shared with another. */
  agent: Agent;
  /** Open exchanges through this instance: destroyed together when the sandbox instance goes away. */
  open: Set<{ destroy(): void }>;
}

interface Routed {
  route: DataPlaneRoute;
  target: ProxyTarget;
  framing: BodyFraming;
  /** The envd token, forwarded only when it was validated for this request. */
  accessToken?: string;
}

class ResponseTimeout extends Error {}
class ClientGone extends Error {}

function singleHeader(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

const STATUS_TEXT = /^[\t\x20-\x7e\x80-\xff]*$/;

/**
 * The data-plane reverse proxy (docs/networking.md#data-plane-routing): routes by host, `/proxy` prefix, routing headers or a signed
 * `/files` URL to `http://<sandbox host-interaction ip>:<port>`, enforces per-port tokens before anything else
 * happens (auto-resume included), streams both ways through undici with every body re-framed, bridges
 * WebSockets, and tears down every open exchange of a sandbox instance when it stops (docs/security.md).
 */
export class SandboxProxy implements DataPlane {
  private readonly instances = new Map<string, Instance>();
  private readonly connectTimeoutMs: number;
  private readonly responseTimeoutMs: number;

  constructor(private readonly opts: SandboxProxyOptions) {
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 5_000;
    this.responseTimeoutMs = opts.responseTimeoutMs ?? 30_000;
  }

  claims(req: IncomingMessage): boolean {
    let claim: Claim | undefined;
    try {
      claim = classify(req, this.opts.domains);
    } catch (e) {
      if (!(e instanceof RoutingError)) throw e;
      claim = e;
    }
    if (!claim) return false;
    (req as ClaimedRequest)[CLAIM] = claim;
    return true;
  }

  /** Closes every stream and pooled connection of a sandbox instance (kill, pause, slot release). */
  closeInstance(instanceId: string): void {
    const inst = this.instances.get(instanceId);
    if (!inst) return;
    this.instances.delete(instanceId);
    for (const x of inst.open) x.destroy();
    inst.agent.destroy().catch(() => {});
  }

  closeAll(): void {
    for (const id of [...this.instances.keys()]) this.closeInstance(id);
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.forward(req as ClaimedRequest, res).catch((err: unknown) => this.fail(res, err));
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    // Nothing the client sends after the handshake is read before the sandbox has switched protocols.
    socket.pause();
    this.bridgeUpgrade(req as ClaimedRequest, socket, head).catch((err: unknown) =>
      this.refuseUpgrade(socket, err),
    );
  }

  private reply(err: unknown): ProxyReply {
    if (err instanceof ProxyReply) return err;
    this.opts.logger.warn({ err }, 'proxy failure');
    return new ProxyReply(502, 'upstream unavailable');
  }

  private fail(res: ServerResponse, err: unknown): void {
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    const reply = this.reply(err);
    const json = typeof reply.body !== 'string';
    const body = json ? JSON.stringify(reply.body) : (reply.body as string);
    res
      .writeHead(reply.status, {
        'content-type': json ? 'application/json' : 'text/plain; charset=utf-8',
        'content-length': String(Buffer.byteLength(body)),
      })
      .end(body);
  }

  private refuseUpgrade(socket: Duplex, err: unknown): void {
    const reply = this.reply(err);
    const json = typeof reply.body !== 'string';
    const body = json ? JSON.stringify(reply.body) : (reply.body as string);
    if (socket.writable) {
      socket.end(
        `HTTP/1.1 ${reply.status} ${reply.status === 401 ? 'Unauthorized' : 'Error'}\r\n` +
          `Content-Type: ${json ? 'application/json' : 'text/plain; charset=utf-8'}\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        () => socket.destroy(),
      );
    } else socket.destroy();
  }

  /** Routing, framing and authorisation: all decided before the sandbox is touched (resumed or sent a byte). */
  private async route(req: ClaimedRequest, upgrade: boolean): Promise<Routed> {
    const claim = req[CLAIM];
    if (!claim) throw new ProxyReply(400, 'missing sandbox routing header');
    if (claim instanceof RoutingError) throw new ProxyReply(claim.status, claim.message);
    let framing: BodyFraming;
    try {
      framing = requestFraming(req);
    } catch (e) {
      if (e instanceof FramingError) throw clientError(400, e.message);
      throw e;
    }
    if (upgrade && framing.hasBody) throw clientError(400, 'an upgrade request cannot have a body');
    if ((req.url ?? '').includes(this.opts.platformApiKey))
      throw clientError(400, 'the platform API key must not be sent to a sandbox');
    let route: DataPlaneRoute;
    let signatureVerified = false;
    if ('signedFiles' in claim) {
      let id: string | undefined;
      try {
        id = this.opts.directory.findBySignedFilesUrl(claim.upstreamPath, req.method ?? 'GET');
      } catch (e) {
        if (e instanceof SignedUrlBudgetExceeded) throw clientError(429, e.message);
        throw e;
      }
      if (!id) throw clientError(401, 'no running sandbox accepts this signed URL');
      route = { sandboxId: id, port: this.opts.envdPort, upstreamPath: claim.upstreamPath, via: 'signature' };
      signatureVerified = true;
    } else {
      route = claim;
    }
    const found = this.opts.directory.lookup(route.sandboxId) ?? (await this.adopt(route.sandboxId));
    if (!found || found.state === 'killing') throw this.notFound(route.sandboxId);
    const accessToken = this.authorize(req, route, found, signatureVerified);
    const target = await this.resolveTarget(req, route, found);
    return { route, target, framing, ...(accessToken !== undefined ? { accessToken } : {}) };
  }

  /**
   * A sandbox another node paused into the shared repository; its NotFound (lost, moved) is the answer, and so is
   * its Unavailable (it mounts volumes only its own node has: 503).
   */
  private async adopt(sandboxId: string): Promise<ProxyTarget | undefined> {
    try {
      return await this.opts.directory.adopt?.(sandboxId);
    } catch (e) {
      if (isDomainError(e, ErrorKind.NotFound)) {
        throw new ProxyReply(502, { sandboxId, message: e.message, code: 502 });
      }
      if (isDomainError(e, ErrorKind.Unavailable) && e.expose) {
        throw new ProxyReply(503, { sandboxId, message: e.message, code: 503 });
      }
      this.opts.logger.warn(
        { err: e, sandboxId },
        'could not take the sandbox over from the shared repository',
      );
      return undefined;
    }
  }

  private notFound(sandboxId: string): ProxyReply {
    return new ProxyReply(502, { sandboxId, message: 'The sandbox was not found', code: 502 });
  }

  /** envd's view of the request target: the same URL parser envd routes with. */
  private envdPath(route: DataPlaneRoute): string {
    try {
      return envdUrl(route.upstreamPath).pathname;
    } catch {
      throw clientError(400, 'invalid request target');
    }
  }

  /**
   * Throws unless the request may reach `target`; returns the validated envd token to forward, if any. Uses
   * only what the sandbox's record says (secure, public traffic), so it runs before any resume or wait.
   */
  private authorize(
    req: IncomingMessage,
    route: DataPlaneRoute,
    target: ProxyTarget,
    signatureVerified: boolean,
  ): string | undefined {
    if (route.port === this.opts.envdPort) {
      const path = this.envdPath(route);
      // Only the node initialises envd (it calls envd directly, never through here).
      if (path === '/init') throw clientError(403, 'envd /init is reserved for the node');
      if (!target.secure) return undefined;
      const token = singleHeader(req, 'x-access-token');
      if (token !== undefined) {
        if (this.opts.directory.verifyEnvdToken(target.sandboxId, token)) return token;
        throw clientError(401, ENVD_UNAUTHORIZED_MESSAGE);
      }
      if (signatureVerified) return undefined;
      if (
        path === '/files' &&
        this.opts.directory.verifyFilesSignature(target.sandboxId, route.upstreamPath, req.method ?? 'GET')
      )
        return undefined;
      throw clientError(401, ENVD_UNAUTHORIZED_MESSAGE);
    }
    if (target.allowPublicTraffic) return undefined;
    const token = singleHeader(req, 'e2b-traffic-access-token');
    if (token && this.opts.directory.verifyTrafficToken(target.sandboxId, token)) return undefined;
    throw clientError(401, 'unauthorized: missing or invalid traffic access token');
  }

  /** Waits out transitions and auto-resumes (the request is already authorised). */
  private async resolveTarget(
    req: IncomingMessage,
    route: DataPlaneRoute,
    found: ProxyTarget,
  ): Promise<ProxyTarget> {
    const { sandboxId, port } = route;
    const dir = this.opts.directory;
    let t: ProxyTarget | undefined = found;
    if (t.state !== 'running' && t.state !== 'paused') {
      t = await dir.settle(sandboxId);
      if (!t || t.state === 'killing') throw this.notFound(sandboxId);
    }
    if (t.state === 'paused') {
      // isRunning() must read false for a paused sandbox (E2B answers 502 there); anything else gets the 410.
      const envdHealth =
        port === this.opts.envdPort && req.method === 'GET' && this.envdPath(route) === '/health';
      if (!t.autoResume && envdHealth) {
        throw new ProxyReply(502, { sandboxId, message: 'The sandbox is paused', code: 502 });
      }
      if (!t.autoResume) throw new ProxyReply(410, 'sandbox is not proxyable in its current state');
      try {
        t = await dir.autoResume(sandboxId);
      } catch (e) {
        if (e instanceof AutoResumeTimeout) throw new ProxyReply(504, 'sandbox auto-resume timed out');
        this.opts.logger.warn({ err: e, sandboxId }, 'auto-resume failed');
        throw new ProxyReply(502, 'sandbox auto-resume failed');
      }
    }
    if (t.state !== 'running') throw new ProxyReply(410, 'sandbox is not proxyable in its current state');
    if (!t.upstream)
      throw new ProxyReply(502, {
        sandboxId,
        port,
        message: 'sandbox route is temporarily unavailable',
        code: 502,
      });
    return t;
  }

  private upstreamHeaders(req: IncomingMessage, r: Routed): Record<string, string | string[]> {
    const headers = upstreamRequestHeaders(req.headers, {
      platformApiKey: this.opts.platformApiKey,
      ...(r.accessToken !== undefined ? { validatedAccessToken: r.accessToken } : {}),
      upstreamHost:
        r.target.maskRequestHost !== undefined
          ? maskedHost(r.target.maskRequestHost, r.route.port)
          : `${r.target.upstream!.host}:${r.route.port}`,
      method: req.method ?? 'GET',
      upstreamPath: r.route.upstreamPath,
    });
    if (r.framing.length !== undefined) headers['content-length'] = String(r.framing.length);
    return headers;
  }

  /** `https://` for the sandbox's httpsPorts (the agent does not verify their certificates), else `http://`. */
  private origin(r: Routed): string {
    const tls = r.route.port !== this.opts.envdPort && r.target.httpsPorts?.includes(r.route.port);
    return `${tls ? 'https' : 'http'}://${r.target.upstream!.host}:${r.route.port}`;
  }

  private instance(instanceId: string): Instance {
    let inst = this.instances.get(instanceId);
    if (!inst) {
      inst = {
        agent: new Agent({
          pipelining: 1,
          // Streams (process output, watches, SSE) may stay silent for long; the proxy times only the headers.
          headersTimeout: 0,
          bodyTimeout: 0,
          // httpsPorts: TLS to the sandbox's own service, whose (often self-signed) certificate is not
          // verified, as E2B documents; the hop stays on the host's veth.
          connect: { timeout: this.connectTimeoutMs, rejectUnauthorized: false },
        }),
        open: new Set(),
      };
      this.instances.set(instanceId, inst);
    }
    return inst;
  }

  /** The answer for an upstream failure before any response byte reached the client. */
  private upstreamError(err: Error, r: Routed): ProxyReply {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ECONNREFUSED')
      return new ProxyReply(502, {
        sandboxId: r.target.sandboxId,
        message: 'The sandbox is running but port is not open',
        port: r.route.port,
        code: 502,
      });
    if (err instanceof ResponseTimeout || code === 'UND_ERR_CONNECT_TIMEOUT') return new ProxyReply(504, '');
    if (code === 'UND_ERR_INVALID_ARG')
      return clientError(400, `request cannot be forwarded: ${err.message}`);
    this.opts.logger.debug({ err: err.message, code }, 'upstream request failed');
    return new ProxyReply(502, '');
  }

  private async forward(req: ClaimedRequest, res: ServerResponse): Promise<void> {
    const r = await this.route(req, false);
    const upstream = r.target.upstream!;
    const inst = this.instance(upstream.instanceId);
    let controller: Dispatcher.DispatchController | undefined;
    let pendingAbort: Error | undefined;
    let timer: NodeJS.Timeout | undefined;
    let settled = false;
    let draining = false;
    const abort = (reason: Error) => {
      if (controller) controller.abort(reason);
      else pendingAbort = reason;
    };
    const exchange = {
      destroy: () => {
        abort(new ClientGone('sandbox instance closed'));
        res.destroy();
      },
    };
    const finish = () => {
      settled = true;
      if (timer) clearTimeout(timer);
      inst.open.delete(exchange);
    };
    const arm = () => {
      timer = setTimeout(() => {
        if (controller) return controller.abort(new ResponseTimeout('no response in time'));
        // Still waiting for a connection: answer now; the request is dropped when it gets one.
        pendingAbort = new ResponseTimeout('no response in time');
        finish();
        this.fail(res, new ProxyReply(504, ''));
      }, this.responseTimeoutMs);
    };
    inst.open.add(exchange);
    res.on('close', () => {
      if (!settled) abort(new ClientGone('client went away'));
    });
    // The wait for the response starts once the request is all sent, so a long upload is not cut; a client
    // that stalls is the front's requestTimeout's business.
    if (r.framing.hasBody) req.once('end', () => !settled && !res.headersSent && arm());
    else arm();

    const onDrain = () => {
      draining = false;
      controller?.resume();
    };
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart: (c) => {
        controller = c;
        if (pendingAbort) c.abort(pendingAbort);
      },
      onResponseStart: (c, statusCode, headers, statusMessage) => {
        if (statusCode < 200) return;
        if (timer) clearTimeout(timer);
        try {
          const message = statusMessage && STATUS_TEXT.test(statusMessage) ? statusMessage : undefined;
          if (message) res.writeHead(statusCode, message, downstreamResponseHeaders(headers));
          else res.writeHead(statusCode, downstreamResponseHeaders(headers));
          // A stream's headers go out at once (the SDK waits for them); a sized answer's go with its body.
          if (headers['content-length'] === undefined) res.flushHeaders();
        } catch (err) {
          // A header Node will not send (the sandbox answered it); nothing was written yet.
          c.abort(err as Error);
        }
      },
      onResponseData: (c, chunk) => {
        if (!res.write(chunk) && !draining) {
          draining = true;
          c.pause();
          res.once('drain', onDrain);
        }
      },
      onResponseEnd: () => {
        if (settled) return;
        finish();
        res.end();
      },
      onResponseError: (_c, err) => {
        if (settled) return;
        finish();
        if (err instanceof ClientGone || res.destroyed) {
          res.destroy();
          return;
        }
        this.fail(res, res.headersSent ? err : this.upstreamError(err, r));
      },
    };
    inst.agent.dispatch(
      {
        origin: this.origin(r),
        path: r.route.upstreamPath,
        method: req.method ?? 'GET',
        headers: this.upstreamHeaders(req, r),
        body: r.framing.hasBody ? req : null,
        // A service that does not read chunked bodies would take this one's data for requests: never reuse
        // its connection for someone else's (undici does the same for bodies on GET, DELETE, OPTIONS…).
        reset: r.framing.hasBody && r.framing.length === undefined,
      },
      handler,
    );
  }

  private async bridgeUpgrade(req: ClaimedRequest, client: Duplex, head: Buffer): Promise<void> {
    const protocol = singleHeader(req, 'upgrade') ?? '';
    if (req.method !== 'GET' || protocol.trim().toLowerCase() !== 'websocket')
      throw clientError(400, 'only WebSocket upgrades (GET) are proxied');
    const r = await this.route(req, true);
    const upstream = r.target.upstream!;
    const inst = this.instance(upstream.instanceId);
    let controller: Dispatcher.DispatchController | undefined;
    let tunnel: Duplex | undefined;
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      clearTimeout(handshake);
      if (!tunnel) controller?.abort(new ClientGone('client went away'));
      inst.open.delete(exchange);
      tunnel?.destroy();
      client.destroy();
    };
    const exchange = { destroy: close };
    inst.open.add(exchange);
    const handshake = setTimeout(() => {
      if (!tunnel) controller?.abort(new ResponseTimeout('no handshake in time'));
      if (closed) return;
      inst.open.delete(exchange);
      closed = true;
      this.refuseUpgrade(client, new ProxyReply(504, ''));
    }, this.responseTimeoutMs);
    client.on('error', close);
    client.on('close', close);

    // A refusal (any non-101 answer) is relayed whole with Connection: close, so that nothing the client
    // sent after its handshake is ever read as a request.
    let refusal:
      | { status: number; headers: Record<string, string | string[]>; body: Buffer[]; size: number }
      | undefined;
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart: (c) => {
        controller = c;
        if (closed) c.abort(new ClientGone('client went away'));
      },
      onRequestUpgrade: (_c, statusCode, headers, socket) => {
        clearTimeout(handshake);
        tunnel = socket;
        if (closed) {
          socket.destroy();
          return;
        }
        const lines = [`HTTP/1.1 ${statusCode} Switching Protocols`, 'Connection: Upgrade'];
        const upgradeTo = headers.upgrade;
        lines.push(`Upgrade: ${Array.isArray(upgradeTo) ? upgradeTo[0] : (upgradeTo ?? 'websocket')}`);
        for (const [k, v] of Object.entries(downstreamResponseHeaders(headers))) {
          for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
        }
        client.write(lines.join('\r\n') + '\r\n\r\n');
        if (head.length) socket.write(head);
        socket.on('error', close);
        socket.on('close', close);
        socket.pipe(client);
        client.pipe(socket);
        client.resume();
      },
      onResponseStart: (_c, statusCode, headers) => {
        if (statusCode < 200) return;
        refusal = { status: statusCode, headers: downstreamResponseHeaders(headers), body: [], size: 0 };
      },
      onResponseData: (c, chunk) => {
        if (!refusal) return;
        refusal.size += chunk.length;
        if (refusal.size > MAX_UPGRADE_REFUSAL_BYTES) c.abort(new Error('upgrade refusal too large'));
        else refusal.body.push(chunk);
      },
      onResponseEnd: () => {
        clearTimeout(handshake);
        if (!refusal || closed) return close();
        const body = Buffer.concat(refusal.body);
        const lines = [`HTTP/1.1 ${refusal.status} Upgrade Refused`];
        for (const [k, v] of Object.entries(refusal.headers)) {
          if (k === 'content-length') continue;
          for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
        }
        lines.push(`Content-Length: ${body.length}`, 'Connection: close');
        inst.open.delete(exchange);
        closed = true;
        client.end(Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1'), body]), () =>
          client.destroy(),
        );
      },
      onResponseError: (_c, err) => {
        clearTimeout(handshake);
        if (closed || refusal) return close();
        inst.open.delete(exchange);
        closed = true;
        this.refuseUpgrade(client, this.upstreamError(err, r));
      },
    };
    inst.agent.dispatch(
      {
        origin: this.origin(r),
        path: r.route.upstreamPath,
        method: 'GET',
        headers: this.upstreamHeaders(req, r),
        upgrade: 'websocket',
      },
      handler,
    );
  }
}
