// network.rules together with an egressProxy, on loopback: the real egress proxy, interceptor and SOCKS tunnel,
// a real HTTPS upstream and a minimal SOCKS5 server that records what it is asked for. Only name resolution is a
// table, and the loopback proxy address is let through the node's address checks (a test stands in for the
// fake internet of test/e2e/egress-rules.test.ts, which runs the same path against microsocks).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetworkPolicy } from '../policy.js';
import { domainPatterns } from '../egress-model.js';
import { compileRules } from './header-rules.js';
import { Interceptor } from './intercept.js';
import { loadOrCreateNodeCa, type NodeCa } from './node-ca.js';
import { EgressProxy } from './proxy.js';
import { SlotRegistry } from './slot-registry.js';
import { connectThroughSocks } from './socks.js';
import { SocksTunnel } from './tunnel.js';
import { UpstreamResolver } from './upstream.js';

const log = { debug() {}, info() {}, warn() {}, error() {} };
const SECRET = 'Bearer through-socks';

const listen = (server: Server): Promise<number> =>
  new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)),
  );

/**
 * SOCKS5 without authentication, CONNECT only: records `host:port` as asked (a name or an IPv4 address) and
 * connects to 127.0.0.1:port, where every test name lives.
 */
function socksServer(asked: string[], open: Map<Socket, string>): Server {
  return createServer((c) => {
    open.set(c, '');
    c.on('close', () => open.delete(c));
    c.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    let greeted = false;
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (!greeted) {
        if (buf.length < 2 || buf.length < 2 + buf[1]!) return;
        buf = buf.subarray(2 + buf[1]!);
        greeted = true;
        c.write(Buffer.from([5, 0]));
      }
      if (buf.length < 5) return;
      const atyp = buf[3];
      const end = atyp === 1 ? 10 : atyp === 3 ? 7 + buf[4]! : -1;
      if (end < 0) return c.destroy();
      if (buf.length < end) return;
      const host = atyp === 1 ? [...buf.subarray(4, 8)].join('.') : buf.subarray(5, 5 + buf[4]!).toString();
      const port = buf.readUInt16BE(end - 2);
      const rest = buf.subarray(end);
      c.off('data', onData);
      c.pause();
      asked.push(`${host}:${port}`);
      open.set(c, `${host}:${port}`);
      const up = connect(port, '127.0.0.1', () => {
        c.write(Buffer.from([5, 0, 0, 1, 127, 0, 0, 1, 0, 0]));
        if (rest.length > 0) up.write(rest);
        c.pipe(up);
        up.pipe(c);
        c.resume();
      });
      up.on('error', () => c.destroy());
      c.on('close', () => up.destroy());
    };
    c.on('data', onData);
  });
}

