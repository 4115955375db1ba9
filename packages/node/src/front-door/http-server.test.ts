import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { createHttpServer, HEADERS_TIMEOUT_MS } from './http-server.js';
import { registerHealthRoutes } from '../api/routes/health.js';
import { registerNodeRoutes } from '../api/routes/nodes.js';
import { ServerMetrics } from '../observability/metrics.js';
import { HostMetricsSampler } from '../observability/host-metrics.js';
import { createLogger } from '../util/log.js';
import { ApiError } from '../api/errors.js';

const KEY = 'e2b_' + 'ab'.repeat(32);
const silent = new Writable({ write: (_c, _e, cb) => cb() });

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Sends a request byte for byte, so duplicate headers and odd inputs reach the server unchanged. */
function rawRequest(port: number, head: string[], body = ''): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', reject);
    sock.on('end', () => {
      const text = Buffer.concat(chunks).toString();
      const [headText, ...rest] = text.split('\r\n\r\n');
      const lines = headText!.split('\r\n');
      const status = Number(lines[0]!.split(' ')[1]);
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status, headers, body: rest.join('\r\n\r\n') });
    });
    const lines = [...head, 'Host: 127.0.0.1', 'Connection: close'];
    if (body) lines.push(`Content-Length: ${Buffer.byteLength(body)}`);
    sock.write(lines.join('\r\n') + '\r\n\r\n' + body);
  });
}

/** Sends `bytes` as they are, ends the sending side, and returns everything read until the server closes. */
function rawExchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', reject);
    sock.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    sock.end(bytes);
  });
}

