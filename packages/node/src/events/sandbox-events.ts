import { randomUUID } from 'node:crypto';
import type { Migration, StateDb } from '../state/db.js';
import type { LifecycleEvent } from '../orchestrator/orchestrator.js';

/** E2B's lifecycle event types (docs/events.md). */
export const SANDBOX_EVENT_TYPES = [
  'sandbox.lifecycle.created',
  'sandbox.lifecycle.updated',
  'sandbox.lifecycle.paused',
  'sandbox.lifecycle.resumed',
  'sandbox.lifecycle.killed',
  'sandbox.lifecycle.checkpointed',
] as const;
export type SandboxEventType = (typeof SANDBOX_EVENT_TYPES)[number];

/** One event as `GET /events/sandboxes/{id}` serves it (E2B's v1 shape). */
export interface SandboxEvent {
  version: 'v1';
  id: string;
  type: SandboxEventType;
  eventData: Record<string, string> | null;
  sandboxBuildId: string | null;
  sandboxExecutionId: string | null;
  sandboxId: string;
  sandboxTeamId: string;
  sandboxTemplateId: string | null;
  timestamp: string;
}

/** E2B keeps lifecycle events 7 days; the node also caps their number so a busy node's db stays bounded. */
export const EVENT_RETENTION_MS = 7 * 24 * 3600_000;
export const MAX_STORED_EVENTS = 100_000;

export const sandboxEventMigrations: Migration[] = [
  {
    id: 'events-0001-sandbox-events',
    up: (db) =>
      db.exec(`CREATE TABLE sandbox_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        sandbox_id TEXT NOT NULL,
        type TEXT NOT NULL,
        at INTEGER NOT NULL,
        event TEXT NOT NULL
      );
      CREATE INDEX sandbox_events_by_sandbox ON sandbox_events (sandbox_id, seq);`),
  },
];

/** Which orchestrator lifecycle events are API events, as which type and with which data. */
function toApiEvent(
  e: LifecycleEvent,
): { type: SandboxEventType; data: Record<string, string> | null } | undefined {
  const f = e.fields ?? {};
  const pick = (...keys: string[]) => {
    const out: Record<string, string> = {};
    for (const k of keys) if (f[k] !== undefined) out[k] = f[k];
    return Object.keys(out).length ? out : null;
  };
  switch (e.event) {
    case 'created':
      return { type: 'sandbox.lifecycle.created', data: pick('forkedFrom') };
    case 'paused':
      return { type: 'sandbox.lifecycle.paused', data: pick('kind', 'cause') };
    case 'resumed':
      return { type: 'sandbox.lifecycle.resumed', data: pick('kind') };
    case 'killed':
      return { type: 'sandbox.lifecycle.killed', data: pick('cause') };
    case 'lost':
      return { type: 'sandbox.lifecycle.killed', data: { cause: 'lost' } };
    case 'forked':
      return { type: 'sandbox.lifecycle.updated', data: pick('fork') };
    case 'snapshotted':
      return { type: 'sandbox.lifecycle.checkpointed', data: pick('snapshotID') };
    default:
      return undefined;
  }
}

export interface EventQuery {
  sandboxId?: string;
  offset: number;
  limit: number;
  orderAsc: boolean;
  types: readonly SandboxEventType[];
}

/** The node's lifecycle events, kept in state.db for EVENT_RETENTION_MS and at most MAX_STORED_EVENTS. */
export class SandboxEventStore {
  private readonly insert;
  private inserts = 0;

  constructor(
    private readonly db: StateDb,
    private readonly opts: {
      teamId: string;
      retentionMs?: number;
      maxEvents?: number;
      now?: () => number;
      /** Told of each event inside the transaction that stores it (the webhook outbox); a throw loses the event. */
      onEvent?: (e: SandboxEvent) => void;
    },
  ) {
    this.insert = db.prepare(
      'INSERT INTO sandbox_events (id, sandbox_id, type, at, event) VALUES (@id, @sandboxId, @type, @at, @event)',
    );
    this.prune();
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  /** The orchestrator's `onLifecycle`: stores the events the API serves. */
  readonly onLifecycle = (e: LifecycleEvent): void => {
    const api = toApiEvent(e);
    if (!api) return;
    const at = this.now();
    const event: SandboxEvent = {
      version: 'v1',
      id: randomUUID(),
      type: api.type,
      eventData: api.data,
      sandboxBuildId: e.templateId ?? null,
      sandboxExecutionId: e.instanceId ?? null,
      sandboxId: e.sandboxId,
      sandboxTeamId: this.opts.teamId,
      sandboxTemplateId: e.templateId ?? null,
      timestamp: new Date(at).toISOString(),
    };
    // The event and what onEvent stores of it (the webhook outbox) commit together: a crash keeps both or neither.
    this.db.transaction(() => {
      this.insert.run({
        id: event.id,
        sandboxId: e.sandboxId,
        type: event.type,
        at,
        event: JSON.stringify(event),
      });
      this.opts.onEvent?.(event);
    })();
    if (++this.inserts % 500 === 0) this.prune();
  };

  /** Drops events past the retention and the oldest beyond the cap. */
  prune(): void {
    this.db
      .prepare('DELETE FROM sandbox_events WHERE at < ?')
      .run(this.now() - (this.opts.retentionMs ?? EVENT_RETENTION_MS));
    this.db
      .prepare('DELETE FROM sandbox_events WHERE seq <= (SELECT MAX(seq) FROM sandbox_events) - ?')
      .run(this.opts.maxEvents ?? MAX_STORED_EVENTS);
  }

  list(q: EventQuery): SandboxEvent[] {
    const where: string[] = ['at >= @since'];
    const params: Record<string, unknown> = {
      since: this.now() - (this.opts.retentionMs ?? EVENT_RETENTION_MS),
      limit: q.limit,
      offset: q.offset,
    };
    if (q.sandboxId !== undefined) {
      where.push('sandbox_id = @sandboxId');
      params.sandboxId = q.sandboxId;
    }
    if (q.types.length) {
      where.push(`type IN (${q.types.map((_, i) => `@t${i}`).join(', ')})`);
      q.types.forEach((t, i) => (params[`t${i}`] = t));
    }
    const rows = this.db
      .prepare(
        `SELECT event FROM sandbox_events WHERE ${where.join(' AND ')}
         ORDER BY seq ${q.orderAsc ? 'ASC' : 'DESC'} LIMIT @limit OFFSET @offset`,
      )
      .all(params) as { event: string }[];
    return rows.map((r) => JSON.parse(r.event) as SandboxEvent);
  }
}
