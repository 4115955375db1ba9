// The transparent egress proxy: TCP the nat chain redirects here (flows that allowOut's CIDRs do not let through,
// from slots with domain entries) is judged by the name it asks for (sniff.ts). An allowed name is connected to
// as the node resolves it, never to the address the sandbox dialled, so an allowed SNI cannot carry a sandbox to
// any IP; then bytes are spliced both ways by stream pipes (no parsing past the first request).

import { createServer, connect, type NetConnectOpts, type Server, type Socket } from 'node:net';
import type { NetworkLogger } from '../manager.js';
import { matchesDomain } from './domain-match.js';
import { sniff } from './sniff.js';
import type { SlotRegistry } from './slot-registry.js';
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
  client: Socket;
  upstream: Socket;
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
      // A slot that now has an egressProxy must not keep a direct connection.
      if (slot && !slot.policy?.egressProxy && matchesDomain(slot.patterns, c.name)) continue;
      this.cut(c);
      cut++;
    }
    return cut;
  }

  private cut(c: Proxied): void {
    this.open.delete(c);
    c.client.destroy();
    c.upstream.destroy();
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
    if (!slot || !matchesDomain(slot.patterns, sniffed.name))
      return refuse(`${sniffed.name} is not in the sandbox's allowOut`, http, sniffed.name);
    // Tunneled slots: the SOCKS5 upstream resolves the name (tunnel.ts).
    if (slot.policy?.egressProxy && this.opts.tunnel)
      return this.opts.tunnel.carry({ slot, name: sniffed.name, port: dport, client }, (reason) =>
        refuse(reason, http, sniffed.name),
      );
    const target = await this.opts.resolver.resolve(sniffed.name);
    if (!target.ok) return refuse(target.reason, http, sniffed.name);
    if (client.destroyed) return;

    // Node 20 passes highWaterMark to the socket's streams; @types/node types it only on createServer.
    const upstreamOpts: NetConnectOpts & { highWaterMark: number } = {
      host: target.address,
      port: dport,
      noDelay: true,
      allowHalfOpen: true,
      highWaterMark: STREAM_BUFFER_BYTES,
    };
    const upstream = connect(upstreamOpts);
    const c: Proxied = { slot: slot.index, name: sniffed.name, client, upstream };
    this.open.add(c);
    const timer = setTimeout(
      () => upstream.destroy(new Error('connect timeout')),
      this.opts.connectTimeoutMs ?? 10_000,
    );
    upstream.once('connect', () => {
      clearTimeout(timer);
      // Re-judged at connect: a PUT between the check and here must not leave this connection open.
      const now = this.opts.registry.get(slot.index);
      if (!now || now.policy?.egressProxy || !matchesDomain(now.patterns, c.name)) return this.cut(c);
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
}
