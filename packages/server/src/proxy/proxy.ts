import {
  Agent,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import { connect as netConnect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '../util/log.js';
import type { DataPlane } from '../api/http-server.js';
import { classify, RoutingError, type DataPlaneRoute } from './routing.js';
import { AutoResumeTimeout, type ProxyTarget, type SandboxDirectory } from './directory.js';

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

const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
];
const ROUTING_HEADERS = [
  'x-agentenv-sandbox-id',
  'x-agentenv-target-port',
  'e2b-sandbox-id',
  'e2b-sandbox-port',
  'e2b-traffic-access-token',
];
const CLAIM = Symbol('aenv.proxyClaim');

type Claim = DataPlaneRoute | { signedFiles: true; upstreamPath: string } | RoutingError;
type ClaimedRequest = IncomingMessage & { [CLAIM]?: Claim };

interface Instance {
  agent: Agent;
  /** Open exchanges through this instance: destroyed together when the sandbox instance goes away. */
  open: Set<{ destroy(): void }>;
}

function stripHopByHop(
  headers: IncomingHttpHeaders,
  keepUpgrade: boolean,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const nominated = new Set(
    String(headers.connection ?? '')
      .split(',')
      .map((s) => s.trim().toLowerCase())
      .filter((s) => s && !(keepUpgrade && s === 'upgrade')),
  );
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined) continue;
    if (nominated.has(k)) continue;
    if (HOP_BY_HOP.includes(k) && !(keepUpgrade && (k === 'upgrade' || k === 'connection'))) continue;
    out[k] = v;
  }
  return out;
}

