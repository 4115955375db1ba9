import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { decodePageToken } from '@aenv/protocol';
import { createHttpServer } from '../../front-door/http-server.js';
import { ServerMetrics } from '../../observability/metrics.js';
import type { SandboxRecord } from '../../orchestrator/types.js';
import { createLogger } from '../../util/log.js';
import { MAX_LISTED_NODES, registerUnheldSandboxesRoute } from './unheld-sandboxes.js';

const KEY = 'e2b_' + 'ab'.repeat(32);
const silent = new Writable({ write: (_c, _e, cb) => cb() });
const NEVER = '2069-12-07T00:00:00.000Z';

const record = (id: string, s: number, metadata: Record<string, string> = {}): SandboxRecord => ({
  id,
  templateId: s % 2 ? 'odd' : 'even',
  state: 'paused',
  createdAt: new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString(),
  expiresAt: null,
  timeoutSecs: 300,
  resources: { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 },
  metadata,
  envVars: { SECRET: 'never listed' },
  secure: true,
  network: { allowPublicTraffic: true, allowOut: [], denyOut: [], allowInternetAccess: null },
  onTimeout: 'pause',
  autoResume: false,
  envdVersion: '0.5.15',
  defaultUser: 'user',
  paused: { kind: 'memory', pausedAt: new Date().toISOString(), artifactDir: '/x' },
  backend: {},
});

