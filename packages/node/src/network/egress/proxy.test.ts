// The egress proxy on loopback: a real upstream server, real client sockets; only name resolution is a table
// (upstream.test.ts covers the resolver's refusals, the fake-internet e2e test the whole path).
import { connect, createServer, type Server, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCidr, type Cidr } from '@aenv/config';
import { EgressProxy } from './proxy.js';
import { SlotRegistry } from './slot-registry.js';
import { UpstreamResolver } from './upstream.js';

const log = { debug() {}, info() {}, warn() {}, error() {} };

function listen(server: Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)),
  );
}

/** Sends `data`, resolves with everything read until the peer closes, and how it closed. */
function exchange(port: number, data: Buffer): Promise<{ got: Buffer; reset: boolean }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let reset = false;
    const s = connect(port, '127.0.0.1', () => s.end(data));
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', () => (reset = true));
    s.on('close', () => resolve({ got: Buffer.concat(chunks), reset }));
  });
}

/** The ClientHello a real TLS client sends for `servername`. */
function clientHello(servername: string): Promise<Buffer> {
  return new Promise((resolve) => {
    const capture = createServer((s) => {
      s.once('data', (b: Buffer) => {
        resolve(b);
        s.destroy();
        capture.close();
      });
    });
    void listen(capture).then((port) => {
      const t = tlsConnect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false });
      t.on('error', () => undefined);
    });
  });
}

describe('EgressProxy', () => {
  const registry = new SlotRegistry();
  const seen: Buffer[] = [];
  const sockets = new Set<Socket>();
  // Echoes what it receives after recording it, and holds connections open until the client ends.
  const upstream = createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.on('data', (b: Buffer) => {
      seen.push(b);
      s.write(b);
    });
    s.on('end', () => s.end());
  });
  let proxy: EgressProxy;
  let port: number;
  let upstreamPort: number;
  let resolver: UpstreamResolver;

  beforeAll(async () => {
    upstreamPort = await listen(upstream);
    resolver = new UpstreamResolver({ servers: [], deniedCidrs: [] });
    resolver.resolve = (name: string) =>
      Promise.resolve(
        name.endsWith('.test') ? { ok: true, address: '127.0.0.1', ttl: 1 } : { ok: false, reason: 'nx' },
      );
    proxy = new EgressProxy({ ports: [upstreamPort], listenPort: 0, registry, resolver, logger: log });
    await proxy.start();
    port = proxy.listenPorts.get(upstreamPort) as number;
    registry.set(['127.0.0.1'], { index: 1, patterns: ['ok.test', '*.wild.test'], anyName: false });
  });
  afterAll(async () => {
    await proxy.stop();
    for (const s of sockets) s.destroy();
    await new Promise((r) => upstream.close(r));
  });

  it('passes an allowed HTTP request through unchanged and refuses another Host with a 403', async () => {
    const req = Buffer.from('GET /x HTTP/1.1\r\nHost: ok.test\r\nConnection: close\r\n\r\n');
    expect((await exchange(port, req)).got.toString()).toBe(req.toString());
    const other = await exchange(port, Buffer.from('GET / HTTP/1.1\r\nHost: other.test\r\n\r\n'));
    expect(other.got.toString()).toMatch(
      /^HTTP\/1\.1 403 Forbidden\r\n[\s\S]*other\.test is not in the sandbox's allowOut/,
    );
  });

  it('passes an allowed ClientHello byte for byte; another SNI, the apex of a wildcard, or no TLS is reset', async () => {
    const hello = await clientHello('a.b.wild.test');
    seen.length = 0;
    const through = await exchange(port, hello);
    expect(Buffer.concat(seen).equals(hello)).toBe(true);
    expect(through.got.equals(hello)).toBe(true);

    for (const refused of [
      await clientHello('evil.test'),
      await clientHello('wild.test'),
      Buffer.from('SSH-2.0-x\r\n'),
    ]) {
      const r = await exchange(port, refused);
      expect(r.reset).toBe(true);
      expect(r.got.length).toBe(0);
    }
  });

  it('cuts an open proxied connection once its slot policy no longer allows the name', async () => {
    const s = connect(port, '127.0.0.1');
    const closed = new Promise<void>((r) => s.on('close', () => r()));
    s.on('error', () => undefined);
    const echoed = new Promise<void>((r) => s.once('data', () => r()));
    s.write('GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n');
    await echoed;
    expect(proxy.openConnections).toBe(1);
    registry.set(['127.0.0.1'], { index: 1, patterns: ['*.wild.test'], anyName: false });
    expect(proxy.recheck(1)).toBe(1);
    await closed;
    expect(proxy.openConnections).toBe(0);
  });

  it('resets connections over the per-slot limit, and takes new ones once they close', async () => {
    registry.set(['127.0.0.1'], { index: 1, patterns: ['ok.test'], anyName: false });
    const warned: string[] = [];
    const limited = new EgressProxy({
      ports: [upstreamPort],
      listenPort: 0,
      registry,
      resolver,
      logger: { ...log, warn: (_o: object, msg?: string) => void warned.push(msg ?? '') },
      maxConnectionsPerSlot: 2,
      sniffTimeoutMs: 60_000,
    });
    await limited.start();
    try {
      const p = limited.listenPorts.get(upstreamPort) as number;
      const req = Buffer.from('GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n');
      const idle = [connect(p, '127.0.0.1'), connect(p, '127.0.0.1')];
      await Promise.all(idle.map((s) => new Promise((r) => s.once('connect', r))));
      // Connections still waiting for their first bytes count too.
      const third = await exchange(p, req);
      expect(third).toEqual({ got: Buffer.alloc(0), reset: true });
      expect(warned).toEqual(['egress refused: too many connections from this sandbox']);
      for (const s of idle) s.destroy();
      let echoed = '';
      for (let i = 0; i < 100 && echoed === ''; i++) echoed = (await exchange(p, req)).got.toString();
      expect(echoed).toBe(req.toString());
    } finally {
      await limited.stop();
    }
  });

  it('drops connections from addresses that are no slot of its', async () => {
    registry.delete(1);
    const r = await exchange(port, Buffer.from('GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n'));
    expect(r.got.length).toBe(0);
  });
});

