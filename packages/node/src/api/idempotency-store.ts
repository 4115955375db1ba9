// The durable half of `Idempotency-Key` (docs/differences.md, "Idempotency-Key"): one row per key in state.db,
// holding what identifies the request (a fingerprint of route and body) and, once the create answered, that
// answer. Keys are the team's own: a row is found only by the team (API key) that made it, so the same key from
// another team is another key and never reads its answer (access token included). Rows expire after the
// retention window and the oldest answered ones are dropped past a cap counted over all teams.
import type { Migration, StateDb } from '../state/db.js';

export const idempotencyMigrations: Migration[] = [
  {
    id: 'idempotency-0001-keys',
    up: (db) =>
      db.exec(`CREATE TABLE idempotency_keys (
        team TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        state TEXT NOT NULL,
        sandbox_id TEXT,
        answer TEXT,
        PRIMARY KEY (team, key)
      );
      CREATE INDEX idempotency_keys_by_age ON idempotency_keys (state, created_at)`),
  },
];

/** An answer as it went out: replayed byte for byte. */
export interface StoredAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * `running`: the request is being served (or was, when the server stopped); `sandboxId` is the sandbox it
 * started, once it has one. `answered`: the answer is kept.
 */
export type IdempotencyEntry =
  | { key: string; fingerprint: string; createdAt: number; state: 'running'; sandboxId?: string }
  | { key: string; fingerprint: string; createdAt: number; state: 'answered'; answer: StoredAnswer };

/** A request that was being served when the server stopped, of whichever team. */
export type InterruptedEntry = Extract<IdempotencyEntry, { state: 'running' }> & { team: string };

interface Row {
  team: string;
  key: string;
  fingerprint: string;
  created_at: number;
  state: string;
  sandbox_id: string | null;
  answer: string | null;
}

export interface IdempotencyStoreOptions {
  /** The team this node serves (the holder of its API key): the only one whose keys it reads or writes. */
  team: string;
  retentionMs: number;
  maxKeys: number;
  now?: () => number;
}

export class IdempotencyStore {
  private readonly now: () => number;
  private readonly getStmt;
  private readonly insertStmt;
  private readonly sandboxStmt;
  private readonly answerStmt;
  private readonly deleteStmt;
  private readonly expireStmt;
  private readonly countStmt;
  private readonly evictStmt;
  private readonly runningStmt;

  constructor(
    db: StateDb,
    private readonly opts: IdempotencyStoreOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.getStmt = db.prepare('SELECT * FROM idempotency_keys WHERE team = ? AND key = ?');
    this.insertStmt = db.prepare(
      `INSERT OR REPLACE INTO idempotency_keys (team, key, fingerprint, created_at, state, sandbox_id, answer)
       VALUES (?, ?, ?, ?, 'running', NULL, NULL)`,
    );
    this.sandboxStmt = db.prepare(
      `UPDATE idempotency_keys SET sandbox_id = ? WHERE team = ? AND key = ? AND state = 'running'`,
    );
    this.answerStmt = db.prepare(
      `INSERT INTO idempotency_keys (team, key, fingerprint, created_at, state, sandbox_id, answer)
       VALUES (@team, @key, @fingerprint, @createdAt, 'answered', NULL, @answer)
       ON CONFLICT(team, key) DO UPDATE SET state = 'answered', answer = excluded.answer`,
    );
    this.deleteStmt = db.prepare('DELETE FROM idempotency_keys WHERE team = ? AND key = ?');
    this.expireStmt = db.prepare(`DELETE FROM idempotency_keys WHERE state = 'answered' AND created_at <= ?`);
    this.countStmt = db.prepare(`SELECT COUNT(*) AS n FROM idempotency_keys WHERE state = 'answered'`);
    this.evictStmt = db.prepare(
      `DELETE FROM idempotency_keys WHERE rowid IN (
         SELECT rowid FROM idempotency_keys WHERE state = 'answered' ORDER BY created_at, rowid LIMIT ?)`,
    );
    this.runningStmt = db.prepare(`SELECT * FROM idempotency_keys WHERE state = 'running'`);
  }

  /** The key's entry; an expired one is deleted and reads as absent. */
  get(key: string): IdempotencyEntry | undefined {
    const row = this.getStmt.get(this.opts.team, key) as Row | undefined;
    if (!row) return undefined;
    const entry = decode(row);
    if (!entry || (entry.state === 'answered' && this.expired(entry.createdAt))) {
      this.deleteStmt.run(this.opts.team, key);
      return undefined;
    }
    return entry;
  }

  /** Records that a request with this key is being served (replacing an expired entry); returns its time. */
  begin(key: string, fingerprint: string): number {
    this.prune(1);
    const at = this.now();
    this.insertStmt.run(this.opts.team, key, fingerprint, at);
    return at;
  }

  /** The sandbox the running request started: what a restart needs to know the request's outcome. */
  noteSandbox(key: string, sandboxId: string): void {
    this.sandboxStmt.run(sandboxId, this.opts.team, key);
  }

  /**
   * Keeps the answer. `createdAt` is the request's start (what the retention counts from); an entry evicted
   * meanwhile is written again.
   */
  answer(
    key: string,
    fingerprint: string,
    createdAt: number,
    answer: StoredAnswer,
    team = this.opts.team,
  ): void {
    this.answerStmt.run({ team, key, fingerprint, createdAt, answer: JSON.stringify(answer) });
  }

  /** Forgets the key: the next request with it runs afresh. */
  release(key: string, team = this.opts.team): void {
    this.deleteStmt.run(team, key);
  }

  /**
   * Entries of requests that were being served when the server stopped, of every team (the API key may have
   * changed since): `answer` and `release` take the entry's `team` to settle them.
   */
  interrupted(): InterruptedEntry[] {
    return (this.runningStmt.all() as Row[]).flatMap((r) => {
      const e = decode(r);
      return e?.state === 'running' ? [{ ...e, team: r.team }] : [];
    });
  }

  /** Drops expired answers, then the oldest ones beyond the cap, leaving room for `free` more. */
  prune(free = 0): void {
    this.expireStmt.run(this.now() - this.opts.retentionMs);
    const { n } = this.countStmt.get() as { n: number };
    const over = n - this.opts.maxKeys + free;
    if (over > 0) this.evictStmt.run(over);
  }

  private expired(createdAt: number): boolean {
    return createdAt <= this.now() - this.opts.retentionMs;
  }
}

function decode(row: Row): IdempotencyEntry | undefined {
  const base = { key: row.key, fingerprint: row.fingerprint, createdAt: row.created_at };
  if (row.state === 'running')
    return { ...base, state: 'running', ...(row.sandbox_id ? { sandboxId: row.sandbox_id } : {}) };
  if (row.state !== 'answered' || row.answer === null) return undefined;
  try {
    const a = JSON.parse(row.answer) as StoredAnswer;
    if (typeof a.status !== 'number' || typeof a.body !== 'string' || typeof a.headers !== 'object')
      return undefined;
    return { ...base, state: 'answered', answer: a };
  } catch {
    return undefined;
  }
}
