// The transparent egress proxy: TCP the nat chain redirects here (flows that allowOut's CIDRs do not let through,
// from slots with domain entries) is judged by the name it asks for (sniff.ts). An allowed name is connected to
// as the node resolves it, never to the address the sandbox dialled, so an allowed SNI cannot carry a sandbox to
// any IP; then bytes are spliced both ways by stream pipes (no parsing past the first request), and a connection
// that turns out to be a bulk transfer is handed to a helper that copies it in the kernel (splice.ts).

import { createServer, connect, type NetConnectOpts, type Server, type Socket } from 'node:net';
import type { NetworkLogger } from '../manager.js';
import { matchesDomain } from './domain-match.js';
import { overridesFor } from './header-rules.js';
import type { Interceptor } from './intercept.js';
import { sniff } from './sniff.js';
import type { SlotEgress, SlotRegistry } from './slot-registry.js';
import { buildSpliceHelper, SPLICE_AFTER_BYTES, Splicer, type Spliced } from './splice.js';
import type { SocksTunnel } from './tunnel.js';
import type { UpstreamResolver } from './upstream.js';
import { proxyRoute } from './socks.js';
import type { EgressProxyConfig } from '../types.js';

export interface EgressProxyOptions {
  /** Destination ports whose redirected TCP comes here, one listener each. */
  ports: readonly number[];
  /** First listen port (consecutive per entry of `ports`); 0: ephemeral ports. */
  listenPort: number;
  registry: SlotRegistry;
  resolver: UpstreamResolver;
  logger: NetworkLogger;
  sniffTimeoutMs?: number;
  connectTimeoutMs?: number;
  maxConnectionsPerSlot?: number;
  /** Counts each connection's verdict (metrics). */
  onVerdict?: (verdict: 'proxied' | 'refused') => void;
  /** Serves connections to names with `network.rules` (intercept.ts); absent: rules are never applied. */
  interceptor?: Interceptor;
  /** Carries the allowed connections of slots with an egressProxy (absent: none are). */
  tunnel?: Pick<SocksTunnel, 'carry'>;
  /**
   * Kernel splicing of passthrough connections (splice.ts): the helper is built into `dir` at start. Absent, or
   * the helper cannot be built: bytes are copied by stream pipes only.
   */
  splice?: {
    dir: string;
    /** The compiler (default gcc). */
    gcc?: string;
    /** Helpers at once, node-wide (default MAX_SPLICE_HELPERS). */
    maxHelpers?: number;
    /** Bytes moved through Node before the hand-off (default SPLICE_AFTER_BYTES). */
    afterBytes?: number;
  };
}

/** Connections one slot may hold through the proxy (sniffing or spliced): a sandbox cannot exhaust the node. */
export const MAX_CONNECTIONS_PER_SLOT = 4096;

/** Buffered per direction before a pipe waits (bulk transfers: fewer pauses than the 16 KiB default). */
const STREAM_BUFFER_BYTES = 256 * 1024;

interface Proxied {
  slot: number;
  name: string;
  /** Where the name was resolved to (what a CIDR-admitted name is re-judged by); absent: the upstream resolves it. */
  address?: string;
  port: number;
  client: Socket;
  /** Absent for an intercepted connection (its upstream requests end with the client). */
  upstream?: Socket;
  intercepted: boolean;
  /** The SOCKS5 upstream it leaves through (socks.ts proxyRoute); null: dialled directly. */
  route: string | null;
  /** Set while a splice helper copies its bytes. */
  spliced?: Spliced;
}

/**
 * Whether `slot` may reach `name` (resolved to `address`, when known): by allowOut's domains, or, for a slot
 * sent here for its rules, by its CIDR policy.
 */
function admitted(slot: SlotEgress, name: string, address?: string, port = 443): boolean {
  if (matchesDomain(slot.patterns, name)) return true;
  return address !== undefined && slot.admits !== undefined && slot.admits(address, port);
}

export class EgressProxy {
  private readonly servers: Server[] = [];
  private readonly open = new Set<Proxied>();
  /** Every accepted socket, sniffed or not, so stop() leaves nothing behind. */
  private readonly accepted = new Set<Socket>();
  private readonly perSlot = new Map<number, number>();
  /** Destination port → the port its listener got. */
  readonly listenPorts = new Map<number, number>();
  private splicer: Splicer | null = null;

  constructor(private readonly opts: EgressProxyOptions) {}

