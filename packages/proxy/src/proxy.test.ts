import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, request, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { WebSocketServer, WebSocket } from 'ws';
import { SandboxProxy } from './proxy.js';
import type { ProxyTarget, SandboxDirectory } from './directory.js';
import { pino } from 'pino';
import { DomainError, ErrorKind } from '@aenv/protocol';

const KEY = 'e2b_' + '11'.repeat(32);
const ID = '01936f8e-72f5-7000-8000-000000000001';
const SECURE_ID = '01936f8e-72f5-7000-8000-000000000002';
const PAUSED_ID = '01936f8e-72f5-7000-8000-000000000003';
const PRIVATE_ID = '01936f8e-72f5-7000-8000-000000000004';
const SLEEPING_ID = '01936f8e-72f5-7000-8000-000000000005';
/** Paused by another node into the shared repository, and mounting a volume only that node has. */
const VOLUME_BOUND_ID = '01936f8e-72f5-7000-8000-000000000006';
const silent = new Writable({ write: (_c, _e, cb) => cb() });

/** A stand-in "sandbox" app: echoes what it received, streams on /stream, and accepts WebSockets. */
function startUpstream(): Promise<{ server: Server; port: number; wss: WebSocketServer }> {
  return new Promise((resolve) => {
    const server = createServer((req, res) => {
      if (req.url === '/stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: first\n\n');
        const t = setInterval(() => res.write('data: tick\n\n'), 20);
        res.on('close', () => clearInterval(t));
        return;
      }
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const seen = JSON.stringify({
          url: req.url,
          method: req.method,
          headers: req.headers,
          body: Buffer.concat(chunks).toString(),
        });
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(seen),
          connection: 'x-hop',
          'x-hop': 'secret',
        });
        res.end(seen);
      });
    });
    const wss = new WebSocketServer({ server });
    wss.on('connection', (ws) => ws.on('message', (m) => ws.send(`echo:${m.toString()}`)));
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, port: (server.address() as AddressInfo).port, wss }),
    );
  });
}

