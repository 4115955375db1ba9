// The data-plane proxy and sandbox access tokens: secure sandboxes (envd token, signed file URLs), private
// ingress (traffic token), routing forms, streaming both ways, WebSockets and the proxy's own error answers;
// `network.httpsPorts` (a self-signed HTTPS service) and `network.maskRequestHost`.
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { get as httpGet } from 'node:http';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { Sandbox } from 'e2b';
import { ENVD_PORT, REPO, eventually, proxyFetch, type TestServer } from './harness.js';
import { describeNode } from './fixture.js';

const UPSTREAM = readFileSync(join(REPO, 'test', 'e2e', 'fixtures', 'upstream.py'), 'utf8');
const PORT = 8080;

/** What the upstream fixture's /echo answers. */
interface Echo {
  path: string;
  headers: Record<string, string | undefined>;
}
const DOMAIN = 'sbx.e2e.test';

/** A GET with an explicit Host header (fetch does not let a caller set Host). */
function getWithHost(
  server: TestServer,
  host: string,
  path: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpGet({ host: '127.0.0.1', port: server.port, path, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
  });
}

/** Starts the fixture service on PORT in `sbx` and waits until the proxy reaches it. */
async function startUpstream(
  server: TestServer,
  sbx: Sandbox,
  headers: Record<string, string> = {},
): Promise<void> {
  await sbx.files.write('/tmp/upstream.py', UPSTREAM);
  await sbx.commands.run(`python3 /tmp/upstream.py ${PORT}`, { background: true, timeoutMs: 0 });
  await eventually(
    async () => (await proxyFetch(server, sbx.sandboxId, PORT, '/echo', { headers })).status === 200,
    'the upstream service to listen',
    100,
    100,
  );
}

const rpcList = (server: TestServer, id: string, headers: Record<string, string> = {}) =>
  proxyFetch(server, id, ENVD_PORT, '/process.Process/List', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'connect-protocol-version': '1', ...headers },
    body: '{}',
  });

