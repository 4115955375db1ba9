// The intercepted hop of `network.rules` (docs/networking.md#credentials-at-the-edge): a connection to a name
// with rules is answered here instead of being spliced. TLS is terminated with a leaf the node CA signs for the
// name (node-ca.ts); each HTTP/1.1 request on it (keep-alive, streamed bodies) gets the rule's headers and is
// sent to the name as the node resolved it, over TLS verified against the host's trust store; for a sandbox with
// an egressProxy, through a tunnel of its SOCKS5 upstream instead (socks-agent.ts). The header values are
// credentials: nothing here logs headers, and the sandbox only ever sees the response.

import { Duplex } from 'node:stream';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import { createSecureContext, TLSSocket, type SecureContext } from 'node:tls';
import type { NetworkLogger } from '../manager.js';
import { normalizeHostName } from './domain-match.js';
import { applyOverrides, type HeaderOverrides } from './header-rules.js';
import type { NodeCa } from './node-ca.js';
import { fillPlaceholders } from './placeholders.js';
import type { EgressProxyConfig } from '../types.js';
import { SocksHttpAgent, SocksHttpsAgent, type SocksDialer } from './socks-agent.js';
import { proxyRoute } from './socks.js';

export interface InterceptorOptions {
  ca: NodeCa;
  /** PEM certificates the upstream's chain is verified against (the host's bundle and any configured extra). */
  upstreamCa: readonly string[];
  logger: NetworkLogger;
  /** Longest wait for an upstream's response head. */
  upstreamTimeoutMs?: number;
  /** A `/secrets` value by name: fills `${e2b.secrets.<name>}` in rule headers (absent: such headers fail). */
  secretValue?: (name: string) => string | undefined;
  /** Opens tunnels through a sandbox's SOCKS5 upstream; absent: a hop `via` a proxy fails its requests (502). */
  dialSocks?: SocksDialer;
}

/** What a request on an intercepted connection gets now: its overrides, or `undefined` once no longer allowed. */
export type CurrentRules = () => HeaderOverrides | null | undefined;

interface Hop {
  name: string;
  /** Where requests go: the address the node resolved the name to, or the name itself for `via` to resolve. */
  address: string;
  port: number;
  tls: boolean;
  current: CurrentRules;
  slot: number;
  /** The sandbox's SOCKS5 upstream: requests leave through it (absent: the upstream is dialled directly). */
  via?: EgressProxyConfig;
}

interface Agents {
  http: http.Agent;
  https: https.Agent;
}

/** The agents of one SOCKS5 route and the intercepted connections using it. */
interface Route extends Agents {
  users: number;
  idle?: NodeJS.Timeout;
}

/** Connection-scoped headers (RFC 9110 §7.6.1) and those each hop frames itself; never forwarded as received. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'http2-settings',
  // Answered here (node:http sends the 100 itself): the upstream gets the body without waiting.
  'expect',
]);

/** Most upstream connections kept idle per destination for reuse. */
const MAX_IDLE_PER_DESTINATION = 32;

/** How long a SOCKS5 route's idle upstream connections are kept once no intercepted connection uses it. */
const ROUTE_IDLE_MS = 30_000;

export class Interceptor {
  private readonly server: http.Server;
  private readonly hops = new WeakMap<object, Hop & { agents: Agents }>();
  private readonly direct: Agents;
  /** Agents per SOCKS5 route (proxyRoute): pooled upstream connections never cross to another proxy or login. */
  private readonly routes = new Map<string, Route>();

  /**
   * The upstream trust, built once: given only `ca`, node:tls builds a context from the whole list (the host's
   * bundle, ~150 certificates) for every new upstream connection, tens of ms each on the event loop.
   */
  private readonly upstreamTrust: SecureContext;