describe('control-plane HTTP server', () => {
  const metrics = new ServerMetrics();
  const { app, server } = createHttpServer({
    apiKey: KEY,
    bodyLimitBytes: 1024,
    logger: createLogger('json', 'info', silent),
    metrics,
  });
  let port = 0;

  beforeAll(async () => {
    registerHealthRoutes(app, metrics.registry);
    registerNodeRoutes(app, {
      enabled: true,
      identity: {
        nodeId: 'node-a',
        clusterId: '00000000-0000-0000-0000-000000000000',
        serviceInstanceId: 'svc',
        version: '0.1.0',
        commit: 'abc',
        machineInfo: { cpuFamily: '6', cpuModel: '1', cpuModelName: 'x', cpuArchitecture: 'x86_64' },
      },
      host: new HostMetricsSampler(),
      counters: () => ({
        sandboxCount: 2,
        sandboxStartingCount: 1,
        sandboxPausedCount: 3,
        allocatedCPU: 4,
        allocatedMemoryBytes: 1024,
        pausedAllocatedCPU: 1,
        pausedAllocatedMemoryBytes: 512,
        createSuccesses: 5,
        createFails: 1,
      }),
    });
    app.post('/echo', async (req) => ({ got: req.body ?? null }));
    app.get('/boom', async () => {
      throw new ApiError(409, 'sandbox cannot be paused from creating state');
    });
    app.get('/internal', async () => {
      throw new Error('runc exec /var/lib/aenv/secret-path failed: permission denied');
    });
    app.get<{ Params: { id: string } }>('/things/:id', async (req) => ({ id: req.params.id }));
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
  });

  it('answers /health with 204 and /metrics with 200 without a key', async () => {
    expect((await rawRequest(port, ['GET /health HTTP/1.1'])).status).toBe(204);
    const m = await rawRequest(port, ['GET /metrics HTTP/1.1']);
    expect(m.status).toBe(200);
    expect(m.body).toContain('agentenv_http_request_duration_seconds');
  });

  it.each([
    ['no key', []],
    ['wrong key', ['X-API-Key: e2b_' + 'cd'.repeat(32)]],
    ['key with different length', ['X-API-Key: ' + KEY + 'x']],
    ['two keys', [`X-API-Key: ${KEY}`, `X-API-Key: ${KEY}`]],
    ['bearer token', [`Authorization: Bearer ${KEY}`]],
    ['admin token', [`X-Admin-Token: ${KEY}`]],
    ['team id', [`X-Team-ID: ${KEY}`]],
  ])('rejects %s with 401 and an empty body', async (_name, headers) => {
    for (const path of ['/nodes', '/no-such-route']) {
      const r = await rawRequest(port, [`GET ${path} HTTP/1.1`, ...headers]);
      expect(r.status).toBe(401);
      expect(r.body).toBe('');
    }
  });

  it('accepts the right key, case-insensitive header name', async () => {
    const r = await rawRequest(port, ['GET /nodes HTTP/1.1', `x-api-key: ${KEY}`]);
    expect(r.status).toBe(200);
    const nodes = JSON.parse(r.body);
    expect(nodes).toHaveLength(1);
    expect(nodes[0]).toMatchObject({ id: 'node-a', status: 'ready', sandboxCount: 2, createSuccesses: 5 });
    expect(nodes[0].metrics.cpuCount).toBeGreaterThan(0);
    expect(nodes[0].metrics.memoryTotalBytes).toBeGreaterThan(0);
    expect(r.headers['x-request-id']).toMatch(/^[0-9a-f]{16}$/);
  });

  it('answers an unknown route with a JSON 404', async () => {
    const r = await rawRequest(port, ['DELETE /nope HTTP/1.1', `X-API-Key: ${KEY}`]);
    expect(r.status).toBe(404);
    expect(JSON.parse(r.body)).toEqual({ code: 404, message: 'route not found: DELETE /nope' });
  });

  it('answers malformed JSON with 400 in the documented shape', async () => {
    const r = await rawRequest(
      port,
      ['POST /echo HTTP/1.1', `X-API-Key: ${KEY}`, 'Content-Type: application/json'],
      '{"a":',
    );
    expect(r.status).toBe(400);
    const body = JSON.parse(r.body);
    expect(body.code).toBe(400);
    expect(body.message).toMatch(/malformed JSON/);
  });

  it('treats an empty JSON body as no body', async () => {
    const r = await rawRequest(port, [
      'POST /echo HTTP/1.1',
      `X-API-Key: ${KEY}`,
      'Content-Type: application/json',
    ]);
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toEqual({ got: null });
  });

  it('limits body size with 413 in the documented shape', async () => {
    const r = await rawRequest(
      port,
      ['POST /echo HTTP/1.1', `X-API-Key: ${KEY}`, 'Content-Type: application/json'],
      JSON.stringify({ a: 'x'.repeat(2000) }),
    );
    expect(r.status).toBe(413);
    expect(JSON.parse(r.body).code).toBe(413);
  });

  it('answers an unsupported content type with 415', async () => {
    const r = await rawRequest(
      port,
      ['POST /echo HTTP/1.1', `X-API-Key: ${KEY}`, 'Content-Type: text/xml'],
      '<a/>',
    );
    expect(r.status).toBe(415);
    expect(JSON.parse(r.body).code).toBe(415);
  });

  it('maps ApiError to its status and body', async () => {
    const r = await rawRequest(port, ['GET /boom HTTP/1.1', `X-API-Key: ${KEY}`]);
    expect(r.status).toBe(409);
    expect(JSON.parse(r.body)).toEqual({
      code: 409,
      message: 'sandbox cannot be paused from creating state',
    });
  });

  it('answers an internal failure with its request id, never its message', async () => {
    const r = await rawRequest(port, ['GET /internal HTTP/1.1', `X-API-Key: ${KEY}`]);
    expect(r.status).toBe(500);
    const body = JSON.parse(r.body);
    expect(body.code).toBe(500);
    expect(body.message).toBe(
      `internal server error; request id ${r.headers['x-request-id']} (details are in the server log)`,
    );
    expect(r.body).not.toContain('/var/lib/aenv');
  });

  it.each([
    ['bad percent-encoding in a parameter', ['GET /things/%zz HTTP/1.1', `X-API-Key: ${KEY}`], 400],
    [
      'a parameter over the length limit',
      [`GET /things/${'a'.repeat(600)} HTTP/1.1`, `X-API-Key: ${KEY}`],
      414,
    ],
    ['headers over the size limit', ['GET /nodes HTTP/1.1', `X-Filler: ${'z'.repeat(20_000)}`], 431],
    ['an invalid header name', ['GET /nodes HTTP/1.1', 'Bad Header: 1'], 400],
    ['an unknown method', ['BREW /nodes HTTP/1.1'], 400],
  ])('answers %s in the documented shape', async (_name, head, status) => {
    const r = await rawRequest(port, head as string[]);
    expect(r.status).toBe(status);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(r.body)).toEqual({ code: status, message: expect.any(String) });
  });

  it('answers a request once: a malformed body after its answer closes the connection, with no second answer', async () => {
    const bodies = {
      'chunk data longer than its size': '1\r\nPOST /echo HTTP/1.1\r\n\r\n0\r\n\r\n',
      'a chunk size that is not hex': 'zz\r\nabc\r\n0\r\n\r\n',
      'a chunk size line without CR': '3\nabc\r\n0\r\n\r\n',
    };
    const send = (keyLine: string, body: string) =>
      rawExchange(
        port,
        `POST /echo HTTP/1.1\r\nHost: x\r\n${keyLine}Content-Type: application/json\r\n` +
          `Transfer-Encoding: chunked\r\n\r\n${body}`,
      );
    for (const [name, body] of Object.entries(bodies)) {
      // Refused for its key (401) before its body is read, unless the parser meets the bad chunk first (400).
      const refused = await send('', body).then((t) => t.match(/^HTTP\/1\.1 \d{3} /gm));
      expect(refused, name).toHaveLength(1);
      expect(['HTTP/1.1 400 ', 'HTTP/1.1 401 '], name).toContain(refused![0]);
      // Read before it is answered, the same body gets the one answer it is due: a 400.
      const read = await send(`X-API-Key: ${KEY}\r\n`, body);
      expect(read.match(/^HTTP\/1\.1 \d{3} /gm), name).toEqual(['HTTP/1.1 400 ']);
    }
  });

  it('does not take the request id from the client', async () => {
    const r = await rawRequest(port, ['GET /nodes HTTP/1.1', `X-API-Key: ${KEY}`, 'X-Request-Id: chosen']);
    expect(r.headers['x-request-id']).toMatch(/^[0-9a-f]{16}$/);
  });

  it('serves /nodes/{id}, filters by clusterID and 404s unknown nodes', async () => {
    const ok = await rawRequest(port, ['GET /nodes/node-a HTTP/1.1', `X-API-Key: ${KEY}`]);
    expect(ok.status).toBe(200);
    const detail = JSON.parse(ok.body);
    expect(detail.cachedBuilds).toEqual([]);
    expect(detail).not.toHaveProperty('sandboxStartingCount');
    const other = await rawRequest(port, [
      'GET /nodes?clusterID=11111111-1111-1111-1111-111111111111 HTTP/1.1',
      `X-API-Key: ${KEY}`,
    ]);
    expect(JSON.parse(other.body)).toEqual([]);
    const missing = await rawRequest(port, ['GET /nodes/node-b HTTP/1.1', `X-API-Key: ${KEY}`]);
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.body)).toEqual({ code: 404, message: 'node node-b not found' });
    const bad = await rawRequest(port, ['GET /nodes?clusterID=nope HTTP/1.1', `X-API-Key: ${KEY}`]);
    expect(bad.status).toBe(400);
  });
});