  async start(): Promise<void> {
    const splice = this.opts.splice;
    if (splice) {
      let helper: string | null = null;
      try {
        helper = await buildSpliceHelper(splice.dir, splice.gcc);
      } catch (err) {
        this.opts.logger.warn(
          { err: (err as Error).message },
          'egress proxy: no splice helper, bulk transfers are copied by Node',
        );
      }
      this.splicer = new Splicer(helper, splice.maxHelpers, (message) =>
        this.opts.logger.warn({ message }, 'egress splice helper'),
      );
    }
    for (const [i, dport] of this.opts.ports.entries()) {
      const server = createServer(
        { noDelay: true, allowHalfOpen: true, highWaterMark: STREAM_BUFFER_BYTES },
        (socket) => void this.handle(socket, dport),
      );
      server.on('error', (err) => this.opts.logger.error({ err, dport }, 'egress proxy listener failed'));
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        // Every interface: the nat redirect rewrites to the slot's veth address. Connections from anything but a
        // registered slot are dropped unread (handle), and the input chain admits only redirected ones.
        server.listen(this.opts.listenPort === 0 ? 0 : this.opts.listenPort + i, '0.0.0.0', () => {
          server.off('error', reject);
          resolve();
        });
      });
      const address = server.address();
      if (address === null || typeof address === 'string') throw new Error('egress proxy has no port');
      this.servers.push(server);
      this.listenPorts.set(dport, address.port);
    }
  }

  async stop(): Promise<void> {
    this.splicer?.stop();
    for (const c of this.open) this.cut(c);
    for (const s of this.accepted) s.destroy();
    await Promise.all(this.servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    this.servers.length = 0;
  }

  /** Proxied connections open now (the benchmark's memory figure is per 1,000 of them). */
  get openConnections(): number {
    return this.open.size;
  }

  /** Splice helper counts (null: splicing is off). */
  get spliceStats(): Splicer['stats'] | null {
    return this.splicer?.stats ?? null;
  }

  /** Cuts the slot's proxied connections whose name its current policy no longer allows (all, when it has none). */
  recheck(index: number): number {
    const slot = this.opts.registry.get(index);
    let cut = 0;
    for (const c of this.open) {
      if (c.slot !== index) continue;
      // A name that gained or lost rules is cut too: its next connection is intercepted or spliced as it now should.
      // A connection whose route changed (an egressProxy added, removed or replaced) must not stay on the old one.
      if (
        slot &&
        proxyRoute(slot.policy?.egressProxy) === c.route &&
        admitted(slot, c.name, c.address, c.port) &&
        this.intercepts(slot, c.name) === c.intercepted
      )
        continue;
      this.cut(c);
      cut++;
    }
    return cut;
  }

  /** Whether connections of `slot` to `name` are served by the interceptor (the name has rules). */
  private intercepts(slot: SlotEgress, name: string): boolean {
    return this.opts.interceptor !== undefined && overridesFor(slot.rules ?? null, name) !== null;
  }

  private cut(c: Proxied): void {
    this.open.delete(c);
    c.spliced?.kill();
    c.client.destroy();
    c.upstream?.destroy();
  }

  private async handle(client: Socket, dport: number): Promise<void> {
    const log = this.opts.logger;
    client.on('error', () => undefined);
    this.accepted.add(client);
    client.once('close', () => this.accepted.delete(client));
    const first = this.opts.registry.bySourceAddress(client.remoteAddress);
    if (!first) {
      client.destroy();
      return;
    }
    const held = this.perSlot.get(first.index) ?? 0;
    if (held >= (this.opts.maxConnectionsPerSlot ?? MAX_CONNECTIONS_PER_SLOT)) {
      this.opts.onVerdict?.('refused');
      log.warn({ slot: first.index, held }, 'egress refused: too many connections from this sandbox');
      client.resetAndDestroy();
      return;
    }
    this.perSlot.set(first.index, held + 1);
    client.once('close', () => {
      const n = (this.perSlot.get(first.index) ?? 1) - 1;
      if (n > 0) this.perSlot.set(first.index, n);
      else this.perSlot.delete(first.index);
    });
    const sniffed = await sniff(client, this.opts.sniffTimeoutMs ?? 10_000);
    const refuse = (reason: string, http: boolean, name?: string) => {
      this.opts.onVerdict?.('refused');
      log.info({ slot: first.index, dport, name, reason }, 'egress refused');
      if (http && !client.destroyed) {
        const body = `aenv egress: ${reason}\n`;
        client.end(
          `HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
      } else {
        client.resetAndDestroy();
      }
    };
    if (sniffed.kind === 'refused') return refuse(sniffed.reason, sniffed.http);
    const http = sniffed.kind === 'http';
    const name = sniffed.name;
    // The policy may have changed while the client was sending its first bytes: judge by the current one.
    const slot = this.opts.registry.get(first.index);
    const byName = slot !== undefined && matchesDomain(slot.patterns, name);
    if (!slot || (!byName && !slot.admits))
      return refuse(`${name} is not in the sandbox's allowOut`, http, name);
    const via = slot.policy?.egressProxy;
    const tunnel = this.opts.tunnel;
    if (via && !tunnel) return refuse('the egress proxy cannot be reached from this node', http, name);
    // A tunneled slot's upstream resolves a name allowOut's domains allow (tunnel.ts); any other name is judged
    // by the address the node resolves it to, and that address is what is dialled, through the upstream or not.
    let address: string | undefined;
    if (!(via && byName)) {
      const target = await this.opts.resolver.resolve(name);
      if (!target.ok) return refuse(target.reason, http, name);
      if (!admitted(slot, name, target.address, dport))
        return refuse(`${name} is not allowed by the sandbox's allowOut and denyOut`, http, name);
      address = target.address;
    }
    if (client.destroyed) return;
    const interceptor = this.opts.interceptor;
    if (interceptor && this.intercepts(slot, name))
      return this.intercept(interceptor, client, slot.index, sniffed, { address, via }, dport);
    if (via && tunnel)
      return tunnel.carry(
        {
          slot,
          name: address === undefined ? name : null,
          ...(address !== undefined ? { address } : {}),
          port: dport,
          client,
          // A name that gained rules is cut: its next connection is intercepted.
          keep: (now) => !this.intercepts(now, name),
        },
        (reason) => refuse(reason, http, name),
      );
    if (address === undefined) return refuse('no address', http, name);
    const target = { address };

    // Node 20 passes highWaterMark to the socket's streams; @types/node types it only on createServer.
    const upstreamOpts: NetConnectOpts & { highWaterMark: number } = {
      host: target.address,
      port: dport,
      noDelay: true,
      allowHalfOpen: true,
      highWaterMark: STREAM_BUFFER_BYTES,
    };
    const upstream = connect(upstreamOpts);
    const c: Proxied = {
      slot: slot.index,
      name,
      address: target.address,
      port: dport,
      client,
      upstream,
      intercepted: false,
      route: null,
    };
    this.open.add(c);
    const timer = setTimeout(
      () => upstream.destroy(new Error('connect timeout')),
      this.opts.connectTimeoutMs ?? 10_000,
    );
    upstream.once('connect', () => {
      clearTimeout(timer);
      // Re-judged at connect: a PUT between the check and here must not leave this connection open.
      const now = this.opts.registry.get(slot.index);
      if (!now || now.policy?.egressProxy || !admitted(now, c.name, c.address, c.port)) return this.cut(c);
      this.opts.onVerdict?.('proxied');
      log.debug({ slot: slot.index, name: c.name, address: target.address, dport }, 'egress proxied');
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
      this.spliceWhenBulk(c, upstream);
    });
    const close = () => {
      clearTimeout(timer);
      if (this.open.has(c)) this.cut(c);
    };
    upstream.on('error', (err) => {
      log.info({ slot: slot.index, name: c.name, err: err.message }, 'egress upstream failed');
      if (!client.destroyed) client.resetAndDestroy();
      close();
    });
    upstream.on('close', close);
    client.on('close', close);
  }

  /**
   * Hands `c` (piped both ways) to the splice helper once it has moved `afterBytes`: short request/response
   * connections never pay for a helper's spawn, bulk ones stop paying Node's copies.
   */
  private spliceWhenBulk(c: Proxied, upstream: Socket): void {
    const splicer = this.splicer;
    if (!splicer?.enabled) return;
    const after = this.opts.splice?.afterBytes ?? SPLICE_AFTER_BYTES;
    let moved = 0;
    const count = (chunk: Buffer) => {
      moved += chunk.length;
      if (moved < after) return;
      c.client.off('data', count);
      upstream.off('data', count);
      // Outside the pipes' 'data' dispatch: the hand-off takes them down.
      setImmediate(() => {
        if (!this.open.has(c)) return;
        const spliced = splicer.handOff(c.client, upstream, () => delete c.spliced);
        if (spliced) c.spliced = spliced;
      });
    };
    c.client.on('data', count);
    upstream.on('data', count);
  }

  /**
   * Hands the connection to the interceptor; each of its requests is judged by the slot's policy then. `to`:
   * the address the node resolved the name to (absent: the SOCKS5 upstream `via` resolves the name).
   */
  private intercept(
    interceptor: Interceptor,
    client: Socket,
    index: number,
    sniffed: { kind: 'tls' | 'http'; name: string },
    to: { address: string | undefined; via: EgressProxyConfig | undefined },
    port: number,
  ): void {
    const { address, via } = to;
    const route = proxyRoute(via);
    const c: Proxied = { slot: index, name: sniffed.name, port, client, intercepted: true, route };
    if (address !== undefined) c.address = address;
    this.open.add(c);
    client.on('close', () => this.open.delete(c));
    this.opts.onVerdict?.('proxied');
    this.opts.logger.debug(
      { slot: index, name: c.name, address, port, proxy: via?.address },
      'egress intercepted',
    );
    const current = () => {
      const now = this.opts.registry.get(index);
      if (!now || proxyRoute(now.policy?.egressProxy) !== route || !admitted(now, c.name, address, port))
        return undefined;
      return overridesFor(now.rules ?? null, c.name);
    };
    interceptor
      .take(client, {
        name: c.name,
        address: address ?? c.name,
        port,
        tls: sniffed.kind === 'tls',
        current,
        slot: index,
        ...(via ? { via } : {}),
      })
      .catch((err: unknown) => {
        this.opts.logger.warn({ slot: index, name: c.name, err }, 'egress interception failed');
        this.cut(c);
      });
  }
}
