// The intercepted hop on loopback: the real egress proxy, a real HTTPS upstream (its certificate from a second
// CA standing in for the public ones) and real clients; only name resolution is a table.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls, { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseNetworkPolicy } from '../policy.js';
import { compileRules } from './header-rules.js';
import { Interceptor } from './intercept.js';
import { loadOrCreateNodeCa, type NodeCa } from './node-ca.js';
import { EgressProxy } from './proxy.js';
import { SlotRegistry } from './slot-registry.js';
import { UpstreamResolver } from './upstream.js';

const log = { debug() {}, info() {}, warn() {}, error() {} };
const SECRET = 'Bearer edge-s3cret';

const listen = (server: NetServer | http.Server): Promise<number> =>
  new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)),
  );

interface Seen {
  method: string;
  url: string;
  authorization?: string;
  host?: string;
  bytes: number;
}

/** Records what arrives and answers with it. */
function upstreamHandler(seen: Seen[]) {
  return (req: http.IncomingMessage, res: http.ServerResponse) => {
    let bytes = 0;
    req.on('data', (b: Buffer) => (bytes += b.length));
    req.on('end', () => {
      const s: Seen = { method: req.method!, url: req.url!, bytes };
      if (req.headers.authorization !== undefined) s.authorization = req.headers.authorization;
      if (req.headers.host !== undefined) s.host = req.headers.host;
      seen.push(s);
      if (req.url === '/stream') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        let i = 0;
        const tick = setInterval(() => {
          res.write(`line ${i++}\n`);
          if (i === 3) {
            clearInterval(tick);
            res.end();
          }
        }, 5);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes' });
      res.end(JSON.stringify(s));
    });
  };
}

interface Answer {
  status: number;
  body: string;
  reused: boolean;
  headers: http.IncomingHttpHeaders;
}

function request(
  mod: typeof http | typeof https,
  opts: https.RequestOptions,
  body?: Buffer[],
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = mod.request(opts, (res) => {
      let text = '';
      res.on('data', (b: Buffer) => (text += b.toString()));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body: text, reused: req.reusedSocket, headers: res.headers }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    for (const chunk of body ?? []) req.write(chunk);
    req.end();
  });
}

