// The transparent egress proxy: TCP the nat chain redirects here (flows that allowOut's CIDRs do not let through,
// from slots with domain entries) is judged by the name it asks for (sniff.ts). An allowed name is connected to
// as the node resolves it, never to the address the sandbox dialled, so an allowed SNI cannot carry a sandbox to
// any IP; then bytes are spliced both ways by stream pipes (no parsing past the first request).

import { createServer, connect, type NetConnectOpts, type Server, type Socket } from 'node:net';
import type { NetworkLogger } from '../manager.js';
import { matchesDomain } from './domain-match.js';
import { overridesFor } from './header-rules.js';
import type { Interceptor } from './intercept.js';
import { sniff } from './sniff.js';
import type { SlotEgress, SlotRegistry } from './slot-registry.js';
import type { SocksTunnel } from './tunnel.js';
import type { UpstreamResolver } from './upstream.js';

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
}

/** Connections one slot may hold through the proxy (sniffing or spliced): a sandbox cannot exhaust the node. */
export const MAX_CONNECTIONS_PER_SLOT = 4096;

/** Buffered per direction before a pipe waits (bulk transfers: fewer pauses than the 16 KiB default). */
const STREAM_BUFFER_BYTES = 256 * 1024;

interface Proxied {
  slot: number;
  name: string;
  /** Where the name was resolved to (what a CIDR-admitted name is re-judged by). */
  address: string;
  port: number;
  client: Socket;
  /** Absent for an intercepted connection (its upstream requests end with the client). */
  upstream?: Socket;
  intercepted: boolean;
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

  constructor(private readonly opts: EgressProxyOptions) {}

  async start(): Promise<void> {
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
    for (const c of this.open) this.cut(c);
    for (const s of this.accepted) s.destroy();
    await Promise.all(this.servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    this.servers.length = 0;
  }

  /** Proxied connections open now (the benchmark's memory figure is per 1,000 of them). */
  get openConnections(): number {
    return this.open.size;
  }

  /** Cuts the slot's proxied connections whose name its current policy no longer allows (all, when it has none). */
  recheck(index: number): number {
    const slot = this.opts.registry.get(index);
    let cut = 0;
    for (const c of this.open) {
      if (c.slot !== index) continue;
      // A name that gained or lost rules is cut too: its next connection is intercepted or spliced as it now should.
      // A slot that now has an egressProxy must not keep a direct connection.
      const intercept =
        this.opts.interceptor !== undefined && overridesFor(slot?.rules ?? null, c.name) !== null;
      if (
        slot &&
        !slot.policy?.egressProxy &&
        admitted(slot, c.name, c.address, c.port) &&
        intercept === c.intercepted
      )
        continue;
      this.cut(c);
      cut++;
    }
    return cut;
  }

  private cut(c: Proxied): void {
    this.open.delete(c);
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
    // The policy may have changed while the client was sending its first bytes: judge by the current one.
    const slot = this.opts.registry.get(first.index);
    const byName = slot !== undefined && matchesDomain(slot.patterns, sniffed.name);
    if (!slot || (!byName && !slot.admits))
      return refuse(`${sniffed.name} is not in the sandbox's allowOut`, http, sniffed.name);
    // Tunneled slots: the SOCKS5 upstream resolves the name (tunnel.ts).
    if (slot.policy?.egressProxy && this.opts.tunnel)
      return this.opts.tunnel.carry({ slot, name: sniffed.name, port: dport, client }, (reason) =>
        refuse(reason, http, sniffed.name),
      );
    const target = await this.opts.resolver.resolve(sniffed.name);
    if (!target.ok) return refuse(target.reason, http, sniffed.name);
    if (!admitted(slot, sniffed.name, target.address, dport))
      return refuse(
        `${sniffed.name} is not allowed by the sandbox's allowOut and denyOut`,
        http,
        sniffed.name,
      );
    if (client.destroyed) return;
    const interceptor = this.opts.interceptor;
    if (interceptor && overridesFor(slot.rules ?? null, sniffed.name) !== null)
      return this.intercept(interceptor, client, slot.index, sniffed, target.address, dport);

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
      name: sniffed.name,
      address: target.address,
      port: dport,
      client,
      upstream,
      intercepted: false,
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

  /** Hands the connection to the interceptor; each of its requests is judged by the slot's policy then. */
  private intercept(
    interceptor: Interceptor,
    client: Socket,
    index: number,
    sniffed: { kind: 'tls' | 'http'; name: string },
    address: string,
    port: number,
  ): void {
    const c: Proxied = { slot: index, name: sniffed.name, address, port, client, intercepted: true };
    this.open.add(c);
    client.on('close', () => this.open.delete(c));
    this.opts.onVerdict?.('proxied');
    this.opts.logger.debug({ slot: index, name: c.name, address, port }, 'egress intercepted');
    const current = () => {
      const now = this.opts.registry.get(index);
      if (!now || !admitted(now, c.name, address, port)) return undefined;
      return overridesFor(now.rules ?? null, c.name);
    };
    interceptor
      .take(client, { name: c.name, address, port, tls: sniffed.kind === 'tls', current, slot: index })
      .catch((err: unknown) => {
        this.opts.logger.warn({ slot: index, name: c.name, err }, 'egress interception failed');
        this.cut(c);
      });
  }
}
