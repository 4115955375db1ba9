// Webhooks (docs/events.md#webhooks) on a real node driven by the real e2b SDK, with real HTTP receivers on
// loopback that verify E2B's e2b-signature themselves: deliveries of a sandbox's life, the events filter, a
// receiver that is down and comes back, 500 then 200, a slow receiver, delivery history and stats, undelivered
// events across a graceful restart and across kill -9, and the /events/webhooks routes under attack.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { endNode, eventually, startServer, useSdk, type TestServer } from './harness.js';
import { TestWebhookReceiver } from '../../packages/node/src/events/testing/webhook-receiver.js';

const SECRET = 'whsec-e2e-0123456789';

describe('webhooks through the e2b SDK', () => {
  let server: TestServer;
  const opts = {
    name: 'webhook',
    toml: [
      '[events.webhooks]',
      'allow_loopback = true',
      'initial_backoff_ms = 200',
      'max_backoff_ms = 800',
      'max_attempts = 30',
      'timeout_ms = 4000',
      'max_webhooks = 4',
      'history_per_webhook = 100',
    ].join('\n'),
  };
  const receivers: TestWebhookReceiver[] = [];
  const receiver = async (secret = SECRET) => {
    const r = await new TestWebhookReceiver(secret).start();
    receivers.push(r);
    return r;
  };
  const register = async (r: TestWebhookReceiver, events: string[], name = 'e2e') => {
    const res = await server.api('POST', '/events/webhooks', {
      name,
      url: r.url,
      enabled: true,
      events,
      signatureSecret: r.secret,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body.id as string;
  };
  const unregister = async (id: string) =>
    expect((await server.api('DELETE', `/events/webhooks/${id}`)).status).toBe(200);
  const deliveries = async (id: string, query = '') => {
    const res = await server.api('GET', `/events/webhooks/${id}/deliveries?orderAsc=true&limit=100${query}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as {
      data: { eventId: string; eventType: string; sandboxId: string; attempts: Record<string, unknown>[] }[];
      nextCursor: string | null;
    };
  };
  const eventsOf = async (sandboxId: string) =>
    (await server.api('GET', `/events/sandboxes/${sandboxId}?orderAsc=true`)).body as {
      id: string;
      type: string;
    }[];

  beforeAll(async () => {
    server = await startServer(opts);
    useSdk(server);
    // The node's state dir outlives a run: webhooks a failed earlier run left go first.
    for (const w of (await server.api('GET', '/events/webhooks')).body as { id: string }[])
      await server.api('DELETE', `/events/webhooks/${w.id}`);
  });
  afterAll(async () => {
    if (server) expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
    await Promise.all(receivers.map((r) => r.close()));
  });

  it("a sandbox's life reaches the subscribed receivers signed, each event once, the bodies as the events API serves them", async () => {
    const all = await receiver();
    const killsOnly = await receiver('another-secret');
    const allId = await register(all, [
      'sandbox.lifecycle.created',
      'sandbox.lifecycle.paused',
      'sandbox.lifecycle.resumed',
      'sandbox.lifecycle.killed',
    ]);
    const killsId = await register(killsOnly, ['sandbox.lifecycle.killed']);

    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    await sbx.pause();
    const resumed = await Sandbox.connect(sbx.sandboxId);
    await resumed.kill();

    await all.waitFor((r) => r.filter((d) => d.body.sandboxId === sbx.sandboxId).length === 4);
    await killsOnly.waitFor((r) => r.length === 1);
    const stored = await eventsOf(sbx.sandboxId);
    const got = all.received.filter((d) => d.body.sandboxId === sbx.sandboxId);
    // Each stored event once, as the events API serves it (deliveries may overtake each other: no order).
    expect(stored.map((e) => e.type)).toEqual([
      'sandbox.lifecycle.created',
      'sandbox.lifecycle.paused',
      'sandbox.lifecycle.resumed',
      'sandbox.lifecycle.killed',
    ]);
    for (const e of stored) expect(all.of(e.id).map((d) => d.body)).toEqual([e]);
    for (const d of got) {
      expect(d.signatureValid).toBe(true);
      expect(d.headers['e2b-webhook-id']).toBe(allId);
      expect(d.headers['e2b-event-id']).toBe(d.body.id);
      expect(d.headers['e2b-signature-version']).toBe('v1');
    }
    expect(killsOnly.received[0]!.body).toEqual(stored.at(-1));
    expect(killsOnly.received[0]!.signatureValid).toBe(true);
    expect(killsOnly.received[0]!.headers['e2b-webhook-id']).toBe(killsId);

    // History and stats of the first webhook: one successful attempt per event.
    await eventually(async () => (await deliveries(allId)).data.length === 4, 'history of 4 events');
    const history = await deliveries(allId);
    expect(history.nextCursor).toBeNull();
    expect(history.data.map((g) => g.eventId).sort()).toEqual(stored.map((e) => e.id).sort());
    for (const g of history.data) {
      expect(g.attempts).toHaveLength(1);
      expect(g.attempts[0]).toMatchObject({
        webhookId: allId,
        eventId: g.eventId,
        sandboxId: sbx.sandboxId,
        status: 'success',
        responseHttpStatusCode: 200,
        requestUrl: all.url,
        teamId: expect.any(String),
      });
    }
    const page = await server.api('GET', `/events/webhooks/${allId}/deliveries?orderAsc=true&limit=3`);
    expect(page.body.data).toHaveLength(3);
    const rest = await server.api(
      'GET',
      `/events/webhooks/${allId}/deliveries?orderAsc=true&limit=3&cursor=${page.body.nextCursor}`,
    );
    expect(rest.body.data.map((g: { eventId: string }) => g.eventId)).toEqual([history.data[3]!.eventId]);
    expect(rest.body.nextCursor).toBeNull();
    const stats = await server.api('GET', `/events/webhooks/${allId}/stats`);
    expect(stats.status).toBe(200);
    expect(stats.body).toMatchObject({ total: 4, failed: 0, buckets: expect.any(Array) });
    expect(stats.body.durationMs.maximum).toBeGreaterThanOrEqual(stats.body.durationMs.minimum);
    await unregister(allId);
    await unregister(killsId);
  });

  it('a receiver down during the event gets it once back; 500 then 200 and a slow receiver are retried; the lifecycle never waits', async () => {
    const r = await receiver();
    const id = await register(r, ['sandbox.lifecycle.created', 'sandbox.lifecycle.killed']);
    await r.close();
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    await sbx.kill(); // both answered while no receiver listens
    await eventually(
      async () => (await deliveries(id, '&deliveryStatus=failed')).data.length === 2,
      'failed attempts while the receiver is down',
    );
    await r.start();
    await r.waitFor((got) => got.length >= 2);
    const events = await eventsOf(sbx.sandboxId);
    await eventually(
      async () => (await deliveries(id, '&deliveryStatus=success')).data.length === 2,
      'successes',
    );
    for (const e of events) expect(r.of(e.id)).toHaveLength(1);
    const down = (await deliveries(id)).data;
    for (const g of down) {
      expect(g.attempts.at(-1)).toMatchObject({ status: 'success' });
      expect(g.attempts.slice(0, -1).every((a) => a.errorClass === 'transport_error')).toBe(true);
    }

    // 500, then a receiver slower than timeout_ms, then 200: three attempts of the same event.
    r.answers.push({ status: 500 }, { slowMs: 8000, status: 200 });
    const next = await Sandbox.create({ timeoutMs: 300_000 });
    const [created] = await eventsOf(next.sandboxId);
    await eventually(
      async () =>
        (await deliveries(id)).data.find((g) => g.eventId === created!.id)?.attempts.at(-1)?.status ===
        'success',
      'the created event delivered after a 500 and a timeout',
      600,
    );
    const group = (await deliveries(id)).data.find((g) => g.eventId === created!.id)!;
    expect(group.attempts.map((a) => a.errorClass)).toEqual(['http_error', 'timeout', null]);
    expect(group.attempts[0]).toMatchObject({ responseHttpStatusCode: 500, status: 'failed' });
    const onlyFailed = await deliveries(id, '&deliveryStatus=failed&eventType=sandbox.lifecycle.created');
    expect(onlyFailed.data.every((g) => g.attempts.every((a) => a.status === 'failed'))).toBe(true);
    const stats = (await server.api('GET', `/events/webhooks/${id}/stats`)).body;
    expect(stats.failed).toBeGreaterThanOrEqual(4);
    expect(stats.total - stats.failed).toBe(3);
    await next.kill();
    await r.waitFor((got) =>
      got.some((d) => d.body.type === 'sandbox.lifecycle.killed' && d.body.sandboxId === next.sandboxId),
    );
    await unregister(id);
  });

  it('events not yet delivered survive a graceful restart and a kill -9 of the server, and are delivered after it', async () => {
    const r = await receiver();
    const id = await register(r, ['sandbox.lifecycle.created', 'sandbox.lifecycle.killed']);
    await r.close();
    const sbx = await Sandbox.create({ timeoutMs: 300_000 });
    const [created] = await eventsOf(sbx.sandboxId);
    expect(await server.stop()).toBe(0);
    server = await server.restart();
    useSdk(server);
    await r.start();
    await r.waitFor((got) => got.some((d) => d.body.id === created!.id));
    expect(r.of(created!.id)[0]!.signatureValid).toBe(true);

    // kill -9 while the delivery of the kill is in flight (the receiver holds it): it is sent again after the
    // restart — at least once, the same event id both times.
    r.answers.push({ slowMs: 30_000, status: 200 });
    await Sandbox.kill(sbx.sandboxId);
    await r.waitFor((got) => got.some((d) => d.body.type === 'sandbox.lifecycle.killed'));
    const killed = r.received.find((d) => d.body.type === 'sandbox.lifecycle.killed')!;
    await server.crash();
    server = await server.restart();
    useSdk(server);
    await r.waitFor((got) => got.filter((d) => d.body.id === killed.body.id).length === 2);
    const twice = r.of(killed.body.id as string);
    expect(twice[1]!.headers['e2b-event-id']).toBe(twice[0]!.headers['e2b-event-id']);
    expect(twice[1]!.headers['e2b-delivery-id']).not.toBe(twice[0]!.headers['e2b-delivery-id']);
    expect(twice[1]!.signatureValid).toBe(true);
    await eventually(
      async () =>
        (await deliveries(id)).data.find((g) => g.eventId === killed.body.id)?.attempts.length === 1,
      'the post-crash attempt recorded',
    );
    await unregister(id);
  });

  it('CRUD in E2B shapes, the secret never shown nor logged; hostile bodies, URLs and ids get a 400 or 404 naming the field', async () => {
    const r = await receiver();
    const created = await server.api('POST', '/events/webhooks', {
      name: 'crud',
      url: r.url,
      events: ['sandbox.lifecycle.created'],
      signatureSecret: 'crud-secret-never-shown',
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      teamId: expect.any(String),
      name: 'crud',
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      url: r.url,
      enabled: true,
      events: ['sandbox.lifecycle.created'],
    });
    const id = created.body.id as string;
    expect((await server.api('GET', `/events/webhooks/${id}`)).body).toEqual(created.body);
    expect((await server.api('GET', '/events/webhooks')).body).toEqual([created.body]);
    const patched = await server.api('PATCH', `/events/webhooks/${id}`, {
      enabled: false,
      events: ['sandbox.lifecycle.killed', 'sandbox.lifecycle.paused'],
      signatureSecret: 'rotated-secret',
    });
    expect(patched.status).toBe(200);
    expect(patched.body).toEqual({
      ...created.body,
      enabled: false,
      events: ['sandbox.lifecycle.killed', 'sandbox.lifecycle.paused'],
    });

    const bad = async (method: string, path: string, body: unknown, status: number, field: RegExp) => {
      const res = await server.api(method, path, body);
      expect(res.status, `${method} ${path} ${String(JSON.stringify(body)).slice(0, 200)}`).toBe(status);
      expect(res.body).toEqual({ code: status, message: expect.stringMatching(field) });
    };
    const ok = { url: r.url, events: ['sandbox.lifecycle.created'], signatureSecret: 's' };
    const post = (body: unknown, field: RegExp) => bad('POST', '/events/webhooks', body, 400, field);
    await post(undefined, /body is required/);
    await post({ ...ok, url: undefined }, /url/);
    await post({ ...ok, url: 'ftp://127.0.0.1/x' }, /url: must be an http/);
    await post({ ...ok, url: 'not a url' }, /url: must be an absolute/);
    await post({ ...ok, url: 'http://169.254.169.254/latest/meta-data/' }, /url: .*link-local/);
    await post({ ...ok, url: `http://127.0.0.1:${server.port}/sandboxes` }, /url: .*own API/);
    await post({ ...ok, url: `http://localhost:${server.port}/` }, /url: .*own API/);
    await post({ ...ok, url: `http://${server.cidrs.hi.replace(/0\/16$/, '9')}:49983/` }, /url: .*internal/);
    await post({ ...ok, url: 'http://user:pass@127.0.0.1:1/' }, /url: must not carry credentials/);
    await post({ ...ok, url: `http://127.0.0.1:1/${'a'.repeat(3000)}` }, /url: must be at most 2048/);
    await post({ ...ok, url: 42 }, /url/);
    await post({ ...ok, name: 'n'.repeat(300) }, /name: must be at most 256/);
    await post({ ...ok, signatureSecret: undefined }, /signatureSecret/);
    await post({ ...ok, signatureSecret: '' }, /signatureSecret: must not be empty/);
    await post({ ...ok, signatureSecret: 'x'.repeat(2000) }, /signatureSecret: must be at most 1024/);
    await post({ ...ok, events: [] }, /events: must name at least one/);
    await post({ ...ok, events: ['sandbox.lifecycle.exploded'] }, /events\.0: must be one of/);
    await post(
      { ...ok, events: ['sandbox.lifecycle.killed', 'sandbox.lifecycle.killed'] },
      /events: must not repeat/,
    );
    await post({ ...ok, events: Array(50).fill('sandbox.lifecycle.killed') }, /events: must have at most/);
    await post({ ...ok, enabled: 'yes' }, /enabled/);
    await post({ ...ok, teamId: 'other' }, /teamId|unrecognized/i);
    await post([ok], /body|expected object/);
    const raw = await fetch(`${server.url}/events/webhooks`, {
      method: 'POST',
      headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' },
      body: '{"url":',
    });
    expect(raw.status).toBe(400);
    await bad('PATCH', `/events/webhooks/${id}`, { url: 'gopher://127.0.0.1/' }, 400, /url: must be an http/);
    await bad('PATCH', `/events/webhooks/${id}`, { id: 'x' }, 400, /unrecognized|id/i);
    await bad('PATCH', `/events/webhooks/${id}`, { events: [] }, 400, /events/);
    await bad('GET', '/events/webhooks/not-a-uuid', undefined, 404, /not found/);
    await bad('GET', `/events/webhooks/${crypto.randomUUID()}`, undefined, 404, /not found/);
    await bad('PATCH', `/events/webhooks/${crypto.randomUUID()}`, { enabled: true }, 404, /not found/);
    await bad('DELETE', '/events/webhooks/%2e%2e', undefined, 404, /not found/);
    for (const [q, field] of [
      ['limit=0', /limit/],
      ['limit=101', /limit/],
      ['cursor=%%%', /cursor/],
      ['cursor=bm90LWEtbnVtYmVy', /cursor/],
      ['deliveryStatus=maybe', /deliveryStatus/],
      ['eventType=sandbox.lifecycle.exploded', /eventType/],
      ['start=yesterday', /start/],
      ['orderAsc=sure', /orderAsc/],
    ] as const)
      await bad('GET', `/events/webhooks/${id}/deliveries?${q}`, undefined, 400, field);
    await bad(
      'GET',
      `/events/webhooks/${id}/stats?start=2030-01-02T00:00:00Z&end=2030-01-01T00:00:00Z`,
      undefined,
      400,
      /start/,
    );
    const noKey = await fetch(`${server.url}/events/webhooks`);
    expect(noKey.status).toBe(401);

    // Too many: max_webhooks = 4 on this node.
    const more: string[] = [];
    for (let i = 0; i < 3; i++) more.push((await server.api('POST', '/events/webhooks', ok)).body.id);
    await post(ok, /max_webhooks/);
    expect((await server.api('GET', '/events/webhooks')).body).toHaveLength(4);
    for (const m of [...more, id]) await unregister(m);
    await bad('DELETE', `/events/webhooks/${id}`, undefined, 404, /not found/);
    expect((await server.api('GET', '/events/webhooks')).body).toEqual([]);

    expect(server.logs()).not.toContain('crud-secret-never-shown');
    expect(server.logs()).not.toContain('rotated-secret');
    expect(server.logs()).not.toContain(SECRET);
  });
});