describe('data-plane proxy and access tokens', () => {
  const { server, track } = describeNode({
    name: 'proxy',
    toml: `[sandbox_proxy]\ndomains = ["${DOMAIN}"]\n`,
  });
  let open: Sandbox;

  beforeAll(async () => {
    // Not secure: v1's default (every v2 create, the SDK's, is secured).
    const created = await server.api('POST', '/sandboxes', { templateID: 'base', timeout: 300 });
    expect(created.status).toBe(201);
    expect(created.body.envdAccessToken).toBeUndefined();
    open = await Sandbox.connect(created.body.sandboxID as string, { timeoutMs: 300_000 });
    await startUpstream(server, open);
  });

  describe('secure sandbox', () => {
    let id: string;
    let token: string;
    let sbx: Sandbox;

    beforeAll(async () => {
      // The 2.51 SDK ignores `secure` (every E2B sandbox is secured there); the raw v1 route takes it.
      const created = await server.api('POST', '/sandboxes', {
        templateID: 'base',
        secure: true,
        timeout: 300,
      });
      expect(created.status).toBe(201);
      id = created.body.sandboxID;
      token = created.body.envdAccessToken;
      expect(token).toMatch(/^[0-9a-f]{64}$/);
      sbx = await Sandbox.connect(id);
    });

    it('is usable through the SDK once connected with the token it returns', async () => {
      expect((await sbx.commands.run('echo secured; id -un')).stdout).toBe('secured\nuser\n');
      await sbx.files.write('secret.txt', 'top secret');
      expect(await sbx.files.read('secret.txt')).toBe('top secret');
      expect((await server.api('GET', `/sandboxes/${id}`)).body.envdAccessToken).toBe(token);
    });

    it('refuses envd requests without or with a wrong X-Access-Token', async () => {
      const none = await rpcList(server, id);
      expect(none.status).toBe(401);
      expect(await none.json()).toMatchObject({ code: 401 });
      const wrong = await rpcList(server, id, { 'x-access-token': 'f'.repeat(64) });
      expect(wrong.status).toBe(401);
      const other = await rpcList(server, id, { 'x-access-token': `${token}0` });
      expect(other.status).toBe(401);
      const ok = await rpcList(server, id, { 'x-access-token': token });
      expect(ok.status).toBe(200);
      // Proto3 JSON leaves an empty `processes` out.
      expect(await ok.json()).toEqual({});
      // Health included (stricter than E2B, docs/security.md); files need a token or a signature.
      expect((await proxyFetch(server, id, ENVD_PORT, '/health')).status).toBe(401);
      const health = await proxyFetch(server, id, ENVD_PORT, '/health', {
        headers: { 'x-access-token': token },
      });
      expect(health.status).toBe(204);
      expect(await sbx.isRunning()).toBe(true);
      expect((await proxyFetch(server, id, ENVD_PORT, '/files?path=secret.txt')).status).toBe(401);
      // The API key is not a data-plane credential.
      expect((await rpcList(server, id, { 'x-api-key': server.apiKey })).status).toBe(401);
    });

    it('serves signed download and upload URLs without any header', async () => {
      const download = await sbx.downloadUrl('secret.txt');
      expect(download).toContain('signature=');
      const got = await fetch(download);
      expect(got.status).toBe(200);
      expect(await got.text()).toBe('top secret');

      const tampered = new URL(download);
      tampered.searchParams.set('signature', `v1_${'A'.repeat(43)}`);
      expect((await fetch(tampered)).status).toBe(401);
      const otherPath = new URL(download);
      otherPath.searchParams.set('path', '/etc/shadow');
      expect((await fetch(otherPath)).status).toBe(401);

      const upload = await sbx.uploadUrl('uploaded.txt');
      const form = new FormData();
      form.append('file', new Blob(['sent by url']), 'uploaded.txt');
      const put = await fetch(upload, { method: 'POST', body: form });
      expect(put.status).toBe(200);
      expect(await sbx.files.read('uploaded.txt')).toBe('sent by url');
      // A read signature does not authorise a write.
      const wrongOp = await fetch(download, { method: 'POST', body: form });
      expect(wrongOp.status).toBe(401);

      const expiring = await sbx.downloadUrl('secret.txt', { useSignatureExpiration: 600 });
      expect(await (await fetch(expiring)).text()).toBe('top secret');
    });
  });

  describe('private ingress (allowPublicTraffic: false)', () => {
    let sbx: Sandbox;

    beforeAll(async () => {
      sbx = await Sandbox.create({ timeoutMs: 300_000, network: { allowPublicTraffic: false } });
    });

    it('requires the traffic token on user ports but not on envd', async () => {
      expect(sbx.trafficAccessToken).toMatch(/^[0-9a-f]{64}$/);
      // The traffic token is not the envd token: the SDK reaches envd with the envd token alone.
      expect((await sbx.commands.run('echo ok')).stdout).toBe('ok\n');
      const tokenHeader = { 'e2b-traffic-access-token': sbx.trafficAccessToken! };
      await startUpstream(server, sbx, tokenHeader);

      const without = await proxyFetch(server, sbx.sandboxId, PORT, '/echo');
      expect(without.status).toBe(401);
      const wrong = await proxyFetch(server, sbx.sandboxId, PORT, '/echo', {
        headers: { 'e2b-traffic-access-token': '0'.repeat(64) },
      });
      expect(wrong.status).toBe(401);
      const withToken = await proxyFetch(server, sbx.sandboxId, PORT, '/echo', { headers: tokenHeader });
      expect(withToken.status).toBe(200);
      // The token is the proxy's business: it is not passed on to the sandbox.
      expect(((await withToken.json()) as Echo).headers['e2b-traffic-access-token']).toBeUndefined();
      // The envd token of another sandbox's private port is not a traffic token.
      expect((await proxyFetch(server, open.sandboxId, PORT, '/echo', { headers: tokenHeader })).status).toBe(
        200,
      );
    });
  });

  describe('routing and forwarding', () => {
    it('routes by /proxy prefix with agentenv headers and by e2b headers on any path', async () => {
      const viaPrefix = await fetch(`${server.url}/proxy/echo?x=1`, {
        headers: { 'x-agentenv-sandbox-id': open.sandboxId, 'x-agentenv-target-port': String(PORT) },
      });
      expect(viaPrefix.status).toBe(200);
      const seen = (await viaPrefix.json()) as Echo;
      expect(seen.path).toBe('/echo?x=1');
      expect(seen.headers['x-forwarded-proto']).toBe('http');
      expect(seen.headers['x-forwarded-uri']).toBe('/echo?x=1');
      expect(seen.headers['x-forwarded-host']).toBe(`127.0.0.1:${server.port}`);
      expect(seen.headers['x-agentenv-sandbox-id']).toBeUndefined();

      const viaHeaders = await proxyFetch(server, open.sandboxId, PORT, '/echo?y=2', {
        headers: { 'x-api-key': server.apiKey, 'x-custom': 'kept' },
      });
      const seen2 = (await viaHeaders.json()) as Echo;
      expect(seen2.path).toBe('/echo?y=2');
      expect(seen2.headers['x-custom']).toBe('kept');
      expect(seen2.headers['x-api-key']).toBeUndefined();
      expect(seen2.headers['e2b-sandbox-id']).toBeUndefined();

      const file = randomBytes(2 * 1024 * 1024);
      await open.files.write('/tmp/served.bin', new Blob([Uint8Array.from(file)]));
      const served = await proxyFetch(server, open.sandboxId, PORT, '/file/served.bin', { prefix: true });
      expect(Buffer.from(await served.arrayBuffer()).equals(Uint8Array.from(file))).toBe(true);
    });

    it('routes by Host {port}-{sandboxID}.{domain} and advertises the domain', async () => {
      const echo = await getWithHost(
        server,
        `${PORT}-${open.sandboxId}.${DOMAIN}:${server.port}`,
        '/echo?h=1',
      );
      expect(echo.status).toBe(200);
      expect(JSON.parse(echo.body).path).toBe('/echo?h=1');
      // Host routing wins over control-plane paths: this /health is envd's.
      expect((await getWithHost(server, `${ENVD_PORT}-${open.sandboxId}.${DOMAIN}`, '/health')).status).toBe(
        204,
      );
      const badPort = await getWithHost(server, `http-${open.sandboxId}.${DOMAIN}`, '/');
      expect(badPort).toEqual({ status: 400, body: 'invalid sandbox data-plane host: port is invalid' });
      const badId = await getWithHost(server, `${PORT}-nope.${DOMAIN}`, '/');
      expect(badId).toEqual({ status: 400, body: 'invalid sandbox data-plane host: sandbox id is invalid' });
      expect((await server.api('GET', `/sandboxes/${open.sandboxId}`)).body.domain).toBe(DOMAIN);
      expect(open.sandboxDomain).toBe(DOMAIN);
    });

    it('answers routing errors itself, with E2B JSON for a closed port or an unknown sandbox', async () => {
      const closed = await proxyFetch(server, open.sandboxId, 9, '/');
      expect(closed.status).toBe(502);
      expect(await closed.json()).toEqual({
        sandboxId: open.sandboxId,
        message: 'The sandbox is running but port is not open',
        port: 9,
        code: 502,
      });
      const ghost = '01990000-0000-7000-8000-000000000001';
      const unknown = await proxyFetch(server, ghost, ENVD_PORT, '/health');
      expect(unknown.status).toBe(502);
      expect(await unknown.json()).toEqual({
        sandboxId: ghost,
        message: 'The sandbox was not found',
        code: 502,
      });

      const noPort = await fetch(`${server.url}/proxy/x`, { headers: { 'e2b-sandbox-id': open.sandboxId } });
      expect(noPort.status).toBe(400);
      expect(await noPort.text()).toBe('missing target port routing header');
      const badId = await fetch(`${server.url}/proxy/x`, {
        headers: { 'e2b-sandbox-id': 'nope', 'e2b-sandbox-port': '1' },
      });
      expect(badId.status).toBe(400);
      const badPort = await proxyFetch(server, open.sandboxId, 70000, '/', { prefix: true });
      expect(badPort.status).toBe(400);
    });

    it('streams a response as it is produced, not when it ends', async () => {
      await open.files.remove('/tmp/stream-go');
      const res = await proxyFetch(server, open.sandboxId, PORT, '/stream');
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      // The upstream holds "second" back until /tmp/stream-go exists: "first" must arrive before that.
      while (!text.includes('first\n')) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      expect(text).toBe('first\n');
      await open.files.write('/tmp/stream-go', '');
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      expect(text).toBe('first\nsecond\n');
    });

    it('streams a large chunked request body to the sandbox', async () => {
      const body = randomBytes(24 * 1024 * 1024);
      let offset = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(c) {
          if (offset >= body.length) return c.close();
          c.enqueue(body.subarray(offset, offset + 256 * 1024));
          offset += 256 * 1024;
        },
      });
      const res = await proxyFetch(server, open.sandboxId, PORT, '/sum', {
        method: 'POST',
        body: stream,
        duplex: 'half',
      } as RequestInit);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({
        sha256: createHash('sha256').update(body).digest('hex'),
        length: body.length,
      });
    });

    it('bridges a WebSocket to the sandbox', async () => {
      const ws = new WebSocket(`ws://127.0.0.1:${server.port}/proxy/ws`, ['chat'], {
        headers: { 'e2b-sandbox-id': open.sandboxId, 'e2b-sandbox-port': String(PORT) },
      });
      const messages: string[] = [];
      ws.on('message', (m) => messages.push(m.toString()));
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      expect(ws.protocol).toBe('chat');
      ws.send('hello');
      ws.send('x'.repeat(70_000));
      await eventually(() => messages.length === 2, 'websocket echoes');
      expect(messages[0]).toBe('echo:hello');
      expect(messages[1]).toBe(`echo:${'x'.repeat(70_000)}`);
      const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
      ws.close(1000);
      expect(await closed).toBe(1000);
    });

    it('closes open streams and answers 502 once the sandbox is killed', async () => {
      const victim = await Sandbox.create({ timeoutMs: 120_000 });
      await startUpstream(server, victim);
      await victim.files.remove('/tmp/stream-go');
      const res = await proxyFetch(server, victim.sandboxId, PORT, '/stream');
      const reader = res.body!.getReader();
      await reader.read();
      const ws = new WebSocket(`ws://127.0.0.1:${server.port}/ws`, {
        headers: { 'e2b-sandbox-id': victim.sandboxId, 'e2b-sandbox-port': String(PORT) },
      });
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      const wsClosed = new Promise<void>((resolve) => ws.once('close', () => resolve()));

      expect(await victim.kill()).toBe(true);
      // The half-sent response ends with an error instead of hanging.
      const ended = await reader.read().then(
        (r) => (r.done ? 'done' : 'data'),
        () => 'error',
      );
      expect(ended).toBe('error');
      await wsClosed;
      const health = await proxyFetch(server, victim.sandboxId, ENVD_PORT, '/health');
      expect(health.status).toBe(502);
      expect(await victim.isRunning()).toBe(false);
    });
  });

  describe('httpsPorts and maskRequestHost', () => {
    const HTTPS_PORT = 8443;
    const MASK = '${PORT}-masked.example.test';

    /** A self-signed certificate (made on the host: the base image has no openssl). */
    function selfSigned(): { cert: string; key: string } {
      const dir = mkdtempSync(join(tmpdir(), 'aenv-e2e-https-'));
      try {
        execFileSync(
          'openssl',
          [
            'req',
            '-x509',
            '-newkey',
            'ec',
            '-pkeyopt',
            'ec_paramgen_curve:P-256',
            '-nodes',
            '-days',
            '2',
            '-subj',
            '/CN=sandbox-service',
            '-keyout',
            join(dir, 'key.pem'),
            '-out',
            join(dir, 'cert.pem'),
          ],
          { stdio: 'pipe' },
        );
        return {
          cert: readFileSync(join(dir, 'cert.pem'), 'utf8'),
          key: readFileSync(join(dir, 'key.pem'), 'utf8'),
        };
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }

    /** Whether the sandbox's service on HTTPS_PORT completes a TLS handshake (checked from inside). */
    const listensTls = (sbx: Sandbox) =>
      sbx.commands
        .run(
          `python3 -c "import ssl,socket; ssl._create_unverified_context().wrap_socket(socket.create_connection(('127.0.0.1',${HTTPS_PORT}))).close()"`,
        )
        .then(
          () => true,
          () => false,
        );

    it('reaches a self-signed HTTPS service on an httpsPorts port, and its services see the masked Host', async () => {
      const sbx = track(
        await Sandbox.create({
          timeoutMs: 120_000,
          network: { httpsPorts: [HTTPS_PORT], maskRequestHost: MASK },
        }),
      );
      const { cert, key } = selfSigned();
      await sbx.files.write('/tmp/cert.pem', cert);
      await sbx.files.write('/tmp/key.pem', key);
      await sbx.files.write('/tmp/upstream.py', UPSTREAM);
      await sbx.commands.run(`python3 /tmp/upstream.py ${HTTPS_PORT} /tmp/cert.pem /tmp/key.pem`, {
        background: true,
        timeoutMs: 0,
      });
      await sbx.commands.run(`python3 /tmp/upstream.py ${PORT}`, { background: true, timeoutMs: 0 });
      await eventually(() => listensTls(sbx), 'the HTTPS service to listen', 100, 100);
      const https = await proxyFetch(server, sbx.sandboxId, HTTPS_PORT, '/echo?tls=1');
      expect(https.status).toBe(200);
      const seen = (await https.json()) as Echo;
      expect(seen.path).toBe('/echo?tls=1');
      expect(seen.headers.host).toBe(`${HTTPS_PORT}-masked.example.test`);
      await eventually(
        async () => (await proxyFetch(server, sbx.sandboxId, PORT, '/echo')).status === 200,
        'the HTTP service to listen',
        100,
        100,
      );
      // WebSockets to an httpsPorts port go over TLS too.
      const ws = new WebSocket(`ws://127.0.0.1:${server.port}/ws`, {
        headers: { 'e2b-sandbox-id': sbx.sandboxId, 'e2b-sandbox-port': String(HTTPS_PORT) },
      });
      const echoed = new Promise<string>((resolve, reject) => {
        ws.once('message', (m) => resolve(m.toString()));
        ws.once('error', reject);
      });
      ws.once('open', () => ws.send('over-tls'));
      expect(await echoed).toBe('echo:over-tls');
      ws.close();
      const plain = (await (await proxyFetch(server, sbx.sandboxId, PORT, '/echo')).json()) as Echo;
      expect(plain.headers.host).toBe(`${PORT}-masked.example.test`);
      const info = await server.api('GET', `/sandboxes/${sbx.sandboxId}`);
      expect(info.body.network).toMatchObject({ httpsPorts: [HTTPS_PORT], maskRequestHost: MASK });

      // Without httpsPorts the proxy speaks plain HTTP to the same TLS service, which cannot answer it.
      const other = track(await Sandbox.create({ timeoutMs: 120_000 }));
      await other.files.write('/tmp/cert.pem', cert);
      await other.files.write('/tmp/key.pem', key);
      await other.files.write('/tmp/upstream.py', UPSTREAM);
      await other.commands.run(`python3 /tmp/upstream.py ${HTTPS_PORT} /tmp/cert.pem /tmp/key.pem`, {
        background: true,
        timeoutMs: 0,
      });
      await eventually(() => listensTls(other), 'the second HTTPS service to listen', 100, 100);
      expect((await proxyFetch(server, other.sandboxId, HTTPS_PORT, '/echo')).status).not.toBe(200);
    });

    it('refuses bad httpsPorts and maskRequestHost, naming the entry, and any change by a network update', async () => {
      const cases: [object, RegExp][] = [
        [{ httpsPorts: [ENVD_PORT] }, /^network\.httpsPorts\[0\]: the envd port \(49983\) cannot be listed/],
        [{ httpsPorts: [443, 0] }, /^network\.httpsPorts\[1\] must be a port number 1-65535, got 0/],
        [{ httpsPorts: [65536] }, /^network\.httpsPorts\[0\] must be a port number/],
        [{ httpsPorts: ['8443'] }, /^network\.httpsPorts\[0\] must be a port number 1-65535, got "8443"/],
        [{ httpsPorts: [1.5] }, /^network\.httpsPorts\[0\] must be a port number/],
        [{ httpsPorts: 8443 }, /^network\.httpsPorts must be an array/],
        [
          { httpsPorts: Array.from({ length: 65 }, (_, i) => 1000 + i) },
          /^network\.httpsPorts has 65 entries/,
        ],
        [{ maskRequestHost: 7 }, /^network\.maskRequestHost must be a string/],
        [{ maskRequestHost: 'a.test\r\nx-evil: 1' }, /^network\.maskRequestHost ".*" is not a host name/],
        [{ maskRequestHost: 'a b.test' }, /^network\.maskRequestHost ".*" is not a host name/],
        [{ maskRequestHost: 'h'.repeat(256) }, /^network\.maskRequestHost is longer than 255/],
      ];
      for (const [network, message] of cases) {
        const r = await server.api('POST', '/sandboxes', { templateID: 'base', network });
        expect(r.status, JSON.stringify(network)).toBe(400);
        expect(r.body).toEqual({ code: 400, message: expect.stringMatching(message) });
      }
      const put = await server.api('PUT', `/sandboxes/${open.sandboxId}/network`, { httpsPorts: [8443] });
      expect(put.body).toEqual({
        code: 400,
        message: 'httpsPorts cannot be changed by a network update; it is set when the sandbox is created',
      });
    });
  });
});
