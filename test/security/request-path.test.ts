// Class "one request must never take the server down" (docs/security.md, "Hostile API callers"): requests an
// attacker crafts byte by byte against the upload links, the framework's own error paths and the HTTP parser
// all get a 4xx in the documented shape, and the node keeps serving; a failure nobody handled is logged with
// its request id and the process keeps running.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startServer, type TestServer } from '../e2e/harness.js';
import { expectErrorShape, expectHealthy, httpRequest, rawExchange, storedState } from './lib.js';

const HASH = 'a'.repeat(64);

describe('one request never takes the server down', () => {
  let server: TestServer;
  let key: string;

  beforeAll(async () => {
    server = await startServer({ name: 'sreq1', toml: '[api]\nbody_limit_bytes = 65536' });
    key = `X-API-Key: ${server.apiKey}`;
  });
  afterAll(async () => {
    if (server) expect(await server.shutdown()).toBe(0);
  });

  it.each([
    ['GET with a lone %', 'GET /templates/%/files/x/upload HTTP/1.1', [], 405],
    ['PUT with a lone %', 'PUT /templates/%/files/x/upload HTTP/1.1', [], 400],
    ['truncated UTF-8 escape', `PUT /templates/%E0%A4%A/files/${HASH}/upload?token=1.ab HTTP/1.1`, [], 400],
    ['overlong UTF-8 escape', `PUT /templates/%C0%AF/files/${HASH}/upload HTTP/1.1`, [], 400],
    ['encoded dot segments', `PUT /templates/%2e%2e/files/${HASH}/upload?token=x HTTP/1.1`, [], 403],
    ['a hash that is no hash', 'PUT /templates/abc/files/..%2F..%2Fetc/upload HTTP/1.1', [], 400],
    ['a malformed token', `PUT /templates/abc/files/${HASH}/upload?token=%zz%00 HTTP/1.1`, [], 403],
    [
      'a forged token',
      `PUT /templates/abc/files/${HASH}/upload?token=99999999999.${'f'.repeat(64)} HTTP/1.1`,
      [],
      403,
    ],
    ['DELETE', `DELETE /templates/%/files/${HASH}/upload HTTP/1.1`, [], 405],
    [
      'a WebSocket upgrade',
      'GET /templates/%/files/x/upload HTTP/1.1',
      ['Connection: Upgrade', 'Upgrade: websocket'],
      400,
    ],
  ])('upload link, %s: %s', async (_what, line, headers, status) => {
    const before = await storedState(server);
    const r = await rawExchange(server.port, httpRequest(line, headers as string[]));
    expectErrorShape(r, status);
    await expectHealthy(server);
    expect(await storedState(server)).toEqual(before);
  });

  it.each([
    ['bad percent-encoding in a path parameter', ['GET /sandboxes/%zz HTTP/1.1', 'key'], 400],
    ['a truncated UTF-8 escape in a template id', ['GET /templates/%E0%A4%A HTTP/1.1', 'key'], 400],
    ['bad percent-encoding, no key', ['DELETE /sandboxes/%E0%A4%A HTTP/1.1'], 400],
    ['an over-long path parameter', [`GET /templates/aliases/${'a'.repeat(600)} HTTP/1.1`, 'key'], 414],
    [
      'malformed JSON',
      ['POST /v2/sandboxes HTTP/1.1', 'key', 'Content-Type: application/json', 'BODY{"templateID":'],
      400,
    ],
    [
      'an unsupported content type',
      ['POST /v2/sandboxes HTTP/1.1', 'key', 'Content-Type: text/xml', 'BODY<a/>'],
      415,
    ],
    [
      'a body over the limit',
      [
        'POST /v2/sandboxes HTTP/1.1',
        'key',
        'Content-Type: application/json',
        `BODY{"x":"${'y'.repeat(70_000)}"}`,
      ],
      413,
    ],
    [
      'a Content-Length that is no number',
      ['POST /v2/sandboxes HTTP/1.1', 'key', 'Content-Length: abc', 'BODY{}'],
      400,
    ],
    [
      'two different Content-Length headers',
      ['POST /v2/sandboxes HTTP/1.1', 'key', 'Content-Length: 2', 'Content-Length: 3', 'BODY{}'],
      400,
    ],
    [
      'Content-Length with chunked encoding',
      [
        'POST /v2/sandboxes HTTP/1.1',
        'key',
        'Content-Length: 5',
        'Transfer-Encoding: chunked',
        'BODY0\r\n\r\n',
      ],
      400,
    ],
    [
      'headers over the size limit',
      ['GET /v2/sandboxes HTTP/1.1', 'key', `X-Filler: ${'z'.repeat(20_000)}`],
      431,
    ],
    ['a control character in a header name', ['GET /v2/sandboxes HTTP/1.1', 'key', 'X-B\x01d: 1'], 400],
    ['a request line that is no request line', ['NONSENSE'], 400],
    ['an unknown method', ['BREW /v2/sandboxes HTTP/1.1', 'key'], 400],
  ])('framework and parser errors, %s', async (_what, parts, status) => {
    const [line, ...rest] = parts as string[];
    const body = rest.find((p) => p.startsWith('BODY'))?.slice(4) ?? '';
    const headers = rest.filter((p) => !p.startsWith('BODY')).map((p) => (p === 'key' ? key : p));
    const bytes =
      line === 'NONSENSE'
        ? 'NONSENSE\r\n\r\n'
        : [line, 'Host: 127.0.0.1', ...headers, 'Connection: close'].join('\r\n') +
          (body && !headers.some((h) => /^content-length:/i.test(h))
            ? `\r\nContent-Length: ${Buffer.byteLength(body)}`
            : '') +
          '\r\n\r\n' +
          body;
    const before = await storedState(server);
    const r = await rawExchange(server.port, bytes);
    expectErrorShape(r, status);
    await expectHealthy(server);
    expect(await storedState(server)).toEqual(before);
  });

  it("names each answer by a request id of its own, never the client's", async () => {
    const r = await rawExchange(
      server.port,
      httpRequest('GET /v2/sandboxes HTTP/1.1', [key, 'X-Request-Id: forged"\\id', 'X-Request-Id: second']),
    );
    expect(r.status).toBe(200);
    expect(r.headers['x-request-id']).toMatch(/^[0-9a-f]{16}$/);
    const again = await rawExchange(server.port, httpRequest('GET /nope HTTP/1.1', [key]));
    expectErrorShape(again, 404);
    expect(again.headers['x-request-id']).toMatch(/^[0-9a-f]{16}$/);
    expect(again.headers['x-request-id']).not.toBe(r.headers['x-request-id']);
  });
});

