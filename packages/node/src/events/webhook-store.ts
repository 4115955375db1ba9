import { randomUUID } from 'node:crypto';
import type { Migration, StateDb } from '../state/db.js';
import type { SandboxEventType } from './sandbox-events.js';
import type { WebhookDeliveryAttempt, WebhookErrorClass } from '@aenv/protocol';

/** A registered webhook as the node keeps it; `secret` never leaves the node (docs/events.md#webhooks). */
export interface Webhook {
  id: string;
  name: string;
  url: string;
  enabled: boolean;
  events: SandboxEventType[];
  secret: string;
  createdAt: string;
}

/** One event waiting to be delivered to one webhook: the outbox row. */
export interface PendingDelivery {
  seq: number;
  webhookId: string;
  eventId: string;
  eventType: string;
  sandboxId: string;
  /** The exact bytes sent (and signed) on every attempt. */
  body: string;
  /** Attempts made so far. */
  attempts: number;
  nextAt: number;
}

/** The wire shapes are the contract's (@aenv/protocol); the node stores attempts in exactly that shape. */
export type ErrorClass = WebhookErrorClass;
export type DeliveryAttempt = Omit<WebhookDeliveryAttempt, 'teamId'>;

export const webhookMigrations: Migration[] = [
  {
    id: 'events-0002-webhooks',
    up: (db) =>
      db.exec(`CREATE TABLE webhooks (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        url TEXT NOT NULL,
        enabled INTEGER NOT NULL,
        events TEXT NOT NULL,
        secret TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE TABLE webhook_outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        webhook_id TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
        event_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        sandbox_id TEXT NOT NULL,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at INTEGER NOT NULL,
        UNIQUE (webhook_id, event_id)
      );
      CREATE INDEX webhook_outbox_due ON webhook_outbox (next_at);
      CREATE TABLE webhook_deliveries (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        webhook_id TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
        event_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        status TEXT NOT NULL,
        at INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        attempt TEXT NOT NULL
      );
      CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, seq);`),
  },
  {
    // 1: a copy of a definition in the cluster's repository (docs/events.md#in-a-cluster); 0: this node's own.
    id: 'events-0003-webhooks-shared',
    up: (db) => db.exec('ALTER TABLE webhooks ADD COLUMN shared INTEGER NOT NULL DEFAULT 0'),
  },
];

interface WebhookRow {
  id: string;
  name: string;
  url: string;
  enabled: number;
  events: string;
  secret: string;
  created_at: string;
}

const toWebhook = (r: WebhookRow): Webhook => ({
  id: r.id,
  name: r.name,
  url: r.url,
  enabled: r.enabled === 1,
  events: JSON.parse(r.events) as SandboxEventType[],
  secret: r.secret,
  createdAt: r.created_at,
});

export interface DeliveryFilter {
  statuses: readonly ('success' | 'failed')[];
  eventTypes: readonly string[];
  startMs?: number;
  endMs?: number;
}

/** The node's webhooks, their outbox and their delivery history, in state.db. */
export class WebhookStore {
  constructor(
    private readonly db: StateDb,
    private readonly historyPerWebhook: number,
  ) {}

  count(): number {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM webhooks').get() as { n: number }).n;
  }

  list(): Webhook[] {
    return (this.db.prepare('SELECT * FROM webhooks ORDER BY created_at, id').all() as WebhookRow[]).map(
      toWebhook,
    );
  }

  get(id: string): Webhook | undefined {
    const r = this.db.prepare('SELECT * FROM webhooks WHERE id = ?').get(id) as WebhookRow | undefined;
    return r && toWebhook(r);
  }

  /** Creates a webhook unless the node already has `max` (checked in the same transaction). */
  create(w: Omit<Webhook, 'id' | 'createdAt'>, max: number): Webhook | undefined {
    const row: Webhook = { ...w, id: randomUUID(), createdAt: new Date().toISOString() };
    return this.db.transaction(() => {
      if (this.count() >= max) return undefined;
      this.db
        .prepare(
          `INSERT INTO webhooks (id, name, url, enabled, events, secret, created_at)
           VALUES (@id, @name, @url, @enabled, @events, @secret, @createdAt)`,
        )
        .run({ ...row, enabled: row.enabled ? 1 : 0, events: JSON.stringify(row.events) });
      return row;
    })();
  }

