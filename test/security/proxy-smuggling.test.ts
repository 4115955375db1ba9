// Request smuggling through the data-plane proxy (docs/security.md, "Request smuggling"): exact bytes on raw
// sockets against a real `aenv server`. The proof that a hidden request never reaches envd is a marker file:
// each smuggled request is an envd upload (`POST /files?path=<marker>`) that would create it, and a positive
// control shows the same upload does create its file when the proxy forwards it as a request.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  ENVD_PORT,
  REPO,
  eventually,
  proxyFetch,
  startServer,
  useSdk,
  type TestServer,
} from '../e2e/harness.js';
import { chunked, httpRequest, rawExchange, sendThenHangUp, type RawResponse } from './raw-http.js';

const RECORDER = readFileSync(join(REPO, 'test', 'security', 'fixtures', 'recorder.py'), 'utf8');
const RECORDER_PORT = 8081;
const RECORDER_LOG = '/tmp/recorder.log';
/** Read answers until the server closes the connection (which these cases must do). */
const UNTIL_CLOSED = Number.POSITIVE_INFINITY;

/** A complete envd upload request: if envd ever reads it, `path` exists afterwards. */
function upload(path: string, body = 'smuggled'): string {
  return httpRequest(
    [
      `POST /files?path=${encodeURIComponent(path)} HTTP/1.1`,
      'Host: envd',
      'Content-Type: application/octet-stream',
      `Content-Length: ${Buffer.byteLength(body)}`,
    ],
    body,
  );
}

function expectShape(r: RawResponse, status: number): void {
  expect(r.status).toBe(status);
  const body = JSON.parse(r.body) as { code: unknown; message: unknown };
  expect(body.code).toBe(status);
  expect(typeof body.message).toBe('string');
}

