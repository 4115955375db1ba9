// The node's resolver for sandboxes with domain entries: the nat chain redirects their DNS (UDP and TCP port 53,
// to any address) here. A name allowOut allows (or any name, when the slot's CIDR policy allows DNS anyway) is
// answered from the node's upstream resolvers; anything else gets REFUSED. So DNS is no tunnel out of a
// sandbox whose internet access is off, and every question is logged with its verdict.

import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import * as dnsPacket from 'dns-packet';
import type { NetworkLogger } from '../manager.js';
import { matchesDomain, normalizeHostName } from './domain-match.js';
import type { SlotEgress, SlotRegistry } from './slot-registry.js';
import type { UpstreamResolver } from './upstream.js';

const RCODE = { NOERROR: 0, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;
const MAX_TTL = 300;
const MAX_TCP_MESSAGE = 4096;

export interface DnsAnswerer {
  lookup(name: string): Promise<{ address: string; ttl: number }[]>;
}

/** The response to one query from `slot` (null: not a query worth answering). Exported for unit tests. */
export async function answerQuery(
  query: Buffer,
  slot: SlotEgress,
  upstream: DnsAnswerer,
  log: NetworkLogger,
  onVerdict?: (verdict: 'answered' | 'refused') => void,
): Promise<Buffer | null> {
  let q: dnsPacket.DecodedPacket;
  try {
    q = dnsPacket.decode(query);
  } catch {
    return null;
  }
  if (q.type !== 'query') return null;
  const question = q.questions?.length === 1 ? q.questions[0] : undefined;
  const reply = (rcode: number, answers: dnsPacket.Answer[] = []) =>
    dnsPacket.encode({
      type: 'response',
      id: q.id ?? 0,
      flags: dnsPacket.RECURSION_AVAILABLE | (q.flag_rd ? dnsPacket.RECURSION_DESIRED : 0) | rcode,
      questions: q.questions ?? [],
      answers,
    });
  if (!question || question.class !== 'IN') return reply(RCODE.NOTIMP);
  const name = normalizeHostName(question.name);
  const allowed = name !== null && (slot.anyName || matchesDomain(slot.patterns, name));
  onVerdict?.(allowed ? 'answered' : 'refused');
  if (!allowed) {
    log.info({ slot: slot.index, name: question.name, type: question.type }, 'sandbox DNS refused');
    return reply(RCODE.REFUSED);
  }
  log.debug({ slot: slot.index, name, type: question.type }, 'sandbox DNS answered');
  // Slots have no IPv6 and the proxy connects over IPv4: other types get an empty answer, not a way out.
  if (question.type !== 'A') return reply(RCODE.NOERROR);
  const found = await upstream.lookup(name);
  if (found.length === 0) return reply(RCODE.NXDOMAIN);
  return reply(
    RCODE.NOERROR,
    found.map((a) => ({
      type: 'A' as const,
      name: question.name,
      class: 'IN' as const,
      ttl: Math.min(a.ttl, MAX_TTL),
      data: a.address,
    })),
  );
}

export interface SandboxDnsServerOptions {
  /** 0: an ephemeral port (the same for UDP and TCP). */
  listenPort: number;
  registry: SlotRegistry;
  resolver: UpstreamResolver;
  logger: NetworkLogger;
  onVerdict?: (verdict: 'answered' | 'refused') => void;
}

export class SandboxDnsServer {
  private udp: UdpSocket | null = null;
  private tcp: Server | null = null;
  private readonly tcpClients = new Set<Socket>();
  port = 0;

  constructor(private readonly opts: SandboxDnsServerOptions) {}

  async start(): Promise<void> {
    const tcp = createServer((socket) => this.serveTcp(socket));
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen(this.opts.listenPort, '0.0.0.0', () => {
        tcp.off('error', reject);
        resolve();
      });
    });
    this.tcp = tcp;
    const address = tcp.address();
    if (address === null || typeof address === 'string') throw new Error('sandbox DNS has no port');
    this.port = address.port;
    const udp = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(this.port, '0.0.0.0', () => {
        udp.off('error', reject);
        resolve();
      });
    });
    udp.on('error', (err) => this.opts.logger.error({ err }, 'sandbox DNS socket failed'));
    udp.on('message', (msg, rinfo) => {
      const slot = this.opts.registry.bySourceAddress(rinfo.address);
      if (!slot) return;
      void this.answer(msg, slot).then((out) => {
        if (out) udp.send(out, rinfo.port, rinfo.address);
      });
    });
    this.udp = udp;
  }

  async stop(): Promise<void> {
    for (const s of this.tcpClients) s.destroy();
    this.udp?.close();
    await new Promise<void>((r) => (this.tcp ? this.tcp.close(() => r()) : r()));
    this.udp = null;
    this.tcp = null;
  }

  private answer(msg: Buffer, slot: SlotEgress): Promise<Buffer | null> {
    return answerQuery(msg, slot, this.opts.resolver, this.opts.logger, this.opts.onVerdict).catch(
      (err: unknown) => {
        this.opts.logger.warn({ err, slot: slot.index }, 'sandbox DNS query failed');
        return null;
      },
    );
  }

  /** DNS over TCP: two-byte length, message; one query at a time, bounded in size and idle time. */
  private serveTcp(socket: Socket): void {
    socket.on('error', () => undefined);
    const slot = this.opts.registry.bySourceAddress(socket.remoteAddress);
    if (!slot) {
      socket.destroy();
      return;
    }
    this.tcpClients.add(socket);
    socket.on('close', () => this.tcpClients.delete(socket));
    socket.setTimeout(10_000, () => socket.destroy());
    let buf = Buffer.alloc(0);
    let busy = false;
    const drain = async () => {
      if (busy) return;
      busy = true;
      while (buf.length >= 2) {
        const len = buf.readUInt16BE(0);
        if (len > MAX_TCP_MESSAGE) return socket.destroy();
        if (buf.length < 2 + len) break;
        const msg = buf.subarray(2, 2 + len);
        buf = buf.subarray(2 + len);
        const out = await this.answer(msg, slot);
        if (!out) return socket.destroy();
        const head = Buffer.alloc(2);
        head.writeUInt16BE(out.length);
        socket.write(Buffer.concat([head, out]));
      }
      busy = false;
    };
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length > MAX_TCP_MESSAGE + 2) return socket.destroy();
      void drain();
    });
  }
}
