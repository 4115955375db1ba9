import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import type { NodeDrainProgress } from '@aenv/protocol';
import { createHttpServer } from '../../front-door/http-server.js';
import { ServerMetrics } from '../../observability/metrics.js';
import { createLogger } from '../../util/log.js';
import { registerNodeDrainRoute } from './node-drain.js';

const KEY = 'e2b_' + 'ab'.repeat(32);
const silent = new Writable({ write: (_c, _e, cb) => cb() });

async function serve(opts: { unavailable?: string }) {
  const { app, server } = createHttpServer({
    apiKey: KEY,
    bodyLimitBytes: 1024,
    logger: createLogger('json', 'info', silent),
    metrics: new ServerMetrics(),
  });
  let progress: NodeDrainProgress | undefined;
  let starts = 0;
  registerNodeDrainRoute(app, {
    nodeId: 'node-a',
    ...opts,
    start: () => {
      starts++;
      progress ??= {
        node: 'node-a',
        startedAt: new Date().toISOString(),
        handedOver: 0,
        failed: 0,
        kept: 0,
        running: 1,
        paused: 0,
        done: false,
      };
    },
    progress: () => progress,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const post = async (path: string, init: { key?: string | null; body?: string } = {}) => {
    const headers: Record<string, string> = {};
    if (init.key !== null) headers['X-API-Key'] = init.key ?? KEY;
    if (init.body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${base}${path}`, { method: 'POST', headers, body: init.body });
    const text = await res.text();
    // The 401 of a missing or wrong key has an empty body (the reference's).
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  return { app, post, starts: () => starts };
}

describe('POST /nodes/{nodeID}/drain', () => {
  let s: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    s = await serve({});
  });
  afterAll(async () => {
    await s.app.close();
  });

  it('refuses callers without the key, other node ids and any body field, without starting a drain', async () => {
    expect((await s.post('/nodes/node-a/drain', { key: null })).status).toBe(401);
    expect((await s.post('/nodes/node-a/drain', { key: 'e2b_' + 'cd'.repeat(32) })).status).toBe(401);
    expect(await s.post('/nodes/node-b/drain')).toEqual({
      status: 404,
      body: { code: 404, message: 'node node-b not found' },
    });
    expect(await s.post('/nodes/node-a/drain', { body: '{"force":true}' })).toEqual({
      status: 400,
      body: { code: 400, message: 'unknown field "force" in the drain request' },
    });
    expect((await s.post('/nodes/node-a/drain', { body: '[1]' })).status).toBe(400);
    expect((await s.post('/nodes/node-a/drain', { body: '{"a":' })).status).toBe(400);
    expect(s.starts()).toBe(0);
  });

  it('starts the drain with 202 and its progress; repeating it answers the same drain', async () => {
    const first = await s.post('/nodes/node-a/drain');
    expect(first).toMatchObject({ status: 202, body: { node: 'node-a', done: false, running: 1 } });
    const again = await s.post('/nodes/node-a/drain', { body: '{}' });
    expect(again.status).toBe(202);
    expect(again.body.startedAt).toBe(first.body.startedAt);
  });
});

describe('POST /nodes/{nodeID}/drain on a node without a shared repository', () => {
  it('is a 400 naming what is missing', async () => {
    const s = await serve({ unavailable: 'draining needs a shared repository' });
    try {
      expect(await s.post('/nodes/node-a/drain')).toEqual({
        status: 400,
        body: { code: 400, message: 'draining needs a shared repository' },
      });
      expect(s.starts()).toBe(0);
    } finally {
      await s.app.close();
    }
  });
});
