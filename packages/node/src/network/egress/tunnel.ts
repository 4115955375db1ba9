// The SOCKS5 side of the egress proxy: connections of slots with an egressProxy leave through it
// (docs/networking.md, "SOCKS5 upstream"). Two ways in:
//  - by name: the egress proxy (proxy.ts) sniffed an allowed domain and hands the client over (`carry`); the
//    upstream is asked for the name (ATYP=domain: the proxy resolves it, as E2B documents), or, for a name only
//    the CIDR policy admits (a slot with network.rules), for the address the node resolved and judged;
//  - by address: the nat chain sends the TCP the slot's CIDR policy allows to this module's own listener; the
//    destination the sandbox dialled is read back from conntrack, judged again, and asked for by IP.
// Connections are re-judged on every policy change: a changed or removed proxy cuts them all.

import { createServer, type Server, type Socket } from 'node:net';
import type { NetworkLogger } from '../manager.js';
import { originalDestination } from '../conntrack.js';
import { PROTO_TCP, addressRules, rulesVerdict } from '../egress-model.js';
import { parseIPv4 } from '@aenv/config';
import { matchesDomain } from './domain-match.js';
import { MAX_CONNECTIONS_PER_SLOT } from './proxy.js';
import type { SlotEgress, SlotRegistry } from './slot-registry.js';
import { connectThroughSocks, proxyRoute } from './socks.js';
import type { UpstreamResolver } from './upstream.js';

export interface SocksTunnelOptions {
  /** Host port of the by-address listener; 0: an ephemeral port. */
  listenPort: number;
  registry: SlotRegistry;
  /** Refuses (`refused`) the built-in, always-denied and internal ranges and the host's own addresses. */
  resolver: UpstreamResolver;
  logger: NetworkLogger;
  connectTimeoutMs?: number;
  maxConnectionsPerSlot?: number;
  onVerdict?: (verdict: 'proxied' | 'refused') => void;
  /** Reads a redirected connection's original destination (default: conntrack). */
  originalDestination?: (src: string, sport: number) => Promise<{ address: string; port: number } | null>;
}

interface Tunneled {
  slot: number;
  /** Which proxy carries it (address and credentials): another one in a new policy cuts it. */
  route: string;
  /** The allowed name it was asked for, or null when it goes by address. */
  name: string | null;
  address: string | null;
  port: number;
  client: Socket;
  upstream: Socket;
  /** Whether the policy still wants it carried as is, besides being allowed (the egress proxy's say). */
  keep?: (slot: SlotEgress) => boolean;
}

/**
 * `conntrack` runs at once, node-wide: a sandbox opening connections by the thousand queues its own lookups
 * instead of making the node spawn a process for each at the same time.
 */
export const MAX_LOOKUPS_IN_FLIGHT = 8;