describe('a failure nobody handled', () => {
  let server: TestServer;

  beforeAll(async () => {
    // Every request of this node leaves an unhandled rejection and an uncaught exception behind
    // (util/crash-point.ts: unhandledFaultPoint). Without the guard, the first health check ends the process.
    server = await startServer({
      name: 'sreq2',
      env: { AENV_FAULT_REJECT_AT: 'request', AENV_FAULT_THROW_AT: 'request' },
    });
  });
  afterAll(async () => {
    if (server) expect(await server.shutdown()).toBe(0);
  });

  it('is logged with the request id of the request it belongs to, and the server keeps serving', async () => {
    const r = await rawExchange(
      server.port,
      httpRequest('GET /v2/sandboxes HTTP/1.1', [`X-API-Key: ${server.apiKey}`]),
    );
    expect(r.status).toBe(200);
    const id = r.headers['x-request-id']!;
    expect(id).toMatch(/^[0-9a-f]{16}$/);
    const lines = () =>
      server
        .logs()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { msg?: string; requestId?: string; err?: { message?: string } });
    const logged = (msg: string) => lines().some((l) => l.requestId === id && l.msg?.startsWith(msg));
    await eventually(() => logged('unhandled promise rejection'), 'the unhandled rejection to be logged');
    await eventually(() => logged('uncaught exception'), 'the uncaught exception to be logged');
    expect(lines().find((l) => l.requestId === id && l.msg?.startsWith('unhandled'))?.err?.message).toBe(
      'unhandled rejection injected at request',
    );
    for (let i = 0; i < 5; i++) await expectHealthy(server);
    const listed = await server.api('GET', '/v2/sandboxes');
    expect(listed.status).toBe(200);
  });
});
