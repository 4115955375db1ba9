// Tokens and credentials at the data-plane proxy (docs/security.md, "Data-plane proxy" and "envd /init"),
// against a real `aenv server`: the token is checked before a paused sandbox is resumed, a secure envd answers
// nothing without it (health included), only the node runs envd's /init (the proxy refuses it, and envd itself
// wants the node's init key), signed URLs are capped, and the platform API key never reaches sandbox code.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  ENVD_PORT,
  REPO,
  envdAddress as envdAddressOf,
  eventually,
  proxyFetch,
  startServer,
  useSdk,
  type TestServer,
} from '../e2e/harness.js';
import { httpRequest, rawExchange } from './raw-http.js';

const RECORDER = readFileSync(join(REPO, 'test', 'security', 'fixtures', 'recorder.py'), 'utf8');
const RECORDER_PORT = 8082;
const RECORDER_LOG = '/tmp/recorder.log';
const DOMAIN = 'sprx.test';

interface Recorded {
  path: string;
  headers: [string, string][];
}

describe('proxy tokens and platform credentials', () => {
  let server: TestServer;
  let open: Sandbox;
  /** A secure sandbox, created through the raw v1 route, which answers its token. */
  let secure: { id: string; token: string; sbx: Sandbox };

  const createSecure = async (extra: Record<string, unknown> = {}) => {
    const created = await server.api('POST', '/sandboxes', {
      templateID: 'base',
      secure: true,
      timeout: 600,
      ...extra,
    });
    expect(created.status).toBe(201);
    return {
      id: created.body.sandboxID as string,
      token: created.body.envdAccessToken as string,
    };
  };
  const state = async (id: string) => (await server.api('GET', `/sandboxes/${id}`)).body.state as string;
  /** The sandbox's host-interaction address, where the node itself talks to envd (docs/networking.md). */
  const envdAddress = (id: string): string => envdAddressOf(server, id);

  const envdRoute = (id: string) => [`e2b-sandbox-id: ${id}`, `e2b-sandbox-port: ${ENVD_PORT}`];

  beforeAll(async () => {
    server = await startServer({ name: 'sprx2', toml: `[sandbox_proxy]\ndomains = ["${DOMAIN}"]\n` });
    useSdk(server);
    // Not secure: v1's default (every v2 create, the SDK's, is secured).
    const created = await server.api('POST', '/sandboxes', { templateID: 'base', timeout: 600 });
    expect(created.status).toBe(201);
    expect(created.body.envdAccessToken).toBeUndefined();
    open = await Sandbox.connect(created.body.sandboxID as string, { timeoutMs: 600_000 });
    const s = await createSecure();
    secure = { ...s, sbx: await Sandbox.connect(s.id) };
  });
  afterAll(async () => {
    if (server) expect(await server.shutdown()).toBe(0);
  });

  it('checks the token before auto-resuming: an unauthenticated request leaves a paused sandbox paused', async () => {
    const { id, token } = await createSecure({ autoPause: true, autoResume: { enabled: true } });
    expect((await server.api('POST', `/sandboxes/${id}/pause`, {})).status).toBe(204);
    expect(await state(id)).toBe('paused');
    const route = envdRoute(id);
    const attempts = [
      httpRequest(['GET /health HTTP/1.1', 'Host: x', ...route]),
      httpRequest(['GET /health HTTP/1.1', 'Host: x', ...route, `X-Access-Token: ${'0'.repeat(64)}`]),
      httpRequest(['GET /health HTTP/1.1', 'Host: x', ...route, `X-Access-Token: ${token}0`]),
      httpRequest(
        [
          'POST /process.Process/List HTTP/1.1',
          'Host: x',
          ...route,
          'Content-Type: application/json',
          'Content-Length: 2',
        ],
        '{}',
      ),
      httpRequest([
        `GET /files?path=/etc/hostname&signature=v1_${'A'.repeat(43)} HTTP/1.1`,
        'Host: x',
        ...route,
      ]),
      httpRequest([`GET /files?path=/etc/hostname&signature=forged HTTP/1.1`, 'Host: x', ...route]),
      httpRequest(['GET /health HTTP/1.1', `Host: ${ENVD_PORT}-${id}.${DOMAIN}`]),
      httpRequest([
        `GET /proxy/health HTTP/1.1`,
        'Host: x',
        `x-agentenv-sandbox-id: ${id}`,
        `x-agentenv-target-port: ${ENVD_PORT}`,
      ]),
    ];
    for (const bytes of attempts) {
      const r = (await rawExchange(server.port, bytes)).responses[0]!;
      expect(r.status, bytes.split('\r\n')[0]).toBe(401);
      expect(JSON.parse(r.body)).toMatchObject({ code: 401 });
    }
    expect(await state(id)).toBe('paused');
    // With its token, the same request wakes it.
    const ok = await proxyFetch(server, id, ENVD_PORT, '/health', { headers: { 'x-access-token': token } });
    expect(ok.status).toBe(204);
    expect(await state(id)).toBe('running');
    expect((await server.api('DELETE', `/sandboxes/${id}`)).status).toBe(204);
  });

  it("answers nothing of a secure sandbox's envd without its token, health included", async () => {
    const { id, token } = secure;
    const route = envdRoute(id);
    const requests = [
      ['GET /health HTTP/1.1', 'Host: x', ...route],
      ['GET /health?probe=1 HTTP/1.1', 'Host: x', ...route],
      ['GET /./health HTTP/1.1', 'Host: x', ...route],
      ['GET /x/../health HTTP/1.1', 'Host: x', ...route],
      ['GET /envs HTTP/1.1', 'Host: x', ...route],
      ['GET /metrics HTTP/1.1', 'Host: x', ...route],
      ['GET /files?path=/etc/hostname HTTP/1.1', 'Host: x', ...route],
      // Repeated tokens are joined by the front into one value that matches nothing.
      ['GET /health HTTP/1.1', 'Host: x', ...route, `X-Access-Token: ${token}`, `X-Access-Token: ${token}`],
      ['GET /health HTTP/1.1', `Host: ${ENVD_PORT}-${id}.${DOMAIN}`],
      [
        'GET /proxy/health HTTP/1.1',
        'Host: x',
        `x-agentenv-sandbox-id: ${id}`,
        `x-agentenv-target-port: ${ENVD_PORT}`,
      ],
    ];
    for (const head of requests) {
      const r = (await rawExchange(server.port, httpRequest(head))).responses[0]!;
      expect(r.status, head[0]).toBe(401);
      expect(JSON.parse(r.body), head[0]).toMatchObject({ code: 401 });
    }
    const health = await proxyFetch(server, id, ENVD_PORT, '/health', {
      headers: { 'x-access-token': token },
    });
    expect(health.status).toBe(204);
    // The SDK always sends the token: it keeps working, isRunning() included.
    expect(await secure.sbx.isRunning()).toBe(true);
    expect((await secure.sbx.commands.run('echo secured')).stdout).toBe('secured\n');
  });

  it('answers a request refused for its token once, even when its body is malformed', async () => {
    const { id, token } = secure;
    // Hidden in the body, with the token: an envd that ever read it as a request would take the upload.
    const path = '/tmp/after-refusal';
    const hidden = httpRequest(
      [`POST /files?path=${path} HTTP/1.1`, 'Host: envd', `X-Access-Token: ${token}`, 'Content-Length: 1'],
      'x',
    );
    const head = ['GET /health HTTP/1.1', 'Host: x', ...envdRoute(id), 'Transfer-Encoding: chunked'];
    // The proxy refuses these (401) before their bodies are read, unless the parser meets the bad chunk first
    // (400): either way, one answer and the connection closed.
    const malformed = {
      'chunk data longer than its size': `1\r\n${hidden}\r\n0\r\n\r\n`,
      'a chunk size that is not hex': `zz\r\n${hidden}\r\n0\r\n\r\n`,
      'a chunk size line without CR': `${hidden.length.toString(16)}\n${hidden}\r\n0\r\n\r\n`,
    };
    for (const [name, body] of Object.entries(malformed)) {
      const ex = await rawExchange(server.port, httpRequest(head, body), Number.POSITIVE_INFINITY);
      expect(ex.responses, name).toHaveLength(1);
      expect([400, 401], name).toContain(ex.responses[0]!.status);
      expect(JSON.parse(ex.responses[0]!.body), name).toMatchObject({ code: ex.responses[0]!.status });
      expect(ex.closed, name).toBe(true);
    }
    expect(await secure.sbx.files.exists(path)).toBe(false);
  });

  it('lets only the node run envd /init: refused by the proxy in every spelling, and by envd without the init key', async () => {
    const body = JSON.stringify({ envVars: { PWNED: 'yes' }, accessToken: 'attacker-token' });
    const post = (target: string, routeLines: string[], extra: string[] = []) =>
      httpRequest(
        [
          `POST ${target} HTTP/1.1`,
          'Host: x',
          ...routeLines,
          ...extra,
          'Content-Type: application/json',
          `Content-Length: ${body.length}`,
        ],
        body,
      );
    for (const sbx of [{ id: open.sandboxId, token: '' }, secure]) {
      const route = envdRoute(sbx.id);
      const tokenLine = sbx.token ? [`X-Access-Token: ${sbx.token}`] : [];
      const attempts = [
        post('/init', route),
        post('/init', route, tokenLine),
        post('/init?x=1', route, tokenLine),
        post('/./init', route, tokenLine),
        post('/a/../init', route, tokenLine),
        post('/%2e/init', route, tokenLine),
        post('/%2E%2E/init', route, tokenLine),
        post(
          '/proxy/init',
          [`x-agentenv-sandbox-id: ${sbx.id}`, `x-agentenv-target-port: ${ENVD_PORT}`],
          tokenLine,
        ),
        httpRequest(
          [
            `POST /init HTTP/1.1`,
            `Host: ${ENVD_PORT}-${sbx.id}.${DOMAIN}`,
            ...tokenLine,
            `Content-Length: ${body.length}`,
          ],
          body,
        ),
        httpRequest(['GET /init HTTP/1.1', 'Host: x', ...route, ...tokenLine]),
      ];
      for (const bytes of attempts) {
        const r = (await rawExchange(server.port, bytes)).responses[0]!;
        expect(r.status, bytes.split('\r\n')[0]).toBe(403);
        expect(JSON.parse(r.body)).toMatchObject({ code: 403 });
      }
    }

    // Straight to envd at the address the node uses (a local user of the host could): the init key is missing.
    for (const sbx of [{ id: open.sandboxId, token: '' }, secure]) {
      const url = `http://${envdAddress(sbx.id)}:${ENVD_PORT}/init`;
      const tries: Record<string, string>[] = [
        {},
        { 'x-aenv-init-key': 'f'.repeat(64) },
        ...(sbx.token ? [{ 'x-access-token': sbx.token }] : []),
      ];
      for (const headers of tries) {
        const r = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body,
        });
        expect(r.status, JSON.stringify(headers)).toBe(401);
      }
    }

    // Nothing changed: the open sandbox still needs no token, neither sandbox got the env var.
    expect((await open.commands.run('echo -n "[$PWNED]"')).stdout).toBe('[]');
    expect((await secure.sbx.commands.run('echo -n "[$PWNED]"')).stdout).toBe('[]');
    expect((await proxyFetch(server, open.sandboxId, ENVD_PORT, '/health')).status).toBe(204);
  });

  it('keeps the node able to /init envd across pause and resume', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    await sbx.commands.run('echo kept > /tmp/kept');
    await sbx.pause();
    await sbx.connect();
    expect((await sbx.commands.run('cat /tmp/kept')).stdout).toBe('kept\n');
    await sbx.kill();
  });

  it('caps signed URLs: an expiration beyond the cap is refused by the proxy and by envd', async () => {
    const { sbx, id } = secure;
    await sbx.files.write('/tmp/signed.txt', 'signed content');
    // The SDK's default: no expiration, accepted while the sandbox is younger than the cap (24 h by default).
    const plain = await sbx.downloadUrl('/tmp/signed.txt');
    for (let i = 0; i < 3; i++) expect(await (await fetch(plain)).text()).toBe('signed content');
    expect(
      await (await fetch(await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 600 }))).text(),
    ).toBe('signed content');

    const tooLong = await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 2 * 86400 });
    expect((await fetch(tooLong)).status).toBe(401);
    // Routed by header too, and straight to envd, which got the cap from the node's /init.
    const u = new URL(tooLong);
    const viaHeader = await proxyFetch(server, id, ENVD_PORT, `${u.pathname}${u.search}`);
    expect(viaHeader.status).toBe(401);
    const direct = await fetch(`http://${envdAddress(id)}:${ENVD_PORT}${u.pathname}${u.search}`);
    expect(direct.status).toBe(401);
    expect(((await direct.json()) as { message: string }).message).toMatch(/expiration/);
    const longUpload = await sbx.uploadUrl('/tmp/up.txt', { useSignatureExpiration: 7 * 86400 });
    const form = new FormData();
    form.append('file', new Blob(['x']), 'up.txt');
    expect((await fetch(longUpload, { method: 'POST', body: form })).status).toBe(401);
    expect(await sbx.files.exists('/tmp/up.txt')).toBe(false);
  });

  it('never forwards the platform API key to sandbox code, in any header, spelling or count', async () => {
    await open.files.write('/tmp/recorder.py', RECORDER);
    await open.commands.run(`python3 /tmp/recorder.py ${RECORDER_PORT} ${RECORDER_LOG}`, {
      background: true,
      timeoutMs: 0,
    });
    await eventually(
      async () => (await proxyFetch(server, open.sandboxId, RECORDER_PORT, '/ready')).status === 200,
      'the recorder to listen',
      100,
      100,
    );
    const key = server.apiKey;
    const route = [`e2b-sandbox-id: ${open.sandboxId}`, `e2b-sandbox-port: ${RECORDER_PORT}`];
    const variants: string[][] = [
      [`X-API-Key: ${key}`],
      [`X-API-Key: ${key}`, `x-api-key: ${key}`],
      [`X-Api-Key: ${key}`, `X-API-KEY: other`],
      [`x-api-key: ${key}, ${key}`],
      [`Authorization: Bearer ${key}`],
      [`Authorization: Basic Zm9vOg==`, `Authorization: Bearer ${key}`],
      [`Cookie: session=${key}`],
      [`Cookie: a=1`, `Cookie: b=${key}`],
      [`X-Forwarded-Token: prefix-${key}-suffix`],
      [`E2B-Traffic-Access-Token: ${'0'.repeat(64)}`, `X-Access-Token: ${secure.token}`],
    ];
    for (const [i, lines] of variants.entries()) {
      const r = (
        await rawExchange(
          server.port,
          httpRequest([`GET /key-${i} HTTP/1.1`, 'Host: x', ...route, 'X-Own-Header: kept', ...lines]),
        )
      ).responses[0]!;
      expect(r.status).toBe(200);
      const seen = JSON.parse(r.body) as Recorded;
      expect(seen.path).toBe(`/key-${i}`);
      expect(
        seen.headers.filter(([, v]) => v.includes(key)),
        lines.join(' | '),
      ).toEqual([]);
      expect(seen.headers).toContainEqual(['x-own-header', 'kept']);
      // The proxy's own credentials stop there too.
      const names = seen.headers.map(([k]) => k.toLowerCase());
      expect(names).not.toContain('e2b-traffic-access-token');
      expect(names).not.toContain('x-access-token');
    }
    // A sandbox app's own X-API-Key (not the platform's) is its business and passes.
    const own = (
      await rawExchange(
        server.port,
        httpRequest(['GET /own HTTP/1.1', 'Host: x', ...route, 'X-API-Key: my-app-key']),
      )
    ).responses[0]!;
    expect((JSON.parse(own.body) as Recorded).headers).toContainEqual(['x-api-key', 'my-app-key']);
    // In the URL the key cannot be removed without changing the request: it is refused.
    const inQuery = (
      await rawExchange(server.port, httpRequest([`GET /q?api_key=${key} HTTP/1.1`, 'Host: x', ...route]))
    ).responses[0]!;
    expect(inQuery.status).toBe(400);
    expect(JSON.parse(inQuery.body)).toMatchObject({ code: 400 });
    const log = (await open.commands.run(`cat ${RECORDER_LOG}`)).stdout;
    expect(log).not.toContain(key);
  });
});
