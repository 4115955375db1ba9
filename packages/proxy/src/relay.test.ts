import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import {
  forwardedHeaders,
  relayRequest,
  RelayResponseTooLarge,
  RelayTimeout,
  RelayUpstreamError,
  type RelayOptions,
} from './relay.js';

const BIG = 8 * 1024 * 1024;

function listen(server: Server): Promise<number> {
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
}

/** A real upstream: echoes, streams, stalls and answers large, by path. */
function upstreamServer(seen: { streamClosed: boolean }): Server {
  return createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      switch (req.url) {
        case '/echo': {
          const body = JSON.stringify({
            method: req.method,
            headers: req.headers,
            body: Buffer.concat(chunks).toString(),
          });
          res.writeHead(200, [
            'content-type',
            'application/json',
            'content-length',
            String(Buffer.byteLength(body)),
            'connection',
            'x-hop',
            'x-hop',
            'secret',
            'set-cookie',
            'a=1',
            'set-cookie',
            'b=2',
          ]);
          res.end(body);
          return;
        }
        case '/big': {
          res.writeHead(200, { 'content-type': 'application/octet-stream' });
          let sent = 0;
          const more = () => {
            while (sent < BIG) {
              const n = Math.min(64 * 1024, BIG - sent);
              sent += n;
              if (!res.write(Buffer.alloc(n, sent % 251))) return void res.once('drain', more);
            }
            res.end();
          };
          more();
          return;
        }
        case '/stream': {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: first\n\n');
          const t = setInterval(() => res.write('data: tick\n\n'), 20);
          res.on('close', () => {
            clearInterval(t);
            seen.streamClosed = true;
          });
          return;
        }
        case '/head-first': {
          // A stream's head alone, its body much later: the client must see the head at once.
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.flushHeaders();
          const t = setTimeout(() => res.end('data: late\n\n'), 1_000);
          res.on('close', () => clearTimeout(t));
          return;
        }
        case '/stall':
          return; // never answers
        default:
          res.writeHead(404).end();
      }
    });
  });
}

/** Relays every request to `origin`; the test's options by path; a rejection answered with its class name. */
function frontServer(origin: () => string, agent: Agent): Server {
  return createServer((req: IncomingMessage, res: ServerResponse) => {
    const opts: RelayOptions = { dispatcher: agent };
    if (req.url === '/stall') opts.timeoutMs = 200;
    if (req.url?.startsWith('/buffered')) {
      opts.buffer = {
        maxBytes: req.url === '/buffered-small' ? 100 : 64 * 1024,
        onAnswer: async (a) => {
          await new Promise((r) => setTimeout(r, 10));
          a.headers['x-seen-status'] = String(a.status);
          a.headers['x-seen-bytes'] = String(a.body.length);
        },
      };
    }
    const path = req.url?.startsWith('/buffered') ? '/echo' : (req.url ?? '/');
    relayRequest(req, res, { origin: origin(), path, headers: forwardedHeaders(req) }, opts).catch(
      (e: unknown) => {
        const name =
          e instanceof RelayTimeout
            ? 'RelayTimeout'
            : e instanceof RelayResponseTooLarge
              ? 'RelayResponseTooLarge'
              : e instanceof RelayUpstreamError
                ? 'RelayUpstreamError'
                : 'other';
        if (res.headersSent) res.destroy();
        else res.writeHead(502, { 'x-error': name }).end();
      },
    );
  });
}

function get(
  port: number,
  path: string,
  body?: string,
): Promise<{ status: number; headers: IncomingMessage['headers']; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', port, path, method: body ? 'POST' : 'GET' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }),
      );
      res.on('error', reject);
    });
    r.on('error', reject);
    r.end(body);
  });
}

describe('relayRequest', () => {
  const seen = { streamClosed: false };
  const agent = new Agent({ connect: { timeout: 2_000 } });
  let upstream: Server;
  let front: Server;
  let origin = '';
  let frontPort = 0;

  beforeAll(async () => {
    upstream = upstreamServer(seen);
    origin = `http://127.0.0.1:${await listen(upstream)}`;
    front = frontServer(() => origin, agent);
    frontPort = await listen(front);
  });
  afterAll(async () => {
    front.closeAllConnections();
    upstream.closeAllConnections();
    await new Promise((r) => front.close(r));
    await new Promise((r) => upstream.close(r));
    await agent.close();
  });

  it('relays the request body and the answer, without hop-by-hop fields, repeated fields kept', async () => {
    const r = await get(frontPort, '/echo', 'hello');
    expect(r.status).toBe(200);
    const echoed = JSON.parse(r.body.toString()) as {
      method: string;
      body: string;
      headers: Record<string, string>;
    };
    expect(echoed).toMatchObject({ method: 'POST', body: 'hello' });
    expect(echoed.headers['x-forwarded-method']).toBe('POST');
    expect(r.headers['x-hop']).toBeUndefined();
    expect(r.headers['set-cookie']).toEqual(['a=1', 'b=2']);
  });

  it('streams a large answer whole (with backpressure)', async () => {
    const r = await get(frontPort, '/big');
    expect(r.body.length).toBe(BIG);
    expect(r.body[64 * 1024 - 1]).toBe((64 * 1024) % 251);
    expect(r.body[BIG - 1]).toBe(BIG % 251);
  });

  it('sends a stream’s head at once, before any of its body', async () => {
    const started = performance.now();
    const headAt = await new Promise<number>((resolve, reject) => {
      const r = request({ host: '127.0.0.1', port: frontPort, path: '/head-first' }, (res) => {
        resolve(performance.now() - started);
        res.resume();
      });
      r.on('error', reject);
      r.end();
    });
    expect(headAt).toBeLessThan(800);
  });

  it('hands a buffered answer to onAnswer before it is sent, with its own Content-Length', async () => {
    const r = await get(frontPort, '/buffered', 'x');
    expect(r.status).toBe(200);
    expect(r.headers['x-seen-status']).toBe('200');
    expect(Number(r.headers['x-seen-bytes'])).toBe(r.body.length);
    expect(r.headers['content-length']).toBe(String(r.body.length));
  });

  it('fails a buffered answer over its bound with nothing sent', async () => {
    const r = await get(frontPort, '/buffered-small', 'x');
    expect(r.status).toBe(502);
    expect(r.headers['x-error']).toBe('RelayResponseTooLarge');
  });

  it('times out an answer that does not come', async () => {
    const r = await get(frontPort, '/stall');
    expect(r.headers['x-error']).toBe('RelayTimeout');
  });

  it('says the upstream is unavailable when it cannot be reached', async () => {
    const was = origin;
    const dead = createServer();
    const port = await listen(dead);
    await new Promise((r) => dead.close(r));
    origin = `http://127.0.0.1:${port}`;
    try {
      const r = await get(frontPort, '/echo');
      expect(r.headers['x-error']).toBe('RelayUpstreamError');
    } finally {
      origin = was;
    }
  });

  it('ends the upstream exchange when the client goes away mid-stream', async () => {
    seen.streamClosed = false;
    await new Promise<void>((resolve, reject) => {
      const r = request({ host: '127.0.0.1', port: frontPort, path: '/stream' }, (res) => {
        res.once('data', () => {
          r.destroy();
          resolve();
        });
      });
      r.on('error', () => undefined);
      r.once('response', (res) => res.on('error', () => undefined));
      setTimeout(() => reject(new Error('no first event')), 5_000);
      r.end();
    });
    for (let i = 0; i < 100 && !seen.streamClosed; i++) await new Promise((r) => setTimeout(r, 20));
    expect(seen.streamClosed).toBe(true);
  });
});
