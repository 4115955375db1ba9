// The events routes of the gateway between a real scheduler and two HTTP servers answering the node's events
// API (node cursors, 404s): what each node is sent and how the answers merge. Real nodes: test/e2e/cluster-webhooks.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningScheduler } from '@aenv/scheduler';
import type { RunningGateway } from './run.js';
import { startSchedulerAndGateway } from './testing/scheduler-and-gateway.js';

const KEY = 'e2b_' + 'e'.repeat(40);
const HOOK = '0190a0a0-0000-7000-8000-000000000001';

interface Group {
  eventId: string;
  attempts: { timestamp: string; durationMs: number }[];
}

class EventsNode {
  server!: Server;
  seen: string[] = [];
  groups: Group[] = [];
  events: { id: string; timestamp: string }[] = [];
  knowsHook = true;
  constructor(readonly id: string) {}
  get url() {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  async start() {
    this.server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const url = new URL(req.url!, 'http://x');
        this.seen.push(`${req.method} ${req.url}`);
        const json = (status: number, v: unknown) =>
          res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(v));
        if (url.pathname.startsWith(`/events/webhooks/${HOOK}/`) && !this.knowsHook)
          return json(404, { code: 404, message: `webhook ${HOOK} not found` });
        if (url.pathname === `/events/webhooks/${HOOK}/deliveries`) {
          const limit = Number(url.searchParams.get('limit'));
          const c = url.searchParams.get('cursor');
          const offset = c ? Number(Buffer.from(c, 'base64url').toString()) : 0;
          // Oldest first only with orderAsc=true, as the node.
          const ordered =
            url.searchParams.get('orderAsc') === 'true' ? this.groups : [...this.groups].reverse();
          const page = ordered.slice(offset, offset + limit);
          const more = offset + limit < this.groups.length;
          return json(200, {
            data: page,
            nextCursor: more ? Buffer.from(String(offset + limit)).toString('base64url') : null,
          });
        }
        if (url.pathname === `/events/webhooks/${HOOK}/stats`) {
          const d = this.groups.map((g) => g.attempts[0]!.durationMs);
          return json(200, {
            buckets: [],
            total: d.length,
            failed: 0,
            durationMs: {
              minimum: Math.min(...d),
              average: d.reduce((a, b) => a + b, 0) / d.length,
              maximum: Math.max(...d),
            },
          });
        }
        if (url.pathname.startsWith('/events/sandboxes')) {
          const offset = Number(url.searchParams.get('offset'));
          const limit = Number(url.searchParams.get('limit'));
          return json(200, [...this.events].reverse().slice(offset, offset + limit));
        }
        if (req.method === 'POST' && url.pathname === '/events/webhooks')
          return json(201, { id: HOOK, node: this.id });
        return json(200, []);
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
  }
}

const at = (minute: number) => `2026-01-01T00:${String(minute).padStart(2, '0')}:00.000Z`;
const group = (eventId: string, minute: number, durationMs = 10): Group => ({
  eventId,
  attempts: [{ timestamp: at(minute), durationMs }],
});

describe('the gateway’s events routes against a real scheduler', () => {
  const a = new EventsNode('ev-a');
  const b = new EventsNode('ev-b');
  let sched: RunningScheduler;
  let gw: RunningGateway;
  let base: string;
  const get = async (path: string) => {
    const r = await fetch(base + path, { headers: { 'x-api-key': KEY } });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };

  beforeAll(async () => {
    await a.start();
    await b.start();
    ({ sched, gw, base } = await startSchedulerAndGateway([a, b], KEY, {
      requestTimeoutMs: 2000,
    }));
  });
  afterAll(async () => {
    await gw?.stop();
    await sched?.stop();
    a.server?.close();
    b.server?.close();
  });

  it('sends a webhook write to one node and makes the other copy the definitions before answering', async () => {
    a.seen = [];
    b.seen = [];
    const r = await fetch(`${base}/events/webhooks`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify({
        url: 'http://r.test/',
        events: ['sandbox.lifecycle.created'],
        signatureSecret: 's',
      }),
    });
    expect(r.status).toBe(201);
    const { node } = (await r.json()) as { node: string };
    const [writer, other] = node === a.id ? [a, b] : [b, a];
    expect(writer.seen).toEqual(['POST /events/webhooks']);
    expect(other.seen).toEqual(['GET /events/webhooks']);
  });

  it('pages delivery groups of both nodes in time order with its own cursor', async () => {
    a.groups = [group('a1', 1), group('a2', 3), group('a3', 4)];
    b.groups = [group('b1', 2)];
    const order: string[] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 10; i++) {
      const page = await get(
        `/events/webhooks/${HOOK}/deliveries?orderAsc=true&limit=1${cursor ? `&cursor=${cursor}` : ''}`,
      );
      expect(page.status).toBe(200);
      order.push(...(page.body.data as Group[]).map((g) => g.eventId));
      cursor = page.body.nextCursor as string | null;
      if (!cursor) break;
    }
    expect(order).toEqual(['a1', 'b1', 'a2', 'a3']);
    const newest = await get(`/events/webhooks/${HOOK}/deliveries?limit=2`);
    expect((newest.body.data as Group[]).map((g) => g.eventId)).toEqual(['a3', 'a2']);
  });

  it('adds up stats; a node that does not know the webhook adds nothing; none knowing it is 404', async () => {
    a.groups = [group('a1', 1, 10), group('a2', 2, 30)];
    b.groups = [group('b1', 3, 50)];
    expect((await get(`/events/webhooks/${HOOK}/stats`)).body).toMatchObject({
      total: 3,
      durationMs: { minimum: 10, average: 30, maximum: 50 },
    });
    b.knowsHook = false;
    expect((await get(`/events/webhooks/${HOOK}/stats`)).body).toMatchObject({ total: 2 });
    expect(((await get(`/events/webhooks/${HOOK}/deliveries`)).body.data as Group[]).length).toBe(2);
    a.knowsHook = false;
    for (const p of ['stats', 'deliveries'])
      expect(await get(`/events/webhooks/${HOOK}/${p}`)).toEqual({
        status: 404,
        body: { code: 404, message: `webhook ${HOOK} not found` },
      });
    a.knowsHook = b.knowsHook = true;
  });

  it('merges the lifecycle events of a sandbox found on both nodes, newest first, then pages them', async () => {
    a.events = [
      { id: 'e1', timestamp: at(1) },
      { id: 'e3', timestamp: at(3) },
    ];
    b.events = [{ id: 'e2', timestamp: at(2) }];
    const ids = async (q: string) =>
      ((await get(`/events/sandboxes/sbx${q}`)).body as unknown as { id: string }[]).map((e) => e.id);
    expect(await ids('')).toEqual(['e3', 'e2', 'e1']);
    expect(await ids('?offset=1&limit=1')).toEqual(['e2']);
    expect(await ids('?orderAsc=true&limit=2')).toEqual(['e1', 'e2']);
  });
});