describe('data-plane entry', () => {
  it('answers a data plane that throws with a 500 naming the request id, and keeps serving', async () => {
    const { app, server } = createHttpServer({
      apiKey: KEY,
      bodyLimitBytes: 1024,
      logger: createLogger('json', 'info', silent),
      metrics: new ServerMetrics(),
      dataPlanes: [
        {
          claims: (req) => {
            if (req.url === '/claims-throws') throw new TypeError('classify: boom at /srv/x');
            return req.url === '/handle-throws';
          },
          handle: () => {
            throw new TypeError('handle: boom at /srv/y');
          },
          upgrade: () => {
            throw new TypeError('upgrade: boom');
          },
        },
      ],
    });
    registerHealthRoutes(app, new ServerMetrics().registry);
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (server.address() as AddressInfo).port;
    try {
      for (const path of ['/claims-throws', '/handle-throws']) {
        const r = await rawRequest(port, [`GET ${path} HTTP/1.1`]);
        expect(r.status).toBe(500);
        expect(JSON.parse(r.body)).toEqual({
          code: 500,
          message: `internal server error; request id ${r.headers['x-request-id']} (details are in the server log)`,
        });
      }
      const up = await rawRequest(port, [
        'GET /claims-throws HTTP/1.1',
        'Upgrade: websocket',
        'Connection: Upgrade',
      ]);
      expect(up.status).toBe(500);
      expect((await rawRequest(port, ['GET /health HTTP/1.1'])).status).toBe(204);
    } finally {
      await app.close();
    }
  });
});

