// The outbox and its delivery worker against real HTTP receivers on loopback (no node, no root): delivery and
// signature, the events filter, retries with backoff, a receiver that is down and comes back, a slow receiver, a
// restart with undelivered rows, giving up, the history cap, a disabled or deleted webhook.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { lookup } from 'node:dns/promises';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { openStateDb, type StateDb } from '../state/db.js';
import { sandboxEventMigrations, type SandboxEvent, type SandboxEventType } from './sandbox-events.js';
import { WebhookStore, webhookMigrations } from './webhook-store.js';
import { WebhookDispatcher, type DispatcherOptions } from './webhook-dispatcher.js';
import { TestWebhookReceiver } from './testing/webhook-receiver.js';

const migrations = [...sandboxEventMigrations, ...webhookMigrations];
const logger = pino({ level: 'silent' });

const event = (type: SandboxEventType, sandboxId = randomUUID()): SandboxEvent => ({
  version: 'v1',
  id: randomUUID(),
  type,
  eventData: null,
  sandboxBuildId: 'tpl',
  sandboxExecutionId: randomUUID(),
  sandboxId,
  sandboxTeamId: 'team',
  sandboxTemplateId: 'tpl',
  timestamp: new Date().toISOString(),
});

describe('webhook outbox and delivery', () => {
  let dir: string;
  let db: StateDb;
  let store: WebhookStore;
  let receiver: TestWebhookReceiver;
  const dispatchers: WebhookDispatcher[] = [];

  const dispatcher = (o: Partial<DispatcherOptions> = {}) => {
    const d = new WebhookDispatcher(store, {
      maxAttempts: 4,
      backoff: { initialMs: 50, maxMs: 200 },
      // Generous: on a loaded 2-core CI machine a loopback answer has taken over a second, and a timed-out
      // attempt is a retry the test did not ask for. Tests about timeouts set their own.
      timeoutMs: 10_000,
      policy: { allowLoopback: true, apiPort: 1, internalCidrs: [] },
      logger,
      ...o,
    });
    dispatchers.push(d);
    d.start();
    return d;
  };
  const hook = (events: SandboxEventType[] = ['sandbox.lifecycle.created'], url = receiver.url) =>
    store.create({ name: 'h', url, enabled: true, events, secret: receiver.secret }, 10)!;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-webhooks-'));
    db = openStateDb(join(dir, 'state.db'), migrations);
    store = new WebhookStore(db, 100);
    receiver = await new TestWebhookReceiver('s3cr3t').start();
  });
  afterEach(async () => {
    await Promise.all(dispatchers.splice(0).map((d) => d.stop()));
    await receiver.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('delivers the event body signed, with E2B headers and the event id, and records the attempt', async () => {
    const w = hook();
    const d = dispatcher();
    const e = event('sandbox.lifecycle.created');
    d.enqueue(e);
    await receiver.waitFor((r) => r.length === 1);
    const [got] = receiver.received;
    expect(got!.signatureValid).toBe(true);
    expect(JSON.parse(got!.raw)).toEqual(e);
    expect(got!.headers).toMatchObject({
      'content-type': 'application/json',
      'e2b-webhook-id': w.id,
      'e2b-event-id': e.id,
      'e2b-signature-version': 'v1',
      'e2b-delivery-id': expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    await waitUntil(() => store.pendingCount() === 0);
    const [group] = store.deliveryGroups(
      w.id,
      { statuses: [], eventTypes: [] },
      { offset: 0, limit: 10, orderAsc: true },
    );
    expect(group!.attempts).toHaveLength(1);
    expect(group!.attempts[0]).toMatchObject({
      id: got!.headers['e2b-delivery-id'],
      status: 'success',
      responseHttpStatusCode: 200,
      responseBody: 'answer 200',
      errorClass: null,
      requestUrl: receiver.url,
      eventType: 'sandbox.lifecycle.created',
    });
    // The history never holds the signature (a replayable credential for that body).
    expect(JSON.parse(group!.attempts[0]!.requestHeaders)['e2b-signature']).toBe('[redacted]');
  });

  it('sends only subscribed types, and nothing to a disabled webhook', () => {
    hook(['sandbox.lifecycle.killed']);
    const off = hook(['sandbox.lifecycle.created']);
    store.update(off.id, { enabled: false });
    expect(store.enqueue(event('sandbox.lifecycle.created'), '{}', Date.now())).toBe(0);
    expect(store.enqueue(event('sandbox.lifecycle.killed'), '{}', Date.now())).toBe(1);
  });

  it('a 500 is retried; the 200 after it settles the event; the history has both attempts', async () => {
    const w = hook();
    receiver.answers.push({ status: 500 });
    const e = event('sandbox.lifecycle.created');
    dispatcher().enqueue(e);
    await receiver.waitFor((r) => r.length === 2);
    await waitUntil(() => store.pendingCount() === 0);
    expect(receiver.of(e.id).map((r) => r.answered)).toEqual([500, 200]);
    const [group] = store.deliveryGroups(
      w.id,
      { statuses: [], eventTypes: [] },
      { offset: 0, limit: 10, orderAsc: true },
    );
    expect(group!.attempts.map((a) => [a.status, a.errorClass, a.responseHttpStatusCode])).toEqual([
      ['failed', 'http_error', 500],
      ['success', null, 200],
    ]);
    expect(new Set(receiver.of(e.id).map((r) => r.headers['e2b-delivery-id'])).size).toBe(2);
  });

  it('a receiver down during the event gets it once it is back; refused attempts are transport errors', async () => {
    const w = hook();
    await receiver.close();
    const e = event('sandbox.lifecycle.created');
    dispatcher({ backoff: { initialMs: 100, maxMs: 100 }, maxAttempts: 50 }).enqueue(e);
    await waitUntil(() => store.attemptFigures(w.id, { statuses: [], eventTypes: [] }).length >= 2);
    await receiver.start();
    await receiver.waitFor((r) => r.length === 1);
    await waitUntil(() => store.pendingCount() === 0);
    expect(receiver.of(e.id)).toHaveLength(1);
    const attempts = store.deliveryGroups(
      w.id,
      { statuses: [], eventTypes: [] },
      { offset: 0, limit: 10, orderAsc: true },
    )[0]!.attempts;
    expect(attempts.at(-1)!.status).toBe('success');
    expect(attempts.slice(0, -1).every((a) => a.errorClass === 'transport_error')).toBe(true);
  });

  it('a receiver slower than timeout_ms is a timeout and is retried', async () => {
    const w = hook();
    receiver.answers.push({ slowMs: 6000, status: 200 });
    dispatcher({ timeoutMs: 2000 }).enqueue(event('sandbox.lifecycle.created'));
    await receiver.waitFor((r) => r.length === 2);
    await waitUntil(() => store.pendingCount() === 0);
    const attempts = store.deliveryGroups(
      w.id,
      { statuses: [], eventTypes: [] },
      { offset: 0, limit: 10, orderAsc: true },
    )[0]!.attempts;
    expect(attempts.map((a) => a.errorClass)).toEqual(['timeout', null]);
  });

  it('gives up after max_attempts and keeps the failures in the history', async () => {
    const w = hook();
    receiver.answers.push({ status: 503 }, { status: 503 }, { status: 503 }, { status: 503 });
    dispatcher({ maxAttempts: 3 }).enqueue(event('sandbox.lifecycle.created'));
    await waitUntil(() => store.pendingCount() === 0);
    expect(receiver.received.map((r) => r.answered)).toEqual([503, 503, 503]);
    expect(store.attemptFigures(w.id, { statuses: ['failed'], eventTypes: [] })).toHaveLength(3);
  });

  it('undelivered rows survive a stop and a reopen of the database and are delivered after the restart', async () => {
    hook();
    await receiver.close();
    const first = dispatcher({ backoff: { initialMs: 60_000, maxMs: 60_000 } });
    const e = event('sandbox.lifecycle.created');
    first.enqueue(e);
    await waitUntil(
      () =>
        store.pendingCount() === 1 &&
        store.attemptFigures(store.list()[0]!.id, { statuses: [], eventTypes: [] }).length === 1,
    );
    await first.stop();
    db.close();
    // The "restart": the same file, a new store and worker; the row's retry time is an hour away, so only
    // a restart that reads the outbox and waits for it would send it — move it to now as the wait passing.
    db = openStateDb(join(dir, 'state.db'), migrations);
    store = new WebhookStore(db, 100);
    expect(store.pendingCount()).toBe(1);
    db.prepare('UPDATE webhook_outbox SET next_at = 0').run();
    await receiver.start();
    dispatcher();
    await receiver.waitFor((r) => r.length === 1);
    expect(receiver.received[0]!.body.id).toBe(e.id);
    expect(receiver.received[0]!.signatureValid).toBe(true);
  });

  it('an attempt cut by a stop is not recorded and is sent again by the next worker (at least once)', async () => {
    hook();
    receiver.answers.push({ slowMs: 5000, status: 200 });
    const first = dispatcher({ timeoutMs: 10_000 });
    const e = event('sandbox.lifecycle.created');
    first.enqueue(e);
    await receiver.waitFor((r) => r.length === 1);
    await first.stop();
    expect(store.pendingCount()).toBe(1);
    expect(store.attemptFigures(store.list()[0]!.id, { statuses: [], eventTypes: [] })).toHaveLength(0);
    dispatcher();
    await receiver.waitFor((r) => r.length === 2);
    expect(receiver.of(e.id)).toHaveLength(2);
    expect(receiver.of(e.id)[0]!.headers['e2b-event-id']).toBe(receiver.of(e.id)[1]!.headers['e2b-event-id']);
  });

  it('a webhook disabled or unsubscribed before its delivery records a canceled attempt; a deleted one takes its rows', async () => {
    const w = hook(['sandbox.lifecycle.created', 'sandbox.lifecycle.killed']);
    store.enqueue(event('sandbox.lifecycle.created'), '{}', Date.now());
    store.update(w.id, { enabled: false });
    dispatcher();
    await waitUntil(() => store.pendingCount() === 0);
    expect(receiver.received).toHaveLength(0);
    expect(store.attemptFigures(w.id, { statuses: [], eventTypes: [] }).map((a) => a.status)).toEqual([
      'failed',
    ]);
    expect(
      store.deliveryGroups(
        w.id,
        { statuses: [], eventTypes: [] },
        { offset: 0, limit: 1, orderAsc: true },
      )[0]!.attempts[0]!.errorClass,
    ).toBe('canceled');
    store.update(w.id, { enabled: true });
    store.enqueue(event('sandbox.lifecycle.killed'), '{}', Date.now() + 3_600_000);
    expect(store.pendingCount(w.id)).toBe(1);
    expect(store.delete(w.id)).toBe(true);
    expect(store.pendingCount()).toBe(0);
    expect(db.prepare('SELECT COUNT(*) AS n FROM webhook_deliveries').get()).toEqual({ n: 0 });
  });

  it('keeps at most history_per_webhook attempts, the newest', async () => {
    store = new WebhookStore(db, 3);
    const w = hook();
    const d = dispatcher();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const e = event('sandbox.lifecycle.created');
      ids.push(e.id);
      d.enqueue(e);
    }
    // At least once: under load a delivery may time out after the receiver got it and be sent again.
    const distinct = (r: typeof receiver.received) => [...new Set(r.map((x) => x.body.id as string))];
    await receiver.waitFor((r) => distinct(r).length >= 5);
    await waitUntil(() => store.pendingCount() === 0);
    const groups = store.deliveryGroups(
      w.id,
      { statuses: [], eventTypes: [] },
      { offset: 0, limit: 10, orderAsc: true },
    );
    expect(groups).toHaveLength(3);
    expect(new Set(groups.map((g) => g.eventId))).toEqual(new Set(distinct(receiver.received).slice(-3)));
  });

  it('a name resolving to a refused address at delivery time gets no request', async () => {
    // This host's name resolves to loopback (/etc/hosts); the name itself passes the check when written.
    const name = hostname();
    expect((await lookup(name)).address).toMatch(/^127\./);
    const w = hook(['sandbox.lifecycle.created'], receiver.url.replace('127.0.0.1', name));
    dispatcher({ maxAttempts: 1, policy: { allowLoopback: false, apiPort: 1, internalCidrs: [] } }).enqueue(
      event('sandbox.lifecycle.created'),
    );
    await waitUntil(() => store.pendingCount() === 0);
    expect(receiver.received).toHaveLength(0);
    const [a] = store.deliveryGroups(
      w.id,
      { statuses: [], eventTypes: [] },
      { offset: 0, limit: 1, orderAsc: true },
    )[0]!.attempts;
    expect(a).toMatchObject({ status: 'failed', errorClass: 'request_error' });
    expect(a!.errorMessage).toMatch(/resolves to .*loopback/);
  });

  it('refuses a create beyond the maximum', () => {
    for (let i = 0; i < 2; i++)
      expect(
        store.create(
          { name: '', url: receiver.url, enabled: true, events: ['sandbox.lifecycle.created'], secret: 'x' },
          2,
        ),
      ).toBeDefined();
    expect(
      store.create(
        { name: '', url: receiver.url, enabled: true, events: ['sandbox.lifecycle.created'], secret: 'x' },
        2,
      ),
    ).toBeUndefined();
    expect(store.count()).toBe(2);
  });
});

describe('the receiver example of docs/events.md', () => {
  it('verifies real deliveries, refuses a forged one and handles a repeated event once', async () => {
    const script = fileURLToPath(new URL('../../../../docs/examples/webhook-receiver.mjs', import.meta.url));
    const probe = await new TestWebhookReceiver('x').start();
    const port = Number(new URL(probe.url).port);
    await probe.close();
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, WEBHOOK_SECRET: 'example-secret', PORT: String(port) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const dir = mkdtempSync(join(tmpdir(), 'aenv-webhooks-'));
    const db = openStateDb(join(dir, 'state.db'), migrations);
    const store = new WebhookStore(db, 100);
    const d = new WebhookDispatcher(store, {
      maxAttempts: 1,
      backoff: { initialMs: 50, maxMs: 50 },
      timeoutMs: 10_000,
      policy: { allowLoopback: true, apiPort: 1, internalCidrs: [] },
      logger,
    });
    try {
      await waitUntil(() => out.includes('listening'));
      const url = `http://127.0.0.1:${port}/`;
      // The same event through two webhooks: two deliveries, one handling.
      const ids = [1, 2].map(
        (i) =>
          store.create(
            {
              name: `w${i}`,
              url,
              enabled: true,
              events: ['sandbox.lifecycle.killed'],
              secret: 'example-secret',
            },
            10,
          )!.id,
      );
      d.start();
      const e = event('sandbox.lifecycle.killed');
      d.enqueue(e);
      await waitUntil(() => store.pendingCount() === 0);
      for (const id of ids)
        expect(store.attemptFigures(id, { statuses: [], eventTypes: [] }).map((a) => a.status)).toEqual([
          'success',
        ]);
      const forged = await fetch(url, {
        method: 'POST',
        headers: { 'e2b-signature': 'forged' },
        body: JSON.stringify({ ...e, id: randomUUID() }),
      });
      expect(forged.status).toBe(401);
      await waitUntil(() => out.includes(e.id));
      const handled = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { id: string });
      expect(handled).toEqual([{ verified: true, id: e.id, type: e.type, sandboxId: e.sandboxId }]);
    } finally {
      await d.stop();
      child.kill();
      db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

async function waitUntil(pred: () => boolean, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`condition not met in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