/**
 * The data-plane reverse proxy (reference §2.7): routes by host, `/proxy` prefix, routing headers or a signed
 * `/files` URL to `http://<sandbox host-interaction ip>:<port>`, enforces per-port tokens, streams both ways,
 * bridges WebSockets, and tears down every open exchange of a sandbox instance when it stops.
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
    inst.agent.destroy();
  }

  closeAll(): void {
    for (const id of [...this.instances.keys()]) this.closeInstance(id);
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.forward(req as ClaimedRequest, res).catch((err: unknown) => this.fail(res, err));
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    this.bridgeUpgrade(req as ClaimedRequest, socket, head).catch((err: unknown) => {
      const reply = err instanceof ProxyReply ? err : new ProxyReply(502, 'upstream unavailable');
      const body = typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body);
      socket.end(
        `HTTP/1.1 ${reply.status} ${reply.status === 401 ? 'Unauthorized' : 'Error'}\r\n` +
          `Content-Type: ${typeof reply.body === 'string' ? 'text/plain; charset=utf-8' : 'application/json'}\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    });
  }

  private fail(res: ServerResponse, err: unknown): void {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const reply =
      err instanceof ProxyReply
        ? err
        : (this.opts.logger.warn({ err }, 'proxy failure'), new ProxyReply(502, 'upstream unavailable'));
    if (typeof reply.body === 'string') {
      res.writeHead(reply.status, { 'content-type': 'text/plain; charset=utf-8' }).end(reply.body);
    } else {
      res.writeHead(reply.status, { 'content-type': 'application/json' }).end(JSON.stringify(reply.body));
    }
  }

  private async route(req: ClaimedRequest): Promise<{ route: DataPlaneRoute; target: ProxyTarget }> {
    const claim = req[CLAIM];
    if (!claim) throw new ProxyReply(400, 'missing sandbox routing header');
    if (claim instanceof RoutingError) throw new ProxyReply(claim.status, claim.message);
    let route: DataPlaneRoute;
    if ('signedFiles' in claim) {
      const id = this.opts.directory.findBySignedFilesUrl(claim.upstreamPath, req.method ?? 'GET');
      if (!id)
        throw new ProxyReply(401, { code: 401, message: 'no running sandbox accepts this signed URL' });
      route = { sandboxId: id, port: this.opts.envdPort, upstreamPath: claim.upstreamPath, via: 'signature' };
    } else {
      route = claim;
    }
    const target = await this.resolveTarget(
      route.sandboxId,
      route.port,
      req.method === 'GET' && route.upstreamPath.split('?', 1)[0] === '/health',
    );
    this.authorize(req, route, target);
    return { route, target };
  }

  private notFound(sandboxId: string): ProxyReply {
    return new ProxyReply(502, { sandboxId, message: 'The sandbox was not found', code: 502 });
  }

  /** `envdHealth`: the request is envd's `GET /health`, the SDK's isRunning() probe. */
  private async resolveTarget(sandboxId: string, port: number, envdHealth = false): Promise<ProxyTarget> {
    const dir = this.opts.directory;
    let t = dir.lookup(sandboxId);
    if (!t || t.state === 'killing') throw this.notFound(sandboxId);
    if (t.state !== 'running' && t.state !== 'paused') {
      t = await dir.settle(sandboxId);
      if (!t || t.state === 'killing') throw this.notFound(sandboxId);
    }
    if (t.state === 'paused') {
      // isRunning() must read false for a paused sandbox (E2B answers 502 there); anything else gets the 410.
      if (!t.autoResume && envdHealth && port === this.opts.envdPort) {
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

  private authorize(req: IncomingMessage, route: DataPlaneRoute, target: ProxyTarget): void {
    const header = (name: string) => {
      const v = req.headers[name];
      return Array.isArray(v) ? v[0] : v;
    };
    if (route.port === this.opts.envdPort) {
      if (!target.secure) return;
      const token = header('x-access-token');
      if (token && this.opts.directory.verifyEnvdToken(target.sandboxId, token)) return;
      const path = route.upstreamPath.split('?', 1)[0];
      // envd answers these itself without a token: health probes and signed file URLs (it checks the signature).
      if (!token && req.method === 'GET' && path === '/health') return;
      if (!token && path === '/files' && /[?&]signature=/.test(route.upstreamPath)) return;
      throw new ProxyReply(401, {
        code: 401,
        message: 'unauthorized access, please provide a valid access token or method signing if supported',
      });
    }
    if (target.allowPublicTraffic) return;
    const token = header('e2b-traffic-access-token');
    if (token && this.opts.directory.verifyTrafficToken(target.sandboxId, token)) return;
    throw new ProxyReply(401, {
      code: 401,
      message: 'unauthorized: missing or invalid traffic access token',
    });
  }

  private upstreamHeaders(
    req: IncomingMessage,
    route: DataPlaneRoute,
    target: ProxyTarget,
    keepUpgrade: boolean,
  ): Record<string, string | string[]> {
    const h = stripHopByHop(req.headers, keepUpgrade);
    for (const k of ROUTING_HEADERS) delete h[k];
    const tokenValidated =
      route.port === this.opts.envdPort &&
      target.secure &&
      typeof h['x-access-token'] === 'string' &&
      this.opts.directory.verifyEnvdToken(target.sandboxId, h['x-access-token']);
    if (!tokenValidated) delete h['x-access-token'];
    if (h['x-api-key'] === this.opts.platformApiKey) delete h['x-api-key'];
    if (req.headers.host) h['x-forwarded-host'] = req.headers.host;
    h['x-forwarded-proto'] = 'http';
    h['x-forwarded-method'] = req.method ?? 'GET';
    h['x-forwarded-uri'] = route.upstreamPath;
    h.host = `${target.upstream!.host}:${route.port}`;
    return h;
  }

  private instance(instanceId: string): Instance {
    let inst = this.instances.get(instanceId);
    if (!inst) {
      inst = {
        agent: new Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 32 }),
        open: new Set(),
      };
      this.instances.set(instanceId, inst);
    }
    return inst;
  }

  private async forward(req: ClaimedRequest, res: ServerResponse): Promise<void> {
    const { route, target } = await this.route(req);
    const upstream = target.upstream!;
    const inst = this.instance(upstream.instanceId);
    const up = httpRequest({
      host: upstream.host,
      port: route.port,
      method: req.method,
      path: route.upstreamPath,
      headers: this.upstreamHeaders(req, route, target, false),
      agent: inst.agent,
    });
    const exchange = {
      destroy: () => {
        up.destroy();
        res.destroy();
      },
    };
    inst.open.add(exchange);
    const done = () => inst.open.delete(exchange);
    res.on('close', () => {
      done();
      if (!res.writableFinished) up.destroy();
    });

    let timer: NodeJS.Timeout | undefined;
    const arm = (ms: number, onTimeout: () => void) => {
      if (timer) clearTimeout(timer);
      timer = setTimeout(onTimeout, ms);
    };
    const responseTimeout = () => {
      up.destroy();
      this.fail(res, new ProxyReply(504, ''));
    };
    up.on('socket', (socket: Socket) => {
      if (socket.connecting) {
        arm(this.connectTimeoutMs, responseTimeout);
        socket.once('connect', () => arm(this.responseTimeoutMs, responseTimeout));
      } else {
        arm(this.responseTimeoutMs, responseTimeout);
      }
    });
    // The response timer restarts while the request body is still arriving (large uploads).
    req.on('data', () => {
      if (timer && !res.headersSent) arm(this.responseTimeoutMs, responseTimeout);
    });

    up.on('response', (ures) => {
      if (timer) clearTimeout(timer);
      res.writeHead(ures.statusCode ?? 502, stripHopByHop(ures.headers, false));
      res.flushHeaders();
      ures.pipe(res);
      ures.on('error', () => res.destroy());
      ures.on('aborted', () => res.destroy());
    });
    up.on('error', (err: NodeJS.ErrnoException) => {
      if (timer) clearTimeout(timer);
      done();
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (err.code === 'ECONNREFUSED') {
        this.fail(
          res,
          new ProxyReply(502, {
            sandboxId: target.sandboxId,
            message: 'The sandbox is running but port is not open',
            port: route.port,
            code: 502,
          }),
        );
      } else {
        this.fail(res, new ProxyReply(502, ''));
      }
    });
    req.pipe(up);
  }

  private async bridgeUpgrade(req: ClaimedRequest, client: Duplex, head: Buffer): Promise<void> {
    const { route, target } = await this.route(req);
    const upstream = target.upstream!;
    const inst = this.instance(upstream.instanceId);
    const headers = this.upstreamHeaders(req, route, target, true);
    const lines = [`${req.method ?? 'GET'} ${route.upstreamPath} HTTP/1.1`];
    for (const [k, v] of Object.entries(headers)) {
      for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
    }
    const up = netConnect({ host: upstream.host, port: route.port });
    const exchange = {
      destroy: () => {
        up.destroy();
        client.destroy();
      },
    };
    inst.open.add(exchange);
    const handshake = setTimeout(() => {
      up.destroy();
      client.end('HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    }, this.responseTimeoutMs);
    up.once('data', () => clearTimeout(handshake));
    up.on('connect', () => {
      up.write(lines.join('\r\n') + '\r\n\r\n');
      if (head.length) up.write(head);
      up.pipe(client);
      client.pipe(up);
    });
    const close = () => {
      clearTimeout(handshake);
      inst.open.delete(exchange);
      up.destroy();
      client.destroy();
    };
    up.on('error', (err: NodeJS.ErrnoException) => {
      if (!client.writableEnded && up.bytesRead === 0) {
        client.end('HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      }
      this.opts.logger.debug({ err: err.message }, 'websocket upstream error');
      close();
    });
    up.on('close', close);
    client.on('error', close);
    client.on('close', close);
  }
}