describe('egress interception of network.rules', () => {
  const root = mkdtempSync(join(tmpdir(), 'aenv-intercept-'));
  const registry = new SlotRegistry();
  const seen: Seen[] = [];
  const upstreamConnections: string[] = [];
  const secrets = new Map([['api-key', 'sk-from-store']]);
  let nodeCa: NodeCa;
  let publicCa: NodeCa;
  let proxy: EgressProxy;
  let interceptor: Interceptor;
  let tlsUpstream: https.Server;
  let httpUpstream: http.Server;
  let tlsPort: number;
  let httpPort: number;

  const home = (n: string) => {
    const h = join(root, n);
    mkdirSync(h);
    return h;
  };
  const setRules = (rules: unknown) => {
    const policy = parseNetworkPolicy({ rules });
    registry.set(['127.0.0.1'], {
      index: 1,
      patterns: ['api.test', 'plain.test', 'pass.test', 'untrusted.test'],
      anyName: false,
      rules: compileRules(policy.rules),
    });
    return proxy.recheck(1);
  };
  const allRules = {
    'api.test': [{ transform: { headers: { Authorization: SECRET } } }],
    'plain.test': [{ transform: { headers: { Authorization: SECRET } } }],
    'untrusted.test': [{ transform: { headers: { Authorization: SECRET } } }],
  };

  beforeAll(async () => {
    nodeCa = await loadOrCreateNodeCa({ homePath: home('node') });
    publicCa = await loadOrCreateNodeCa({ homePath: home('public') });
    const contexts = new Map([
      ['api.test', await publicCa.contextFor('api.test')],
      ['pass.test', await publicCa.contextFor('pass.test')],
      // Signed by a CA the proxy does not trust.
      ['untrusted.test', await nodeCa.contextFor('untrusted.test')],
    ]);
    tlsUpstream = https.createServer(
      { SNICallback: (name, cb) => cb(null, contexts.get(name)) },
      upstreamHandler(seen),
    );
    tlsUpstream.on('secureConnection', (s) => upstreamConnections.push(s.servername as string));
    httpUpstream = http.createServer(upstreamHandler(seen));
    tlsPort = await listen(tlsUpstream);
    httpPort = await listen(httpUpstream);
    const resolver = new UpstreamResolver({ servers: [], deniedCidrs: [] });
    resolver.resolve = (name: string) =>
      Promise.resolve(
        name.endsWith('.test') ? { ok: true, address: '127.0.0.1', ttl: 1 } : { ok: false, reason: 'nx' },
      );
    interceptor = new Interceptor({
      ca: nodeCa,
      upstreamCa: [publicCa.certPem],
      logger: log,
      secretValue: (name) => secrets.get(name),
    });
    proxy = new EgressProxy({
      ports: [tlsPort, httpPort],
      listenPort: 0,
      registry,
      resolver,
      logger: log,
      interceptor,
    });
    await proxy.start();
    setRules(allRules);
  });
  afterAll(async () => {
    await proxy.stop();
    interceptor.close();
    tlsUpstream.closeAllConnections();
    httpUpstream.closeAllConnections();
    tlsUpstream.close();
    httpUpstream.close();
    rmSync(root, { recursive: true, force: true });
  });

  const viaProxy = (name: string, agent: https.Agent, extra: https.RequestOptions = {}) => ({
    host: '127.0.0.1',
    port: proxy.listenPorts.get(tlsPort),
    servername: name,
    headers: { host: name, ...(extra.headers as object) },
    agent,
    ...Object.fromEntries(Object.entries(extra).filter(([k]) => k !== 'headers')),
  });

  it('injects the header over TLS the sandbox trusts (node CA), on several requests of one connection', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: nodeCa.certPem });
    try {
      const answers: Answer[] = [];
      for (const path of ['/a', '/b', '/c'])
        answers.push(
          await request(
            https,
            viaProxy('api.test', agent, { path, headers: { authorization: 'Bearer from-sandbox' } }),
          ),
        );
      expect(answers.map((a) => JSON.parse(a.body))).toEqual(
        ['/a', '/b', '/c'].map((url) => ({
          method: 'GET',
          url,
          authorization: SECRET,
          host: 'api.test',
          bytes: 0,
        })),
      );
      // One client connection, reused; the upstream hop keeps its connection alive too.
      expect(answers.map((a) => a.reused)).toEqual([false, true, true]);
      expect(answers[0]!.headers['x-upstream']).toBe('yes');
      expect(upstreamConnections.filter((n) => n === 'api.test')).toHaveLength(1);
      // The response never carries the injected value back.
      expect(JSON.stringify(answers.map((a) => a.headers))).not.toContain('s3cret');
    } finally {
      agent.destroy();
    }
  });

  it('opens parallel upstream connections without building the upstream trust again for each', async () => {
    // node:tls builds a context from `ca` on every connect it is not handed one for: with the host's bundle that
    // stalled the node's event loop for seconds under many parallel intercepted requests.
    const builds = vi.spyOn(tls, 'createSecureContext');
    const agents = Array.from({ length: 4 }, () => new https.Agent({ ca: nodeCa.certPem }));
    const before = upstreamConnections.length;
    try {
      const answers = await Promise.all(
        agents.map((agent, i) => request(https, viaProxy('api.test', agent, { path: `/parallel-${i}` }))),
      );
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
      expect(upstreamConnections.length - before).toBeGreaterThan(1);
      const upstreamTrustBuilds = builds.mock.calls.filter(
        ([o]) => Array.isArray(o?.ca) && o.ca.includes(publicCa.certPem),
      );
      expect(upstreamTrustBuilds).toHaveLength(0);
    } finally {
      builds.mockRestore();
      for (const a of agents) a.destroy();
    }
  });

  it('fills ${e2b.secrets.<name>} from the secret store per request; an unknown secret fails the request', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: nodeCa.certPem });
    try {
      setRules({
        'api.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.api-key}' } } }],
      });
      const first = await request(https, viaProxy('api.test', agent, { path: '/s1' }));
      expect(JSON.parse(first.body).authorization).toBe('Bearer sk-from-store');
      secrets.set('api-key', 'sk-rotated');
      const second = await request(https, viaProxy('api.test', agent, { path: '/s2' }));
      expect(JSON.parse(second.body).authorization).toBe('Bearer sk-rotated');
      secrets.delete('api-key');
      const gone = await request(https, viaProxy('api.test', agent, { path: '/s3' }));
      expect(gone.status).toBe(502);
      expect(gone.body).toMatch(/names secret api-key, which does not exist/);
      expect(seen.some((s) => s.url === '/s3')).toBe(false);
    } finally {
      agent.destroy();
      secrets.set('api-key', 'sk-from-store');
      setRules(allRules);
    }
  });

  it('fills a placeholder naming the secret in any case (names are stored lowercased)', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: nodeCa.certPem });
    try {
      setRules({
        'api.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.API-Key}' } } }],
      });
      const r = await request(https, viaProxy('api.test', agent, { path: '/upper' }));
      expect(JSON.parse(r.body).authorization).toBe('Bearer sk-from-store');
    } finally {
      agent.destroy();
      setRules(allRules);
    }
  });

  it('never sends on a placeholder it does not fill, even from a policy stored before such were refused', async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: nodeCa.certPem });
    try {
      // Compiled as stored, bypassing the create-time check (parseNetworkPolicy refuses it now).
      registry.set(['127.0.0.1'], {
        index: 1,
        patterns: ['api.test'],
        anyName: false,
        rules: compileRules({
          'api.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.identity.tokens.aws}' } } }],
        }),
      });
      await proxy.recheck(1);
      const r = await request(https, viaProxy('api.test', agent, { path: '/identity' }));
      expect(r.status).toBe(502);
      expect(r.body).toMatch(
        /the rule's header Authorization: a \$\{e2b\.identity\.tokens\.<name>\} placeholder/,
      );
      expect(seen.some((s) => s.url === '/identity')).toBe(false);
    } finally {
      agent.destroy();
      setRules(allRules);
    }
  });

  it('streams request and response bodies (chunked upload, a response written over time)', async () => {
    const agent = new https.Agent({ keepAlive: true, ca: nodeCa.certPem });
    try {
      const chunks = Array.from({ length: 64 }, () => Buffer.alloc(16 * 1024, 120));
      const up = await request(https, viaProxy('api.test', agent, { method: 'POST', path: '/up' }), chunks);
      expect(JSON.parse(up.body)).toMatchObject({
        method: 'POST',
        bytes: 64 * 16 * 1024,
        authorization: SECRET,
      });
      const stream = await request(https, viaProxy('api.test', agent, { path: '/stream' }));
      expect(stream.body).toBe('line 0\nline 1\nline 2\n');
    } finally {
      agent.destroy();
    }
  });

  it('injects into plain HTTP requests to a name with rules', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const opts = {
        host: '127.0.0.1',
        port: proxy.listenPorts.get(httpPort),
        headers: { host: 'plain.test' },
        agent,
      };
      const a = await request(http, { ...opts, path: '/1' });
      const b = await request(http, { ...opts, path: '/2' });
      expect([JSON.parse(a.body).authorization, JSON.parse(b.body).authorization]).toEqual([SECRET, SECRET]);
      expect(b.reused).toBe(true);
    } finally {
      agent.destroy();
    }
  });

  it('passes a name without rules through untouched: the client sees the upstream certificate', async () => {
    const viaNodeCa = new https.Agent({ ca: nodeCa.certPem });
    const viaPublicCa = new https.Agent({ ca: publicCa.certPem });
    try {
      const ok = await request(https, viaProxy('pass.test', viaPublicCa, { path: '/p' }));
      expect(JSON.parse(ok.body)).not.toHaveProperty('authorization');
      await expect(request(https, viaProxy('pass.test', viaNodeCa, { path: '/p' }))).rejects.toThrow(
        /self[- ]signed|unable to verify|certificate/i,
      );
    } finally {
      viaNodeCa.destroy();
      viaPublicCa.destroy();
    }
  });

  it('refuses another Host on an intercepted connection, and an upstream it cannot verify', async () => {
    const agent = new https.Agent({ ca: nodeCa.certPem });
    try {
      const other = await request(
        https,
        viaProxy('api.test', agent, { path: '/', headers: { host: 'pass.test' } }),
      );
      expect(other.status).toBe(421);
      const absolute = await request(https, viaProxy('api.test', agent, { path: 'https://pass.test/abs' }));
      expect(absolute.status).toBe(400);
      const bad = await request(https, viaProxy('untrusted.test', agent, { path: '/' }));
      expect(bad.status).toBe(502);
      expect(bad.body).not.toContain('s3cret');
    } finally {
      agent.destroy();
    }
    expect(seen.some((s) => (s.url === '/' && s.host === 'pass.test') || s.url.endsWith('/abs'))).toBe(false);
  });

  it('a live update that removes the rule cuts the intercepted connection; the next one is spliced', async () => {
    const port = proxy.listenPorts.get(tlsPort)!;
    const socket = tlsConnect({ host: '127.0.0.1', port, servername: 'api.test', ca: nodeCa.certPem });
    await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('error', () => undefined);
    expect(setRules({})).toBe(1);
    await closed;
    const agent = new https.Agent({ ca: publicCa.certPem });
    try {
      const a = await request(https, viaProxy('api.test', agent, { path: '/after' }));
      expect(JSON.parse(a.body)).not.toHaveProperty('authorization');
    } finally {
      agent.destroy();
      setRules(allRules);
    }
  });
});