describe('no request smuggling through the data-plane proxy', () => {
  let server: TestServer;
  let sbx: Sandbox;
  let routeEnvd: string[];
  let routeRecorder: string[];
  let n = 0;
  const marker = () => `/tmp/smuggled-${++n}`;

  const recorded = async (): Promise<{ method: string; path: string }[]> => {
    const text = (await sbx.commands.run(`cat ${RECORDER_LOG} 2>/dev/null || true`)).stdout;
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { method: string; path: string });
  };

  beforeAll(async () => {
    server = await startServer({ name: 'sprx1' });
    useSdk(server);
    // Not secure, so its envd takes uploads without a token and a smuggled one would land: v1's default (every
    // v2 create, the SDK's, is secured).
    const created = await server.api('POST', '/sandboxes', { templateID: 'base', timeout: 600 });
    expect(created.status).toBe(201);
    expect(created.body.envdAccessToken).toBeUndefined();
    sbx = await Sandbox.connect(created.body.sandboxID as string, { timeoutMs: 600_000 });
    routeEnvd = [`e2b-sandbox-id: ${sbx.sandboxId}`, `e2b-sandbox-port: ${ENVD_PORT}`];
    routeRecorder = [`e2b-sandbox-id: ${sbx.sandboxId}`, `e2b-sandbox-port: ${RECORDER_PORT}`];
    await sbx.files.write('/tmp/recorder.py', RECORDER);
    await sbx.commands.run(`python3 /tmp/recorder.py ${RECORDER_PORT} ${RECORDER_LOG}`, {
      background: true,
      timeoutMs: 0,
    });
    await eventually(
      async () => (await proxyFetch(server, sbx.sandboxId, RECORDER_PORT, '/ready')).status === 200,
      'the recorder to listen',
      100,
      100,
    );
  });
  afterAll(async () => {
    if (server) expect(await server.shutdown()).toBe(0);
  });

  it('control: an upload the proxy forwards as a request creates its marker', async () => {
    const path = marker();
    const ex = await rawExchange(
      server.port,
      upload(path).replace('Host: envd', `Host: x\r\n${routeEnvd.join('\r\n')}`),
    );
    expect(ex.responses[0]!.status).toBe(200);
    expect(await sbx.files.exists(path)).toBe(true);
  });

  it('forwards a body on GET, DELETE and OPTIONS framed, so a request hidden in it is never read by envd', async () => {
    const markers: string[] = [];
    const attempts: [string, string, number][] = [
      ['GET /health', 'chunked', 204],
      ['DELETE /files?path=/tmp/x', 'chunked', 405],
      ['OPTIONS /', 'chunked', 204],
      ['GET /health', 'length', 204],
      ['GET /envs', 'chunked', 200],
    ];
    for (const [line, framing, status] of attempts) {
      const path = marker();
      markers.push(path);
      const hidden = upload(path);
      const framingHead =
        framing === 'chunked' ? 'Transfer-Encoding: chunked' : `Content-Length: ${Buffer.byteLength(hidden)}`;
      const bytes = httpRequest(
        [`${line} HTTP/1.1`, 'Host: x', ...routeEnvd, framingHead],
        framing === 'chunked' ? chunked(hidden) : hidden,
      );
      const ex = await rawExchange(server.port, bytes);
      expect(ex.responses.map((r) => r.status)).toEqual([status]);
    }
    // Whatever sat on the proxy's connections to envd would have been read by now: they serve these too.
    for (let i = 0; i < 4; i++)
      expect((await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/health')).status).toBe(204);
    for (const path of markers) expect(await sbx.files.exists(path), path).toBe(false);
  });

  it("never hands one client the answer to another client's hidden request", async () => {
    for (let i = 0; i < 3; i++) {
      const attack = httpRequest(
        ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: chunked'],
        chunked(httpRequest(['GET /envs HTTP/1.1', 'Host: envd'])),
      );
      expect((await rawExchange(server.port, attack)).responses[0]!.status).toBe(204);
      // A victim asking for /health gets /health's empty 204, never the hidden /envs' JSON.
      const victim = await rawExchange(
        server.port,
        httpRequest(['GET /health HTTP/1.1', 'Host: x', ...routeEnvd]),
      );
      expect(victim.responses[0]).toMatchObject({ status: 204, body: '' });
    }
  });

  it('answers pipelined requests one by one, in order, each as its own request', async () => {
    const path = marker();
    const bytes =
      httpRequest(
        ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: chunked'],
        chunked(upload(path)),
      ) +
      httpRequest(['GET /envs HTTP/1.1', 'Host: x', ...routeEnvd]) +
      httpRequest([`GET /pipelined-3 HTTP/1.1`, 'Host: x', ...routeRecorder]);
    const ex = await rawExchange(server.port, bytes, 3);
    expect(ex.responses.map((r) => r.status)).toEqual([204, 200, 200]);
    expect(JSON.parse(ex.responses[1]!.body)).toMatchObject({ E2B_SANDBOX: 'true' });
    expect(JSON.parse(ex.responses[2]!.body)).toMatchObject({ method: 'GET', path: '/pipelined-3' });
    expect(await sbx.files.exists(path)).toBe(false);
  });

  it('refuses ambiguous framing with 400 {code, message} and closes, before anything reaches the sandbox', async () => {
    const cases: Record<string, (hidden: string) => string> = {
      'Content-Length and Transfer-Encoding': (h) =>
        httpRequest(
          [
            'POST /files HTTP/1.1',
            'Host: x',
            ...routeEnvd,
            'Content-Length: 5',
            'Transfer-Encoding: chunked',
          ],
          `0\r\n\r\n${h}`,
        ),
      'Transfer-Encoding then Content-Length': (h) =>
        httpRequest(
          [
            'POST /files HTTP/1.1',
            'Host: x',
            ...routeEnvd,
            'Transfer-Encoding: chunked',
            'Content-Length: 5',
          ],
          `0\r\n\r\n${h}`,
        ),
      'two equal Content-Length': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Content-Length: 0', 'Content-Length: 0'],
          h,
        ),
      'two different Content-Length': (h) =>
        httpRequest(
          [
            'GET /health HTTP/1.1',
            'Host: x',
            ...routeEnvd,
            'Content-Length: 0',
            `Content-Length: ${h.length}`,
          ],
          h,
        ),
      'a Content-Length list': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, `Content-Length: ${h.length}, ${h.length}`],
          h,
        ),
      'obs-fold Transfer-Encoding': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding:', ' chunked'],
          chunked(h),
        ),
      'obs-fold in another header': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'X-A: b', ' c', 'Content-Length: 0'],
          h,
        ),
      'space before the colon': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding : chunked'],
          chunked(h),
        ),
      'two Transfer-Encoding': (h) =>
        httpRequest(
          [
            'GET /health HTTP/1.1',
            'Host: x',
            ...routeEnvd,
            'Transfer-Encoding: chunked',
            'Transfer-Encoding: chunked',
          ],
          chunked(h),
        ),
      'a coding after chunked': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: chunked, identity'],
          chunked(h),
        ),
      'an unknown coding': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: xchunked'],
          chunked(h),
        ),
      'a chunk size that is not hex': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: chunked'],
          `zz\r\n${h}\r\n0\r\n\r\n`,
        ),
      'a chunk size line without CR': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: chunked'],
          `${h.length.toString(16)}\n${h}\r\n0\r\n\r\n`,
        ),
      'chunk data longer than its size': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: chunked'],
          `1\r\n${h}\r\n0\r\n\r\n`,
        ),
      'an overflowing chunk size': (h) =>
        httpRequest(
          ['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: chunked'],
          `ffffffffffffffffff\r\n${h}\r\n0\r\n\r\n`,
        ),
      'bare LF line ends': (h) =>
        `GET /health HTTP/1.1\nHost: x\n${routeEnvd.join('\n')}\nContent-Length: 0\n\n${h}`,
    };
    const markers: string[] = [];
    for (const [name, make] of Object.entries(cases)) {
      const path = marker();
      markers.push(path);
      const ex = await rawExchange(server.port, make(upload(path)), UNTIL_CLOSED);
      expect(ex.responses.length, name).toBe(1);
      expectShape(ex.responses[0]!, 400);
      expect(ex.closed, name).toBe(true);
    }
    // One the HTTP parser accepts (RFC 9112 allows codings before chunked), refused by the proxy itself.
    const path = marker();
    markers.push(path);
    const gz = await rawExchange(
      server.port,
      httpRequest(
        ['POST /files HTTP/1.1', 'Host: x', ...routeEnvd, 'Transfer-Encoding: gzip, chunked'],
        chunked(upload(path)),
      ),
    );
    expectShape(gz.responses[0]!, 400);
    for (let i = 0; i < 2; i++)
      expect((await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/health')).status).toBe(204);
    for (const p of markers) expect(await sbx.files.exists(p), p).toBe(false);
  });

  it('does not read what follows a refused upgrade as a request, on envd or on a user port', async () => {
    const ws = [
      'Upgrade: websocket',
      'Connection: Upgrade',
      'Sec-WebSocket-Version: 13',
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
    ];
    // The recorder answers 200 instead of 101 and keeps reading its connection like any simple service would.
    const tail = httpRequest(['GET /smuggled-after-upgrade HTTP/1.1', 'Host: x']);
    const toRecorder = await rawExchange(
      server.port,
      httpRequest(['GET /ws HTTP/1.1', 'Host: x', ...routeRecorder, ...ws]) + tail,
      UNTIL_CLOSED,
    );
    expect(toRecorder.responses.map((r) => r.status)).toEqual([200]);
    expect(toRecorder.closed).toBe(true);

    const path = marker();
    const toEnvd = await rawExchange(
      server.port,
      httpRequest(['GET /health HTTP/1.1', 'Host: x', ...routeEnvd, ...ws]) + upload(path),
      UNTIL_CLOSED,
    );
    expect(toEnvd.responses.map((r) => r.status)).toEqual([204]);
    expect(toEnvd.closed).toBe(true);

    // An upgrade that carries a body, or is not a WebSocket, is refused outright.
    const withBody = await rawExchange(
      server.port,
      httpRequest(
        ['GET /ws HTTP/1.1', 'Host: x', ...routeRecorder, ...ws, `Content-Length: ${tail.length}`],
        tail,
      ),
    );
    expectShape(withBody.responses[0]!, 400);
    const h2c = await rawExchange(
      server.port,
      httpRequest([
        'GET /ws HTTP/1.1',
        'Host: x',
        ...routeRecorder,
        'Upgrade: h2c',
        'Connection: Upgrade, HTTP2-Settings',
        'HTTP2-Settings: AAMAAABkAAQAAP__',
      ]) + tail,
    );
    expectShape(h2c.responses[0]!, 400);

    const seen = (await recorded()).map((r) => r.path);
    expect(seen).toContain('/ws');
    expect(seen).not.toContain('/smuggled-after-upgrade');
    expect(await sbx.files.exists(path)).toBe(false);
  });

  it('drops the upstream connection of a client that stops in the middle of its body', async () => {
    const path = marker();
    const hidden = upload(path);
    // The body claims more than is sent, and what is sent is a request: the upload is cut, never reused.
    await sendThenHangUp(
      server.port,
      httpRequest(
        [
          'POST /files?path=/tmp/cut-short HTTP/1.1',
          'Host: x',
          ...routeEnvd,
          'Content-Type: application/octet-stream',
          `Content-Length: ${hidden.length + 100}`,
        ],
        hidden,
      ),
    );
    for (let i = 0; i < 4; i++)
      expect((await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/health')).status).toBe(204);
    expect(await sbx.files.exists(path)).toBe(false);
    // The SDK still works end to end through the same proxy.
    expect((await sbx.commands.run('echo still fine')).stdout).toBe('still fine\n');
  });
});