describe('request time bounds', () => {
  const serve = async (headersTimeoutMs?: number) => {
    const { app, server } = createHttpServer({
      apiKey: KEY,
      bodyLimitBytes: 1024,
      logger: createLogger('json', 'info', silent),
      metrics: new ServerMetrics(),
      ...(headersTimeoutMs ? { headersTimeoutMs } : {}),
      dataPlanes: [
        {
          // An upload endpoint: counts the body's bytes as they stream in.
          claims: (req) => req.url === '/upload',
          handle: (req, res) => {
            let bytes = 0;
            req.on('data', (c: Buffer) => (bytes += c.length));
            req.on('end', () => {
              const body = String(bytes);
              res.writeHead(200, { connection: 'close', 'content-length': body.length }).end(body);
            });
          },
          upgrade: (_req, socket) => socket.destroy(),
        },
      ],
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    return { app, server, port: (server.address() as AddressInfo).port };
  };

  it('bounds the headers of a request, never its body (Node would cut any request at 300 s)', async () => {
    const { app, server } = await serve();
    try {
      expect(server.headersTimeout).toBe(HEADERS_TIMEOUT_MS);
      expect(server.requestTimeout).toBe(0);
    } finally {
      await app.close();
    }
  });

  it('cuts a client that trickles its headers with a 408, and takes a body that trickles for much longer', async () => {
    const { app, port } = await serve(300);
    try {
      const loris = await new Promise<string>((resolve, reject) => {
        const sock = connect(port, '127.0.0.1');
        const chunks: Buffer[] = [];
        sock.on('data', (c) => chunks.push(c));
        sock.on('error', reject);
        sock.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
        sock.write('POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\n');
        const drip = setInterval(() => sock.writable && sock.write('X-Drip: 1\r\n'), 100);
        sock.on('close', () => clearInterval(drip));
      });
      expect(loris).toMatch(/^HTTP\/1\.1 408 /);
      expect(loris.slice(loris.indexOf('\r\n\r\n') + 4)).toBe(
        JSON.stringify({ code: 408, message: 'the request was not received in time' }),
      );

      const chunk = 'x'.repeat(1000);
      const answer = await new Promise<string>((resolve, reject) => {
        const sock = connect(port, '127.0.0.1');
        const chunks: Buffer[] = [];
        sock.on('data', (c) => chunks.push(c));
        sock.on('error', reject);
        sock.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
        sock.write(`POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${8 * chunk.length}\r\n\r\n`);
        // Eight pieces 200 ms apart: the body takes five times the headers timeout, over several checks.
        let sent = 0;
        const drip = setInterval(() => {
          sock.write(chunk);
          if (++sent === 8) clearInterval(drip);
        }, 200);
      });
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
      expect(answer.slice(answer.indexOf('\r\n\r\n') + 4)).toBe(String(8 * chunk.length));
    } finally {
      await app.close();
    }
  });
});
