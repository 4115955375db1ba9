// sniff() on a plain stream fed chunk by chunk: split and truncated ClientHellos, HTTP heads, fuzzed input.
import { randomBytes } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import { connect as tlsConnect } from 'node:tls';
import { beforeAll, describe, expect, it } from 'vitest';
import { sniff } from './sniff.js';

let hello: Buffer;

/** The ClientHello a real TLS client sends. */
function captureHello(servername: string): Promise<Buffer> {
  return new Promise((resolve) => {
    const server = createServer((s) =>
      s.once('data', (b: Buffer) => {
        resolve(b);
        s.destroy();
        server.close();
      }),
    );
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      tlsConnect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false }).on(
        'error',
        () => undefined,
      );
    });
  });
}

/** Feeds `chunks` one per tick, then ends (or not); resolves with the verdict and what is left to read. */
async function feed(chunks: Buffer[], end = true) {
  const s = new PassThrough();
  const verdict = sniff(s as unknown as Socket, 2000);
  for (const c of chunks) {
    s.write(c);
    await new Promise((r) => setImmediate(r));
  }
  if (end) s.end();
  const result = await verdict;
  const rest: Buffer[] = [];
  s.on('data', (b: Buffer) => rest.push(b));
  s.resume();
  await new Promise((r) => setImmediate(r));
  return { result, rest: Buffer.concat(rest) };
}

const bytewise = (b: Buffer) => [...b].map((x) => Buffer.from([x]));

describe('sniff', () => {
  beforeAll(async () => {
    hello = await captureHello('API.Example.test');
  });

  it('reads the SNI of a ClientHello split into single bytes, and gives every byte back', async () => {
    const { result, rest } = await feed(bytewise(hello), false);
    expect(result).toEqual({ kind: 'tls', name: 'api.example.test' });
    expect(rest.equals(hello)).toBe(true);
  });

  it('reads the Host of a split HTTP head, and gives the bytes back', async () => {
    const req = Buffer.from('GET / HTTP/1.1\r\nHost: a.test\r\n\r\nbody');
    const { result, rest } = await feed([req.subarray(0, 5), req.subarray(5, 20), req.subarray(20)], false);
    expect(result).toEqual({ kind: 'http', name: 'a.test' });
    expect(rest.toString()).toBe(req.toString());
  });

  it('refuses truncated hellos, heads and other protocols once the stream ends', async () => {
    expect((await feed([hello.subarray(0, 40)])).result.kind).toBe('refused');
    expect((await feed([Buffer.from('GET / HTTP/1.1\r\nHost: a')])).result.kind).toBe('refused');
    expect((await feed([Buffer.from('SSH-2.0-OpenSSH_9\r\n')])).result).toMatchObject({
      kind: 'refused',
      http: false,
    });
    expect((await feed([])).result.kind).toBe('refused');
  });

  it('never throws or hangs on fuzzed ClientHellos (flipped bytes, random tails)', async () => {
    for (let i = 0; i < 300; i++) {
      const mutated = Buffer.from(hello);
      for (let k = 0; k < 1 + (i % 4); k++)
        mutated[(i * 7919 + k * 104729) % mutated.length] = randomBytes(1)[0]!;
      const input = i % 3 === 0 ? Buffer.concat([Buffer.from([0x16]), randomBytes(i)]) : mutated;
      const { result } = await feed([input]);
      expect(['tls', 'refused']).toContain(result.kind);
      if (result.kind === 'tls') expect(result.name).toMatch(/^[a-z0-9_.-]+$/);
    }
  });
});