describe('SandboxProxy', () => {
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let front: Server;
  let frontPort = 0;
  let proxy: SandboxProxy;
  const targets = new Map<string, ProxyTarget>();
  const resumes: string[] = [];

  beforeAll(async () => {
    upstream = await startUpstream();
    const running = (id: string, extra: Partial<ProxyTarget> = {}): ProxyTarget => ({
      sandboxId: id,
      state: 'running',
      secure: false,
      allowPublicTraffic: true,
      autoResume: false,
      upstream: { host: '127.0.0.1', instanceId: `inst-${id}` },
      ...extra,
    });
    targets.set(ID, running(ID));
    targets.set(SECURE_ID, running(SECURE_ID, { secure: true }));
    targets.set(PRIVATE_ID, running(PRIVATE_ID, { allowPublicTraffic: false }));
    targets.set(PAUSED_ID, { ...running(PAUSED_ID), state: 'paused', upstream: undefined });
    targets.set(SLEEPING_ID, {
      ...running(SLEEPING_ID, { secure: true, autoResume: true }),
      state: 'paused',
      upstream: undefined,
    });
    const directory: SandboxDirectory = {
      lookup: (id) => targets.get(id),
      settle: async (id) => targets.get(id),
      autoResume: async (id) => {
        resumes.push(id);
        const t = running(id, { secure: true, autoResume: true });
        targets.set(id, t);
        return t;
      },
      verifyEnvdToken: (id, token) => token === `envd-${id}`,
      verifyTrafficToken: (id, token) => token === `traffic-${id}`,
      verifyFilesSignature: () => false,
      findBySignedFilesUrl: (url) => (url.includes('signature=v1_good') ? ID : undefined),
      adopt: async (id) => {
        if (id !== VOLUME_BOUND_ID) return undefined;
        throw new DomainError(
          ErrorKind.Unavailable,
          `sandbox ${id} mounts volume "data", which is not on node node-b: it resumes only on node node-a, which holds the volume; try again once that node serves it`,
          { expose: true },
        );
      },
    };
    proxy = new SandboxProxy({
      domains: ['sbx.test'],
      envdPort: upstream.port,
      platformApiKey: KEY,
      directory,
      logger: pino({ level: 'info', base: undefined }, silent),
    });
    front = createServer((req, res) => {
      if (proxy.claims(req)) proxy.handle(req, res);
      else res.writeHead(299).end('control-plane');
    });
    front.on('upgrade', (req, socket, head) => {
      if (proxy.claims(req)) proxy.upgrade(req, socket, head);
      else socket.destroy();
    });
    await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
    frontPort = (front.address() as AddressInfo).port;
  });

  afterAll(async () => {
    proxy.closeAll();
    await new Promise((r) => front.close(r));
    upstream.wss.close();
    await new Promise((r) => upstream.server.close(r));
  });

  const send = (
    path: string,
    headers: Record<string, string>,
    body?: string,
    method = 'GET',
  ): Promise<{ status: number; headers: Record<string, unknown>; text: string }> =>
    new Promise((resolve, reject) => {
      const r = request({ host: '127.0.0.1', port: frontPort, path, method, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, text: Buffer.concat(chunks).toString() }),
        );
      });
      r.on('error', reject);
      r.end(body);
    });
  const route = (id: string, port?: number) => ({
    'e2b-sandbox-id': id,
    'e2b-sandbox-port': String(port ?? upstream.port),
  });

  it('leaves requests without routing to the control plane', async () => {
    expect((await send('/sandboxes', {})).status).toBe(299);
  });

  it('forwards header-routed requests with the original path, x-forwarded headers and without routing headers', async () => {
    const r = await send(
      '/files?path=a%20b',
      { ...route(ID), 'x-api-key': KEY, 'x-custom': 'yes' },
      'payload',
      'POST',
    );
    expect(r.status).toBe(200);
    const seen = JSON.parse(r.text);
    expect(seen.url).toBe('/files?path=a%20b');
    expect(seen.body).toBe('payload');
    expect(seen.headers['x-custom']).toBe('yes');
    expect(seen.headers['e2b-sandbox-id']).toBeUndefined();
    expect(seen.headers['x-api-key']).toBeUndefined();
    expect(seen.headers['x-forwarded-method']).toBe('POST');
    expect(seen.headers['x-forwarded-uri']).toBe('/files?path=a%20b');
    expect(seen.headers.host).toBe(`127.0.0.1:${upstream.port}`);
    expect(r.headers['x-hop']).toBeUndefined();
  });

  it('strips the /proxy prefix and keeps raw paths', async () => {
    const r = await send('/proxy//api/x?q=1', route(ID));
    expect(JSON.parse(r.text).url).toBe('//api/x?q=1');
    const root = await send('/proxy', route(ID));
    expect(JSON.parse(root.text).url).toBe('/');
  });

  it('routes by host name', async () => {
    const r = await send('/health', { host: `${upstream.port}-${ID}.sbx.test` });
    expect(JSON.parse(r.text).url).toBe('/health');
    const bad = await send('/', { host: `99999-${ID}.sbx.test` });
    expect(bad.status).toBe(400);
    expect(bad.text).toBe('invalid sandbox data-plane host: port is invalid');
  });

  it('answers routing mistakes with 400 plain text', async () => {
    expect((await send('/proxy/x', {})).text).toBe('missing sandbox routing header');
    expect((await send('/x', { 'e2b-sandbox-id': 'nope', 'e2b-sandbox-port': '1' })).text).toBe(
      'invalid sandbox routing header',
    );
    expect((await send('/x', { 'e2b-sandbox-id': ID })).text).toBe('missing target port routing header');
    expect((await send('/x', { 'e2b-sandbox-id': ID, 'e2b-sandbox-port': '0' })).text).toBe(
      'invalid target port routing header',
    );
  });

  it('answers unknown sandboxes with E2B 502 and paused ones without auto-resume with 410', async () => {
    const unknown = await send('/health', route('01936f8e-72f5-7000-8000-0000000000ff'));
    expect(unknown.status).toBe(502);
    expect(JSON.parse(unknown.text)).toMatchObject({ message: 'The sandbox was not found', code: 502 });
    const paused = await send('/x', route(PAUSED_ID));
    expect(paused.status).toBe(410);
    // ...but envd's /health, the SDK's isRunning() probe, reads as "not running" like E2B's 502.
    const health = await send('/health', route(PAUSED_ID));
    expect(health.status).toBe(502);
    expect(JSON.parse(health.text)).toMatchObject({ message: 'The sandbox is paused', code: 502 });
  });

  it('enforces the envd token on secure sandboxes and forwards it only when valid', async () => {
    expect((await send('/process.Process/List', route(SECURE_ID), '{}', 'POST')).status).toBe(401);
    expect((await send('/x', { ...route(SECURE_ID), 'x-access-token': 'wrong' })).status).toBe(401);
    const ok = await send('/x', { ...route(SECURE_ID), 'x-access-token': `envd-${SECURE_ID}` });
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.text).headers['x-access-token']).toBe(`envd-${SECURE_ID}`);
    // Health included: through the proxy a secure envd answers nothing without its token.
    expect((await send('/health', route(SECURE_ID))).status).toBe(401);
    expect(
      (await send('/health', { ...route(SECURE_ID), 'x-access-token': `envd-${SECURE_ID}` })).status,
    ).toBe(200);
    const insecure = await send('/x', { ...route(ID), 'x-access-token': 'anything' });
    expect(JSON.parse(insecure.text).headers['x-access-token']).toBeUndefined();
  });

  it('enforces the traffic token on other ports of private sandboxes', async () => {
    const otherPort = upstream.port + 0; // same server; pretend it is the app port by using a different envd port
    const p = new SandboxProxy({
      domains: [],
      envdPort: 49983,
      platformApiKey: KEY,
      directory: (proxy as unknown as { opts: { directory: SandboxDirectory } }).opts.directory,
      logger: pino({ level: 'info', base: undefined }, silent),
    });
    const s = createServer((req, res) => (p.claims(req) ? p.handle(req, res) : res.end()));
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const port = (s.address() as AddressInfo).port;
    const get = (headers: Record<string, string>) =>
      new Promise<number>((resolve) =>
        request({ host: '127.0.0.1', port, path: '/', headers }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        }).end(),
      );
    expect(await get(route(PRIVATE_ID, otherPort))).toBe(401);
    expect(
      await get({ ...route(PRIVATE_ID, otherPort), 'e2b-traffic-access-token': `traffic-${PRIVATE_ID}` }),
    ).toBe(200);
    p.closeAll();
    await new Promise((r) => s.close(r));
  });

  it('answers a sandbox another node paused, which mounts volumes only that node has, with its 503', async () => {
    const r = await send('/health', route(VOLUME_BOUND_ID));
    expect(r.status).toBe(503);
    expect(JSON.parse(r.text)).toEqual({
      sandboxId: VOLUME_BOUND_ID,
      code: 503,
      message: `sandbox ${VOLUME_BOUND_ID} mounts volume "data", which is not on node node-b: it resumes only on node node-a, which holds the volume; try again once that node serves it`,
    });
  });

  it('answers a closed port with E2B 502 "port is not open"', async () => {
    const r = await send('/', route(ID, 1));
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text)).toMatchObject({
      message: 'The sandbox is running but port is not open',
      port: 1,
    });
  });

  it('routes header-less signed /files URLs by signature', async () => {
    const ok = await send('/files?path=a&signature=v1_good', {});
    expect(JSON.parse(ok.text).url).toBe('/files?path=a&signature=v1_good');
    expect((await send('/files?path=a&signature=v1_bad', {})).status).toBe(401);
  });

  it('streams responses and cuts open streams when the instance goes away', async () => {
    const events: string[] = [];
    const ended = new Promise<string>((resolve) => {
      request({ host: '127.0.0.1', port: frontPort, path: '/stream', headers: route(ID) }, (res) => {
        res.on('data', (c: Buffer) => {
          events.push(c.toString());
          if (events.length === 3) proxy.closeInstance(`inst-${ID}`);
        });
        res.on('aborted', () => resolve('aborted'));
        res.on('error', () => resolve('error'));
        res.on('end', () => resolve('end'));
      })
        .on('error', () => resolve('error'))
        .end();
    });
    const how = await ended;
    expect(events[0]).toContain('data: first');
    expect(how === 'aborted' || how === 'error').toBe(true);
  });

  it('bridges WebSocket upgrades', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${frontPort}/ws`, { headers: route(ID) });
    const reply = await new Promise<string>((resolve, reject) => {
      ws.on('open', () => ws.send('hi'));
      ws.on('message', (m) => resolve(m.toString()));
      ws.on('error', reject);
    });
    expect(reply).toBe('echo:hi');
    ws.close();
  });

  /** Raw bytes on one connection to the proxy; resolves with everything it answered once it closes. */
  const raw = (bytes: string) =>
    new Promise<string>((resolve) => {
      const sock = connect(frontPort, '127.0.0.1', () => sock.write(bytes));
      let got = '';
      sock.on('data', (c: Buffer) => {
        got += c.toString('latin1');
        if (got.includes('"closing"')) sock.end();
      });
      sock.on('close', () => resolve(got));
    });
  const head = (id: string, port = upstream.port) =>
    `Host: x\r\ne2b-sandbox-id: ${id}\r\ne2b-sandbox-port: ${port}\r\n`;

  it('checks the token before auto-resuming a paused sandbox', async () => {
    expect((await send('/health', route(SLEEPING_ID))).status).toBe(401);
    expect((await send('/x', { ...route(SLEEPING_ID), 'x-access-token': 'wrong' })).status).toBe(401);
    expect(resumes).toEqual([]);
    const ok = await send('/x', { ...route(SLEEPING_ID), 'x-access-token': `envd-${SLEEPING_ID}` });
    expect(ok.status).toBe(200);
    expect(resumes).toEqual([SLEEPING_ID]);
  });

  it('refuses envd /init in every spelling envd would route to it', async () => {
    for (const path of ['/init', '/init?x=1', '/./init', '/a/../init', '/%2e/init', '/%2E%2E/init']) {
      const r = await send(path, route(ID), '{}', 'POST');
      expect(r.status, path).toBe(403);
      expect(JSON.parse(r.text)).toMatchObject({ code: 403 });
    }
    expect((await send('/initial', route(ID), '{}', 'POST')).status).toBe(200);
  });

  it('drops every header that carries the platform API key, in any spelling and count', async () => {
    const answer = await raw(
      `GET /echo HTTP/1.1\r\n${head(ID)}X-API-Key: ${KEY}\r\nx-api-key: ${KEY}\r\nAuthorization: Bearer ${KEY}\r\n` +
        `Cookie: a=1\r\nCookie: k=${KEY}\r\nX-Other: ${KEY}!\r\nX-Kept: yes\r\nConnection: close\r\n\r\n`,
    );
    const seen = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).headers as Record<string, string>;
    expect(Object.values(seen).filter((v) => v.includes(KEY))).toEqual([]);
    expect(seen['x-kept']).toBe('yes');
    expect((await send(`/q?key=${KEY}`, route(ID))).status).toBe(400);
  });

  it('re-frames a GET body instead of passing it on, and answers pipelined requests in order', async () => {
    const hidden = 'GET /hidden HTTP/1.1\r\nHost: x\r\n\r\n';
    const answer = await raw(
      `GET /first HTTP/1.1\r\n${head(ID)}Transfer-Encoding: chunked\r\n\r\n` +
        `${hidden.length.toString(16)}\r\n${hidden}\r\n0\r\n\r\n` +
        `GET /closing HTTP/1.1\r\n${head(ID)}Connection: close\r\n\r\n`,
    );
    const bodies = answer
      .split('HTTP/1.1 ')
      .slice(1)
      .map(
        (r) =>
          JSON.parse(r.slice(r.indexOf('\r\n\r\n') + 4)) as { url: string; method: string; body: string },
      );
    expect(bodies.map((b) => b.url)).toEqual(['/first', '/closing']);
    expect(bodies[0]!.body).toBe(hidden);
  });

  it('refuses framing Node accepts but a proxy should not pass on, and upgrades with a body', async () => {
    const gz = await raw(
      `POST /x HTTP/1.1\r\n${head(ID)}Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n0\r\n\r\n`,
    );
    expect(gz).toMatch(/^HTTP\/1.1 400 /);
    const up = await raw(
      `GET /ws HTTP/1.1\r\n${head(ID)}Upgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 3\r\n\r\nabc`,
    );
    expect(up).toMatch(/^HTTP\/1.1 400 /);
  });

  it('relays a refused upgrade whole and closes, without reading what follows', async () => {
    // No Sec-WebSocket-Key: the upstream's WebSocket server refuses the handshake.
    const answer = await raw(
      `GET /ws HTTP/1.1\r\n${head(ID)}Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n` +
        `GET /after-upgrade HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1.1 400 /);
    expect(answer).toContain('Connection: close');
    expect(answer).not.toContain('after-upgrade');
  });
});