export class SocksTunnel {
  private server: Server | null = null;
  private readonly open = new Set<Tunneled>();
  private readonly accepted = new Set<Socket>();
  private readonly perSlot = new Map<number, number>();
  private listening = 0;
  private lookups = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly opts: SocksTunnelOptions) {}

  /** The by-address listener's port. */
  get port(): number {
    return this.listening;
  }

  get openConnections(): number {
    return this.open.size;
  }

  async start(): Promise<void> {
    const server = createServer(
      { noDelay: true, allowHalfOpen: true },
      (socket) => void this.byAddress(socket),
    );
    server.on('error', (err) => this.opts.logger.error({ err }, 'egress tunnel listener failed'));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      // Every interface, as proxy.ts: the redirect picks the slot's veth address; others are dropped unread.
      server.listen(this.opts.listenPort, '0.0.0.0', () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('egress tunnel has no port');
    this.server = server;
    this.listening = address.port;
  }

  async stop(): Promise<void> {
    for (const c of this.open) this.cut(c);
    for (const s of this.accepted) s.destroy();
    const server = this.server;
    this.server = null;
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }

  /** Cuts the slot's tunneled connections its current policy no longer allows (all, when it has none). */
  recheck(index: number): number {
    const slot = this.opts.registry.get(index);
    let cut = 0;
    for (const c of this.open) {
      if (c.slot !== index || this.stillAllowed(slot, c)) continue;
      this.cut(c);
      cut++;
    }
    return cut;
  }

  /**
   * A connection the egress proxy judged (allowed) from a tunneled slot: by `name` (allowOut's domains; the
   * upstream resolves it) or, for a name its CIDR policy admits, by the `address` the node resolved it to and
   * judged. Dialled through the slot's proxy, then spliced; `keep` is asked again at every policy change.
   * `refuse` answers the client when the tunnel cannot be made.
   */
  carry(
    req: {
      slot: SlotEgress;
      name: string | null;
      address?: string;
      port: number;
      client: Socket;
      keep?: (slot: SlotEgress) => boolean;
    },
    refuse: (reason: string) => void,
  ): void {
    const { slot, name, address, port, client, keep } = req;
    this.dial(slot, { name, address: address ?? null, port, client, ...(keep ? { keep } : {}) }, refuse);
  }

  private stillAllowed(slot: SlotEgress | undefined, c: Tunneled): boolean {
    const proxy = slot?.policy?.egressProxy;
    if (!slot || !proxy || proxyRoute(proxy) !== c.route) return false;
    if (c.keep && !c.keep(slot)) return false;
    if (c.name !== null) return matchesDomain(slot.patterns, c.name);
    return c.address !== null && this.addressAllowed(slot, c.address, c.port);
  }

  /** The slot's CIDR policy allows TCP to `address`:`port`, and the node lets sandboxes reach it at all. */
  private addressAllowed(slot: SlotEgress, address: string, port: number): boolean {
    const v = parseIPv4(address);
    if (v === null || !slot.policy || this.opts.resolver.refused(address)) return false;
    const flow = { daddr: v, protocol: PROTO_TCP, dport: port };
    return rulesVerdict(addressRules(slot.policy), flow) === 'accept';
  }

  private async byAddress(client: Socket): Promise<void> {
    const log = this.opts.logger;
    client.on('error', () => undefined);
    this.accepted.add(client);
    client.once('close', () => this.accepted.delete(client));
    const slot = this.opts.registry.bySourceAddress(client.remoteAddress);
    const src = client.remoteAddress?.replace(/^::ffff:/, '');
    if (!slot || !src || client.remotePort === undefined) {
      client.destroy();
      return;
    }
    const held = this.perSlot.get(slot.index) ?? 0;
    if (held >= (this.opts.maxConnectionsPerSlot ?? MAX_CONNECTIONS_PER_SLOT)) {
      this.opts.onVerdict?.('refused');
      log.warn({ slot: slot.index, held }, 'egress refused: too many connections from this sandbox');
      client.resetAndDestroy();
      return;
    }
    this.perSlot.set(slot.index, held + 1);
    client.once('close', () => {
      const n = (this.perSlot.get(slot.index) ?? 1) - 1;
      if (n > 0) this.perSlot.set(slot.index, n);
      else this.perSlot.delete(slot.index);
    });
    client.pause();
    const refuse = (reason: string) => {
      this.opts.onVerdict?.('refused');
      log.info({ slot: slot.index, reason }, 'egress refused');
      if (!client.destroyed) client.resetAndDestroy();
    };
    let dest: { address: string; port: number } | null;
    try {
      // A client gone while its lookup waited needs none.
      dest = await this.limited(() =>
        client.destroyed
          ? Promise.resolve(null)
          : (this.opts.originalDestination ?? originalDestination)(src, client.remotePort as number),
      );
    } catch (e) {
      return refuse(`its destination could not be read: ${(e as Error).message}`);
    }
    if (!dest) return refuse('its destination could not be read');
    // Judged by the policy now, not the one the nat rule was written from.
    const now = this.opts.registry.get(slot.index);
    if (!now?.policy?.egressProxy || !this.addressAllowed(now, dest.address, dest.port))
      return refuse(`${dest.address}:${dest.port} is not allowed through the egress proxy`);
    if (client.destroyed) return;
    this.dial(now, { name: null, address: dest.address, port: dest.port, client }, refuse);
  }

  /** Runs `lookup` when fewer than MAX_LOOKUPS_IN_FLIGHT others run. */
  private async limited<T>(lookup: () => Promise<T>): Promise<T> {
    if (this.lookups >= MAX_LOOKUPS_IN_FLIGHT) await new Promise<void>((r) => this.waiting.push(r));
    this.lookups++;
    try {
      return await lookup();
    } finally {
      this.lookups--;
      this.waiting.shift()?.();
    }
  }

  private dial(
    slot: SlotEgress,
    target: {
      name: string | null;
      address: string | null;
      port: number;
      client: Socket;
      keep?: (slot: SlotEgress) => boolean;
    },
    refuse: (reason: string) => void,
  ): void {
    const log = this.opts.logger;
    const proxy = slot.policy?.egressProxy;
    if (!proxy) return refuse('the sandbox has no egress proxy');
    const host = target.name ?? target.address;
    if (host === null) return refuse('no destination');
    const { socket: upstream, ready } = connectThroughSocks(
      proxy,
      { host, port: target.port },
      { resolver: this.opts.resolver, timeoutMs: this.opts.connectTimeoutMs ?? 10_000 },
    );
    const client = target.client;
    const c: Tunneled = {
      slot: slot.index,
      route: proxyRoute(proxy) as string,
      name: target.name,
      address: target.address,
      port: target.port,
      client,
      upstream,
      ...(target.keep ? { keep: target.keep } : {}),
    };
    this.open.add(c);
    upstream.on('error', () => undefined);
    const close = () => {
      if (this.open.has(c)) this.cut(c);
    };
    client.on('close', close);
    ready.then(
      () => {
        if (!this.open.has(c)) return;
        // Re-judged once the tunnel stands: a PUT while it was being made must not leave it open.
        if (!this.stillAllowed(this.opts.registry.get(slot.index), c)) return this.cut(c);
        this.opts.onVerdict?.('proxied');
        log.debug({ slot: slot.index, host, port: target.port, proxy: proxy.address }, 'egress tunneled');
        upstream.on('close', close);
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
        upstream.resume();
      },
      (err: Error) => {
        if (!this.open.has(c)) return;
        this.open.delete(c);
        log.info(
          { slot: slot.index, host, port: target.port, proxy: proxy.address, err: err.message },
          'egress tunnel failed',
        );
        refuse(`the egress proxy did not connect ${host}:${target.port}: ${err.message}`);
      },
    );
  }

  private cut(c: Tunneled): void {
    this.open.delete(c);
    c.client.destroy();
    c.upstream.destroy();
  }
}