  update(id: string, patch: Partial<Omit<Webhook, 'id' | 'createdAt'>>): Webhook | undefined {
    return this.db.transaction(() => {
      const cur = this.get(id);
      if (!cur) return undefined;
      const next = { ...cur, ...patch };
      this.db
        .prepare(
          'UPDATE webhooks SET name = @name, url = @url, enabled = @enabled, events = @events, secret = @secret WHERE id = @id',
        )
        .run({ ...next, enabled: next.enabled ? 1 : 0, events: JSON.stringify(next.events) });
      return next;
    })();
  }

  /** Stores the repository's copy of a definition (marked shared), keeping its outbox and history. */
  upsertShared(w: Webhook): void {
    this.db
      .prepare(
        `INSERT INTO webhooks (id, name, url, enabled, events, secret, created_at, shared)
         VALUES (@id, @name, @url, @enabled, @events, @secret, @createdAt, 1)
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, url = excluded.url, enabled = excluded.enabled,
           events = excluded.events, secret = excluded.secret, shared = 1`,
      )
      .run({ ...w, enabled: w.enabled ? 1 : 0, events: JSON.stringify(w.events) });
  }

  /** Ids of the definitions copied from the repository (a shared one missing there was deleted). */
  sharedIds(): string[] {
    return (this.db.prepare('SELECT id FROM webhooks WHERE shared = 1').all() as { id: string }[]).map(
      (r) => r.id,
    );
  }

  /** Definitions this node made before it shared a repository: published once, then shared. */
  unshared(): Webhook[] {
    return (this.db.prepare('SELECT * FROM webhooks WHERE shared = 0').all() as WebhookRow[]).map(toWebhook);
  }

  /** Deletes the webhook with its pending deliveries and history. */
  delete(id: string): boolean {
    return this.db.prepare('DELETE FROM webhooks WHERE id = ?').run(id).changes > 0;
  }

  /**
   * Puts one event in the outbox of every enabled webhook subscribed to its type, in one transaction: once the
   * event is stored, its deliveries survive a restart or a crash (docs/events.md#delivery-guarantees).
   */
  enqueue(e: { id: string; type: string; sandboxId: string }, body: string, now: number): number {
    const hooks = this.list().filter((w) => w.enabled && (w.events as string[]).includes(e.type));
    if (!hooks.length) return 0;
    const insert = this.db.prepare(
      `INSERT OR IGNORE INTO webhook_outbox (webhook_id, event_id, event_type, sandbox_id, body, next_at)
       VALUES (?, ?, ?, ?, ?, ?)`,
    );
    this.db.transaction(() => {
      for (const w of hooks) insert.run(w.id, e.id, e.type, e.sandboxId, body, now);
    })();
    return hooks.length;
  }

  /** Outbox rows due at `now`, oldest first, leaving out `busy` (in flight). */
  due(now: number, limit: number, busy: ReadonlySet<number>): PendingDelivery[] {
    const rows = this.db
      .prepare(
        `SELECT seq, webhook_id AS webhookId, event_id AS eventId, event_type AS eventType,
                sandbox_id AS sandboxId, body, attempts, next_at AS nextAt
         FROM webhook_outbox WHERE next_at <= ? ORDER BY next_at, seq LIMIT ?`,
      )
      .all(now, limit + busy.size) as PendingDelivery[];
    return rows.filter((r) => !busy.has(r.seq)).slice(0, limit);
  }

  /** When the next row not in `busy` falls due, or undefined when the outbox is empty. */
  nextDueAt(busy: ReadonlySet<number>): number | undefined {
    const rows = this.db
      .prepare('SELECT seq, next_at AS nextAt FROM webhook_outbox ORDER BY next_at LIMIT ?')
      .all(busy.size + 1) as { seq: number; nextAt: number }[];
    return rows.find((r) => !busy.has(r.seq))?.nextAt;
  }