describe('UpstreamResolver.refused', () => {
  it('refuses denied ranges, the host own addresses and non-IPv4', () => {
    const r = new UpstreamResolver({ servers: [], deniedCidrs: [parseCidr('10.0.0.0/8') as Cidr] });
    expect(r.refused('10.1.2.3')).toBe(true);
    expect(r.refused('127.0.0.1')).toBe(true);
    expect(r.refused('::1')).toBe(true);
    expect(r.refused('198.51.100.30', new Set())).toBe(false);
    expect(r.refused('198.51.100.30', new Set(['198.51.100.30']))).toBe(true);
  });
});

describe('UpstreamResolver.lookup', () => {
  it('keeps answers for their TTL (capped), then asks again', async () => {
    let now = 1_000_000;
    const r = new UpstreamResolver({ servers: [], deniedCidrs: [], now: () => now });
    let asked = 0;
    const inner = r as unknown as { resolver: { resolve4: (n: string) => Promise<unknown> } };
    inner.resolver.resolve4 = () => {
      asked++;
      return Promise.resolve([{ address: '198.51.100.30', ttl: 60 }]);
    };
    expect(await r.lookup('a.test')).toEqual([{ address: '198.51.100.30', ttl: 60 }]);
    now += 20_000;
    expect(await r.lookup('a.test')).toEqual([{ address: '198.51.100.30', ttl: 40 }]);
    expect(asked).toBe(1);
    now += 41_000;
    await r.lookup('a.test');
    expect(asked).toBe(2);
  });
});
