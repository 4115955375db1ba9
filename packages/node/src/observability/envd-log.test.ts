import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ENVD_LOG_PATH, fetchEnvdLog, parseEnvdLog } from './envd-log.js';

describe('parseEnvdLog', () => {
  const t = (ms: number) => new Date(ms).toISOString();

  it('keeps envd JSON lines with their time, level and fields; other lines take the time before them', () => {
    const raw = [
      JSON.stringify({ t: t(1000), level: 'info', msg: 'envd listening', port: 49983 }),
      'aenv-init: envd exited (status 1) after 5 ms; restarting in 100 ms',
      JSON.stringify({ t: t(2000), level: 'error', msg: 'request failed', err: { a: 1 }, path: '/x' }),
      JSON.stringify({ t: t(3000), level: 'loud', msg: 7 }),
      '',
    ].join('\n');
    expect(parseEnvdLog(raw, 0, false)).toEqual([
      {
        timestampMs: 1000,
        level: 'info',
        logger: 'envd',
        message: 'envd listening',
        fields: { port: '49983' },
      },
      {
        timestampMs: 1000,
        level: 'info',
        logger: 'aenv-init',
        message: 'aenv-init: envd exited (status 1) after 5 ms; restarting in 100 ms',
        fields: {},
      },
      {
        timestampMs: 2000,
        level: 'error',
        logger: 'envd',
        message: 'request failed',
        fields: { err: '{"a":1}', path: '/x' },
      },
      { timestampMs: 3000, level: 'info', logger: 'envd', message: '7', fields: {} },
    ]);
  });

  it("drops what predates the sandbox (a snapshot's or fork source's log) and a line cut by the tail read", () => {
    const raw = [
      `{"t":"${t(500)}","level":"info","msg":"cut`,
      JSON.stringify({ t: t(900), level: 'info', msg: 'source sandbox' }),
      'plain line of the source',
      JSON.stringify({ t: t(1500), level: 'info', msg: 'mine' }),
      'plain line of mine',
    ].join('\n');
    expect(parseEnvdLog(raw, 1000, true).map((l) => l.message)).toEqual(['mine', 'plain line of mine']);
    // Without a timestamp seen yet, nothing can be placed.
    expect(parseEnvdLog('no time here\n{not json', 0, false)).toEqual([]);
  });

  it('bounds what one line can make it store', () => {
    const fields = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, 'v']));
    const [l] = parseEnvdLog(
      JSON.stringify({ t: t(1), level: 'info', msg: 'x'.repeat(10_000), ...fields }),
      0,
      false,
    );
    expect(l!.message.length).toBeLessThan(4100);
    expect(Object.keys(l!.fields)).toHaveLength(32);
  });
});

describe('fetchEnvdLog', () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

  async function envd(handler: Parameters<typeof createServer>[1]): Promise<number> {
    server = createServer(handler);
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    return (server!.address() as AddressInfo).port;
  }

  it('asks envd, as root, with the token, for the tail of the log', async () => {
    let seen: { url?: string; range?: string; token?: string } = {};
    const port = await envd((req, res) => {
      seen = { url: req.url, range: req.headers.range, token: req.headers['x-access-token'] as string };
      res.writeHead(206, { 'content-range': 'bytes 10-14/15' }).end('hello');
    });
    const got = await fetchEnvdLog({
      host: '127.0.0.1',
      port,
      accessToken: 'tok',
      maxBytes: 5,
      timeoutMs: 2000,
    });
    expect(got).toEqual({ text: 'hello', truncated: true });
    expect(seen).toEqual({
      url: `/files?path=${encodeURIComponent(ENVD_LOG_PATH)}&username=root`,
      range: 'bytes=-5',
      token: 'tok',
    });
  });

  it('reads nothing when envd has no log or refuses, and gives up on an envd sending too much or nothing', async () => {
    const port = await envd((req, res) => {
      if (req.headers['x-access-token'] === 'flood') res.writeHead(200).end('x'.repeat(100));
      else if (req.headers['x-access-token'] === 'stall') res.writeHead(200).write('partial');
      else res.writeHead(404).end('{"code":404}');
    });
    const src = { host: '127.0.0.1', port, maxBytes: 10, timeoutMs: 300 };
    expect(await fetchEnvdLog(src)).toEqual({ text: '', truncated: false });
    await expect(fetchEnvdLog({ ...src, accessToken: 'flood' })).rejects.toThrow(/more than the 10 bytes/);
    await expect(fetchEnvdLog({ ...src, accessToken: 'stall' })).rejects.toThrow(/timed out/);
  });
});