function get(opts: https.RequestOptions): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request(opts, (res) => {
      let body = '';
      res.on('data', (b: Buffer) => (body += b.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('network.rules with an egressProxy', () => {
  const root = mkdtempSync(join(tmpdir(), 'aenv-socks-intercept-'));
  const registry = new SlotRegistry();
  const asked: string[] = [];
  /** Open SOCKS connections → what each was asked for. */
  const socksConnections = new Map<Socket, string>();
  const socks = socksServer(asked, socksConnections);
  let socksPort: number;
  let nodeCa: NodeCa;
  let publicCa: NodeCa;
  let upstream: https.Server;
  let upstreamPort: number;
  let plainUpstream: http.Server;
  let plainPort: number;
  let interceptor: Interceptor;
  let tunnel: SocksTunnel;
  let proxy: EgressProxy;
  let port: number;

  const home = (n: string) => {
    const h = join(root, n);
    mkdirSync(h);
    return h;
  };
  /** Installs a policy as EgressService.setPolicy does; returns how many connections it cut. */
  const setPolicy = (input: Parameters<typeof parseNetworkPolicy>[0]) => {
    const policy = parseNetworkPolicy(input);
    registry.set(['127.0.0.1'], {
      index: 1,
      patterns: domainPatterns(policy),
      anyName: false,
      rules: compileRules(policy.rules),
      policy,
    });
    return proxy.recheck(1) + tunnel.recheck(1);
  };
  const rules = { 'api.test': [{ transform: { headers: { Authorization: SECRET } } }] };
  const allowOut = ['api.test', 'pass.test'];
  /** One plain-HTTP request to api.test through the proxy on a new connection: the upstream's answer. */
  const plainGet = () =>
    new Promise<string>((resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port: proxy.listenPorts.get(plainPort),
          headers: { host: 'api.test' },
          agent: false,
        },
        (res) => {
          let body = '';
          res.on('data', (b: Buffer) => (body += b.toString()));
          res.on('end', () => resolve(`${res.statusCode} ${body}`));
        },
      );
      req.on('error', reject);
      req.end();
    });
  const viaProxy = (name: string, ca: string) => ({
    host: '127.0.0.1',
    port,
    servername: name,
    headers: { host: name },
    path: '/',
    ca,
    agent: false as const,
  });

  beforeAll(async () => {
    nodeCa = await loadOrCreateNodeCa({ homePath: home('node') });
    publicCa = await loadOrCreateNodeCa({ homePath: home('public') });
    const contexts = new Map([
      ['api.test', await publicCa.contextFor('api.test')],
      ['pass.test', await publicCa.contextFor('pass.test')],
    ]);
    upstream = https.createServer({ SNICallback: (n, cb) => cb(null, contexts.get(n)) }, (req, res) =>
      res.end(JSON.stringify({ host: req.headers.host, authorization: req.headers.authorization ?? null })),
    );
    upstreamPort = await listen(upstream);
    plainUpstream = http.createServer((req, res) => res.end(req.headers.authorization ?? 'none'));
    plainPort = await listen(plainUpstream);
    socksPort = await listen(socks);
    const resolver = new UpstreamResolver({ servers: [], deniedCidrs: [] });
    resolver.resolve = (name: string) =>
      Promise.resolve(
        name.endsWith('.test') ? { ok: true, address: '127.0.0.1', ttl: 1 } : { ok: false, reason: 'nx' },
      );
    // The SOCKS server is on loopback, which the node never dials for a sandbox otherwise.
    resolver.refused = () => false;
    interceptor = new Interceptor({
      ca: nodeCa,
      upstreamCa: [publicCa.certPem],
      logger: log,
      dialSocks: (p, destination) => connectThroughSocks(p, destination, { resolver, timeoutMs: 5000 }),
    });
    tunnel = new SocksTunnel({ listenPort: 0, registry, resolver, logger: log });
    await tunnel.start();
    proxy = new EgressProxy({
      ports: [upstreamPort, plainPort],
      listenPort: 0,
      registry,
      resolver,
      logger: log,
      interceptor,
      tunnel,
    });
    await proxy.start();
    port = proxy.listenPorts.get(upstreamPort) as number;
  });
  afterAll(async () => {
    await proxy.stop();
    await tunnel.stop();
    interceptor.close();
    for (const s of socksConnections.keys()) s.destroy();
    socks.close();
    upstream.closeAllConnections();
    upstream.close();
    plainUpstream.closeAllConnections();
    plainUpstream.close();
    rmSync(root, { recursive: true, force: true });
  });

  const egressProxy = () => ({ address: `127.0.0.1:${socksPort}` });

  it('injects the header on the intercepted hop, which asks the SOCKS5 upstream for the name', async () => {
    setPolicy({ allowOut, denyOut: ['0.0.0.0/0'], rules, egressProxy: egressProxy() });
    const before = asked.length;
    const a = await get(viaProxy('api.test', nodeCa.certPem));
    expect(JSON.parse(a.body)).toEqual({ host: 'api.test', authorization: SECRET });
    expect(asked.slice(before)).toEqual([`api.test:${upstreamPort}`]);
    // A name without rules is carried through it untouched: the client sees the upstream's certificate.
    const b = await get(viaProxy('pass.test', publicCa.certPem));
    expect(JSON.parse(b.body)).toEqual({ host: 'pass.test', authorization: null });
    expect(asked.slice(before)).toEqual([`api.test:${upstreamPort}`, `pass.test:${upstreamPort}`]);
  });

  it('a name that gains rules has its carried connection cut; the next one is intercepted', async () => {
    setPolicy({ allowOut, denyOut: ['0.0.0.0/0'], rules, egressProxy: egressProxy() });
    const carried = tlsConnect({ host: '127.0.0.1', port, servername: 'pass.test', ca: publicCa.certPem });
    carried.on('error', () => undefined);
    await new Promise<void>((resolve, reject) =>
      carried.once('secureConnect', resolve).once('error', reject),
    );
    const closed = new Promise<void>((resolve) => carried.once('close', () => resolve()));
    const more = { ...rules, 'pass.test': rules['api.test'] };
    expect(setPolicy({ allowOut, denyOut: ['0.0.0.0/0'], rules: more, egressProxy: egressProxy() })).toBe(1);
    await closed;
    expect(JSON.parse((await get(viaProxy('pass.test', nodeCa.certPem))).body).authorization).toBe(SECRET);
  });

  it('without the proxy the intercepted hop is dialled directly; a route change cuts open connections', async () => {
    setPolicy({ allowOut, denyOut: ['0.0.0.0/0'], rules, egressProxy: egressProxy() });
    const open = tlsConnect({ host: '127.0.0.1', port, servername: 'api.test', ca: nodeCa.certPem });
    open.on('error', () => undefined);
    await new Promise<void>((resolve, reject) => open.once('secureConnect', resolve).once('error', reject));
    const closed = new Promise<void>((resolve) => open.once('close', () => resolve()));
    expect(setPolicy({ allowOut, denyOut: ['0.0.0.0/0'], rules })).toBe(1);
    await closed;
    const before = asked.length;
    expect(JSON.parse((await get(viaProxy('api.test', nodeCa.certPem))).body).authorization).toBe(SECRET);
    expect(asked.length).toBe(before);
  });

  it('judges a name outside allowOut by the address the node resolves, and asks the upstream for that address', async () => {
    // No domain entries, internet on: admitted by the CIDR policy (what the manager hands in as `admits`).
    const policy = parseNetworkPolicy({ rules, egressProxy: egressProxy() });
    registry.set(['127.0.0.1'], {
      index: 1,
      patterns: [],
      anyName: true,
      rules: compileRules(policy.rules),
      policy,
      admits: (address) => address === '127.0.0.1',
    });
    proxy.recheck(1);
    tunnel.recheck(1);
    const before = asked.length;
    expect(JSON.parse((await get(viaProxy('api.test', nodeCa.certPem))).body).authorization).toBe(SECRET);
    expect(asked.slice(before)).toEqual([`127.0.0.1:${upstreamPort}`]);
    // Refused by it: nothing is asked of the upstream.
    registry.set(['127.0.0.1'], {
      index: 1,
      patterns: [],
      anyName: true,
      rules: compileRules(policy.rules),
      policy,
      admits: () => false,
    });
    await expect(get(viaProxy('api.test', nodeCa.certPem))).rejects.toThrow();
    expect(asked.length).toBe(before + 1);
  });

  it('drops a pooled tunnel the upstream closed instead of sending the next request into it', async () => {
    setPolicy({ allowOut, denyOut: ['0.0.0.0/0'], rules, egressProxy: egressProxy() });
    const before = asked.length;
    expect(await plainGet()).toBe(`200 ${SECRET}`);
    expect(await plainGet()).toBe(`200 ${SECRET}`);
    // Kept alive: the second request reused the first one's tunnel.
    expect(asked.length).toBe(before + 1);
    // The upstream server ends its idle connection; the SOCKS server passes the end on, and the node must close
    // its side (it is no use any more) rather than keep it pooled half-open.
    plainUpstream.closeIdleConnections();
    const plainTunnels = () => [...socksConnections.values()].filter((d) => d.endsWith(`:${plainPort}`));
    for (let i = 0; i < 200 && plainTunnels().length > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(plainTunnels()).toEqual([]);
    expect(await plainGet()).toBe(`200 ${SECRET}`);
    expect(asked.length).toBe(before + 2);
  });
});