async function serve(withSource: boolean) {
  const { app, server } = createHttpServer({
    apiKey: KEY,
    bodyLimitBytes: 1024 * 1024,
    logger: createLogger('json', 'info', silent),
    metrics: new ServerMetrics(),
  });
  const asked: Set<string>[] = [];
  const records = Array.from({ length: 7 }, (_, i) => record(`s${i}`, i, i < 3 ? { team: 'a' } : {}));
  registerUnheldSandboxesRoute(app, {
    ...(withSource
      ? {
          unheld: async (listed: ReadonlySet<string>) => {
            asked.push(new Set(listed));
            return records;
          },
        }
      : {}),
    expiry: (r) => r.expiresAt ?? NEVER,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const post = async (query: string, init: { key?: string | null; body?: string; method?: string } = {}) => {
    const headers: Record<string, string> = {};
    if (init.key !== null) headers['X-API-Key'] = init.key ?? KEY;
    if (init.body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${base}/cluster/unheld-sandboxes${query}`, {
      method: init.method ?? 'POST',
      headers,
      body: init.body,
    });
    const text = await res.text();
    return {
      status: res.status,
      token: res.headers.get('x-next-token') ?? '',
      body: (text ? JSON.parse(text) : undefined) as unknown,
    };
  };
  return { app, post, asked };
}

const listedBody = (ids: unknown) => JSON.stringify({ listedNodes: ids });
const idsOf = (body: unknown) => (body as { sandboxID: string }[]).map((s) => s.sandboxID);

describe('POST /cluster/unheld-sandboxes', () => {
  let s: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    s = await serve(true);
  });
  afterAll(async () => {
    await s.app.close();
  });

  it('answers them as the node lists its own: entries, filters, pages, both orders', async () => {
    const all = await s.post('', { body: listedBody(['node-a', 'node-b', 'node-a']) });
    expect(all.status).toBe(200);
    expect(s.asked.at(-1)).toEqual(new Set(['node-a', 'node-b']));
    expect(idsOf(all.body)).toEqual(['s6', 's5', 's4', 's3', 's2', 's1', 's0']);
    // The list entry of a paused sandbox; nothing else of the record (its env vars are never shown).
    expect((all.body as unknown[])[6]).toEqual({
      templateID: 'even',
      sandboxID: 's0',
      clientID: '',
      startedAt: '2026-01-01T00:00:00.000Z',
      endAt: NEVER,
      cpuCount: 2,
      memoryMB: 512,
      diskSizeMB: 1024,
      metadata: { team: 'a' },
      state: 'paused',
      envdVersion: '0.5.15',
    });
    const meta = `?metadata=${encodeURIComponent('team=a')}&template=odd`;
    expect(idsOf((await s.post(meta, { body: listedBody([]) })).body)).toEqual(['s1']);
    const after = `?startedAfter=${encodeURIComponent('2026-01-01T00:00:05Z')}&state=paused`;
    expect(idsOf((await s.post(after, { body: listedBody([]) })).body)).toEqual(['s6', 's5']);
    for (const order of ['desc', 'asc']) {
      const walked: string[] = [];
      let token = '';
      for (let i = 0; i < 10; i++) {
        const r = await s.post(`?limit=3&order=${order}${token ? `&nextToken=${token}` : ''}`, {
          body: listedBody([]),
        });
        walked.push(...idsOf(r.body));
        if (r.token) expect(decodePageToken(r.token).id).toBe(walked.at(-1));
        token = r.token;
        if (!token) break;
      }
      const desc = ['s6', 's5', 's4', 's3', 's2', 's1', 's0'];
      expect(walked, order).toEqual(order === 'desc' ? desc : [...desc].reverse());
    }
  });

  it('reads nothing for a list of running sandboxes (they are all paused)', async () => {
    const before = s.asked.length;
    const r = await s.post('?state=running', { body: listedBody(['node-a']) });
    expect(r).toMatchObject({ status: 200, body: [] });
    expect(s.asked.length).toBe(before);
  });

  it('refuses callers without the key, bad queries and bad bodies, before reading anything', async () => {
    const before = s.asked.length;
    const ok = listedBody(['node-a']);
    expect((await s.post('', { key: null, body: ok })).status).toBe(401);
    expect((await s.post('', { key: KEY + 'x', body: ok })).status).toBe(401);
    for (const [query, message] of [
      ['?state=sleeping', 'invalid state "sleeping": must be running or paused'],
      ['?order=sideways', 'invalid order "sideways": must be asc or desc'],
      ['?limit=0', 'invalid limit "0": must be an integer between 1 and 100'],
      ['?limit=abc', 'invalid limit "abc": must be an integer between 1 and 100'],
      ['?startedAfter=yesterday', 'invalid startedAfter "yesterday": must be an RFC3339 time'],
      ['?metadata=a%3Db%3Dc', 'invalid metadata filter: "a=b=c" is not key=value'],
    ]) {
      expect(await s.post(query!, { body: ok }), query).toEqual({
        status: 400,
        token: '',
        body: { code: 400, message },
      });
    }
    expect((await s.post('?nextToken=%25%25', { body: ok })).status).toBe(400);
    const long = 'n'.repeat(513);
    for (const [body, message] of [
      [undefined, 'the body must be a JSON object {"listedNodes": [<node id>, ...]}'],
      ['[1]', 'the body must be a JSON object {"listedNodes": [<node id>, ...]}'],
      ['"node-a"', 'the body must be a JSON object {"listedNodes": [<node id>, ...]}'],
      ['{}', 'listedNodes must be an array of node ids'],
      ['{"listedNodes":"node-a"}', 'listedNodes must be an array of node ids'],
      ['{"listedNodes":[],"all":true}', 'unknown field "all" in the body'],
      [listedBody([7]), 'listedNodes must hold node ids of 1 to 512 bytes'],
      [listedBody(['']), 'listedNodes must hold node ids of 1 to 512 bytes'],
      [listedBody(['  ']), 'listedNodes must hold node ids of 1 to 512 bytes'],
      [listedBody([null]), 'listedNodes must hold node ids of 1 to 512 bytes'],
      [listedBody([long]), 'listedNodes must hold node ids of 1 to 512 bytes'],
      [listedBody(['é'.repeat(257)]), 'listedNodes must hold node ids of 1 to 512 bytes'],
      [
        listedBody(Array.from({ length: MAX_LISTED_NODES + 1 }, (_, i) => `n${i}`)),
        `listedNodes names ${MAX_LISTED_NODES + 1} nodes; at most ${MAX_LISTED_NODES} are taken`,
      ],
    ] as [string | undefined, string][]) {
      expect(await s.post('', body === undefined ? {} : { body }), String(body).slice(0, 40)).toEqual({
        status: 400,
        token: '',
        body: { code: 400, message },
      });
    }
    expect((await s.post('', { body: '{"listedNodes":[' })).status).toBe(400);
    // Over the route's own body limit (3 MiB): refused while it streams in.
    const huge = await s.post('', { body: listedBody(['x'.repeat(4 * 1024 * 1024)]) });
    expect(huge.status).toBe(413);
    expect(await s.post('', { method: 'GET' })).toMatchObject({ status: 404 });
    expect(s.asked.length).toBe(before);
    // The most it takes, of the longest ids: answered.
    const most = Array.from({ length: MAX_LISTED_NODES }, (_, i) => `${i}-`.padEnd(512, 'n'));
    expect((await s.post('', { body: listedBody(most) })).status).toBe(200);
    expect(s.asked.at(-1)!.size).toBe(MAX_LISTED_NODES);
  });

  it('on a node without a shared repository: none, once the request is valid', async () => {
    const lone = await serve(false);
    try {
      expect(await lone.post('', { body: listedBody(['node-a']) })).toMatchObject({ status: 200, body: [] });
      expect((await lone.post('?order=up', { body: listedBody([]) })).status).toBe(400);
      expect((await lone.post('', { body: '{}' })).status).toBe(400);
    } finally {
      await lone.app.close();
    }
  });
});