  /** Records an attempt and settles its outbox row: removed when done or given up, else rescheduled. */
  settle(p: PendingDelivery, attempt: DeliveryAttempt, retryAt: number | undefined): void {
    this.db.transaction(() => {
      // The webhook may have been deleted while the attempt was in flight: then there is nothing to record.
      if (!this.get(p.webhookId)) return;
      this.db
        .prepare(
          `INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type, status, at, duration_ms, attempt)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(
          attempt.id,
          attempt.webhookId,
          attempt.eventId,
          attempt.eventType,
          attempt.status,
          Date.parse(attempt.timestamp),
          attempt.durationMs,
          JSON.stringify(attempt),
        );
      this.db
        .prepare(
          `DELETE FROM webhook_deliveries WHERE webhook_id = ? AND seq <= (
             SELECT seq FROM webhook_deliveries WHERE webhook_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`,
        )
        .run(p.webhookId, p.webhookId, this.historyPerWebhook);
      if (retryAt === undefined) this.db.prepare('DELETE FROM webhook_outbox WHERE seq = ?').run(p.seq);
      else
        this.db
          .prepare('UPDATE webhook_outbox SET attempts = attempts + 1, next_at = ? WHERE seq = ?')
          .run(retryAt, p.seq);
    })();
  }

  pendingCount(webhookId?: string): number {
    const r = (
      webhookId === undefined
        ? this.db.prepare('SELECT COUNT(*) AS n FROM webhook_outbox').get()
        : this.db.prepare('SELECT COUNT(*) AS n FROM webhook_outbox WHERE webhook_id = ?').get(webhookId)
    ) as { n: number };
    return r.n;
  }

  private where(webhookId: string, f: DeliveryFilter): { sql: string; params: unknown[] } {
    const clauses = ['webhook_id = ?'];
    const params: unknown[] = [webhookId];
    if (f.statuses.length) {
      clauses.push(`status IN (${f.statuses.map(() => '?').join(', ')})`);
      params.push(...f.statuses);
    }
    if (f.eventTypes.length) {
      clauses.push(`event_type IN (${f.eventTypes.map(() => '?').join(', ')})`);
      params.push(...f.eventTypes);
    }
    if (f.startMs !== undefined) {
      clauses.push('at >= ?');
      params.push(f.startMs);
    }
    if (f.endMs !== undefined) {
      clauses.push('at < ?');
      params.push(f.endMs);
    }
    return { sql: clauses.join(' AND '), params };
  }

  /**
   * Attempts grouped by event (E2B's `WebhookDeliveryGroup`), groups ordered by their first matching attempt,
   * `offset`/`limit` counting groups.
   */
  deliveryGroups(
    webhookId: string,
    f: DeliveryFilter,
    page: { offset: number; limit: number; orderAsc: boolean },
  ): { eventId: string; attempts: DeliveryAttempt[] }[] {
    const w = this.where(webhookId, f);
    const events = this.db
      .prepare(
        `SELECT event_id AS eventId FROM webhook_deliveries WHERE ${w.sql}
         GROUP BY event_id ORDER BY MIN(seq) ${page.orderAsc ? 'ASC' : 'DESC'} LIMIT ? OFFSET ?`,
      )
      .all(...w.params, page.limit, page.offset) as { eventId: string }[];
    const attemptsOf = this.db.prepare(
      `SELECT attempt FROM webhook_deliveries WHERE ${w.sql} AND event_id = ? ORDER BY seq ASC`,
    );
    return events.map(({ eventId }) => ({
      eventId,
      attempts: (attemptsOf.all(...w.params, eventId) as { attempt: string }[]).map(
        (r) => JSON.parse(r.attempt) as DeliveryAttempt,
      ),
    }));
  }

  /** Status, time and duration of every attempt in the range, oldest first (for the stats). */
  attemptFigures(webhookId: string, f: DeliveryFilter): { status: string; at: number; durationMs: number }[] {
    const w = this.where(webhookId, f);
    return this.db
      .prepare(
        `SELECT status, at, duration_ms AS durationMs FROM webhook_deliveries WHERE ${w.sql} ORDER BY seq ASC`,
      )
      .all(...w.params) as { status: string; at: number; durationMs: number }[];
  }
}