  constructor(private readonly opts: InterceptorOptions) {
    this.upstreamTrust = createSecureContext({ ca: [...opts.upstreamCa] });
    this.direct = {
      http: new http.Agent({ keepAlive: true, maxFreeSockets: MAX_IDLE_PER_DESTINATION }),
      https: new https.Agent({
        keepAlive: true,
        maxFreeSockets: MAX_IDLE_PER_DESTINATION,
        secureContext: this.upstreamTrust,
      }),
    };
    // Never listens: connections are handed in by `take`. No request timeout: a long upload or stream is the
    // sandbox's own business; idle keep-alive connections still end.
    this.server = http.createServer({ requestTimeout: 0, keepAlive: true }, (req, res) =>
      this.forward(req, res),
    );
    this.server.on('clientError', (_err, socket) => socket.destroy());
    // Upgrades (WebSocket) are not transformed: refused rather than passed on without the rule.
    this.server.on('upgrade', (_req, socket: Socket) => {
      socket.end('HTTP/1.1 501 Not Implemented\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    });
  }

  /**
   * Serves `client` (paused, its first bytes pushed back by sniff.ts) as the name's server. Resolves once the
   * TLS handshake is set up; failures only end the connection.
   */
  async take(client: Socket, hop: Hop): Promise<void> {
    // node:http and node:tls read a net.Socket through its handle and would miss the pushed-back bytes; a
    // stream wrapper makes them read through the stream, where those bytes are.
    const stream = Duplex.from({ readable: client, writable: client });
    stream.on('error', () => client.destroy());
    stream.on('close', () => client.destroy());
    client.on('close', () => stream.destroy());
    if (!hop.tls) {
      this.hops.set(stream, { ...hop, agents: this.agentsFor(hop, client) });
      this.server.emit('connection', stream);
      return;
    }
    const secureContext = await this.opts.ca.contextFor(hop.name);
    if (client.destroyed) return;
    const served = { ...hop, agents: this.agentsFor(hop, client) };
    const tls = new TLSSocket(stream as unknown as Socket, {
      isServer: true,
      secureContext,
      ALPNProtocols: ['http/1.1'],
    });
    tls.on('error', () => client.destroy());
    tls.on('close', () => client.destroy());
    this.hops.set(tls, served);
    this.server.emit('connection', tls);
  }

  close(): void {
    this.server.close();
    for (const a of [this.direct, ...this.routes.values()]) {
      a.http.destroy();
      a.https.destroy();
    }
    for (const r of this.routes.values()) clearTimeout(r.idle);
    this.routes.clear();
  }

  /** The agents `hop`'s requests use; a SOCKS5 route's are held until `client` closes. */
  private agentsFor(hop: Hop, client: Socket): Agents {
    const proxy = hop.via;
    if (!proxy) return this.direct;
    const key = proxyRoute(proxy) as string;
    let route = this.routes.get(key);
    if (!route) {
      const dial: SocksDialer =
        this.opts.dialSocks ??
        (() => {
          throw new Error('no SOCKS5 upstream can be dialled');
        });
      const options = { keepAlive: true, maxFreeSockets: MAX_IDLE_PER_DESTINATION };
      route = {
        http: new SocksHttpAgent(dial, proxy, options),
        https: new SocksHttpsAgent(dial, proxy, { ...options, secureContext: this.upstreamTrust }),
        users: 0,
      };
      this.routes.set(key, route);
    }
    const held = route;
    clearTimeout(held.idle);
    held.idle = undefined;
    held.users++;
    client.once('close', () => {
      if (--held.users > 0) return;
      held.idle = setTimeout(() => {
        if (held.users > 0 || this.routes.get(key) !== held) return;
        this.routes.delete(key);
        held.http.destroy();
        held.https.destroy();
      }, ROUTE_IDLE_MS).unref();
    });
    return held;
  }

  /** The overrides with their secret placeholders filled in, or why they cannot be (an unknown secret). */
  private fillSecrets(overrides: HeaderOverrides): HeaderOverrides | string {
    const valueOf = (secret: string): string | undefined => {
      try {
        return this.opts.secretValue?.(secret);
      } catch (err) {
        // A value that does not open (a damaged row): the request fails, the node does not.
        this.opts.logger.warn({ secret, err: (err as Error).message }, 'egress secret cannot be read');
        return undefined;
      }
    };
    const out: (readonly [string, string])[] = [];
    for (const [name, value] of overrides) {
      // A placeholder that is not filled is never sent on as text (a policy stored before it was refused).
      const r = fillPlaceholders(value, valueOf);
      if ('problem' in r)
        return r.secret !== undefined
          ? `the rule's header ${name} ${r.problem}`
          : `the rule's header ${name}: ${r.problem}`;
      out.push([name, r.filled]);
    }
    return out;
  }

  private forward(req: IncomingMessage, res: ServerResponse): void {
    const hop = this.hops.get(req.socket);
    if (!hop) return void res.socket?.destroy();
    const log = this.opts.logger;
    const host = normalizeHostName((req.headers.host ?? '').replace(/:\d{1,5}$/, ''));
    // The name checked (SNI or the first Host) is the one the rule is for and the upstream is: another Host on
    // the same connection would be answered by that upstream with this name's credentials.
    if (host !== hop.name) return answer(res, 421, `requests on this connection must be for ${hop.name}`);
    // Origin form only: a server must take the authority of an absolute URI over the Host (RFC 9112 §3.2.2).
    if (!req.url?.startsWith('/') && req.url !== '*')
      return answer(res, 400, 'the request target must be a path (origin form)');
    const overrides = hop.current();
    if (overrides === undefined) {
      res.shouldKeepAlive = false;
      return answer(res, 403, `${hop.name} is no longer allowed`);
    }
    const filled = this.fillSecrets(overrides ?? []);
    if (typeof filled === 'string') return answer(res, 502, filled);
    const headers = applyOverrides(withoutHopByHop(req.rawHeaders), filled);
    // Set explicitly: node:http would not frame a chunked body of a GET or DELETE on its own.
    if (req.headers['transfer-encoding'] !== undefined) headers.push('Transfer-Encoding', 'chunked');
    const upstream = (hop.tls ? https : http).request({
      host: hop.address,
      port: hop.port,
      method: req.method,
      path: req.url,
      headers,
      setHost: false,
      agent: hop.tls ? hop.agents.https : hop.agents.http,
      ...(hop.tls ? { servername: hop.name } : {}),
      timeout: this.opts.upstreamTimeoutMs ?? 60_000,
    });
    upstream.on('timeout', () => upstream.destroy(new Error('upstream timed out')));
    upstream.on('response', (up) => {
      upstream.setTimeout(0);
      res.writeHead(up.statusCode ?? 502, up.statusMessage, withoutHopByHop(up.rawHeaders));
      up.pipe(res);
      up.on('error', () => res.destroy());
    });
    upstream.on('error', (err) => {
      log.info({ slot: hop.slot, name: hop.name, err: err.message }, 'egress intercepted request failed');
      if (!res.headersSent) answer(res, 502, `upstream ${hop.name} failed: ${err.message}`);
      else res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.on('error', () => upstream.destroy());
    req.pipe(upstream);
    log.debug({ slot: hop.slot, name: hop.name, method: req.method }, 'egress request intercepted');
  }
}

/** `raw` without hop-by-hop headers and those the Connection header names. */
function withoutHopByHop(raw: readonly string[]): string[] {
  const drop = new Set(HOP_BY_HOP);
  for (let i = 0; i + 1 < raw.length; i += 2)
    if ((raw[i] as string).toLowerCase() === 'connection')
      for (const t of (raw[i + 1] as string).split(',')) drop.add(t.trim().toLowerCase());
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2)
    if (!drop.has((raw[i] as string).toLowerCase())) out.push(raw[i] as string, raw[i + 1] as string);
  return out;
}

function answer(res: ServerResponse, status: number, reason: string): void {
  const body = `aenv egress: ${reason}\n`;
  res.writeHead(status, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
