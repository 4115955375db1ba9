import type { Migration, StateDb } from '../state/db.js';

export type SandboxLogLevel = 'debug' | 'info' | 'warn' | 'error';

/** One line of a sandbox's logs (`GET /sandboxes/{id}/logs`). */
export interface SandboxLogLine {
  timestampMs: number;
  level: SandboxLogLevel;
  /** Who wrote it: `lifecycle` (this node), `envd`, `aenv-init`. */
  logger: string;
  message: string;
  fields: Record<string, string>;
}

export const sandboxLogMigrations: Migration[] = [
  {
    id: 'observability-0001-sandbox-logs',
    up: (db) =>
      db.exec(`CREATE TABLE sandbox_logs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        sandbox_id TEXT NOT NULL,
        ts_ms INTEGER NOT NULL,
        level TEXT NOT NULL,
        logger TEXT NOT NULL,
        message TEXT NOT NULL,
        fields TEXT NOT NULL
      );
      CREATE INDEX sandbox_logs_by_sandbox ON sandbox_logs (sandbox_id, seq);
      CREATE TABLE sandbox_log_ends (
        sandbox_id TEXT PRIMARY KEY,
        ended_ms INTEGER NOT NULL
      )`),
  },
];

export interface SandboxLogStoreOptions {
  /** Lines kept per sandbox; the oldest go first (a caller pausing and resuming in a loop cannot grow it). */
  maxPerSandbox: number;
  /** How long the lines of a killed sandbox stay readable. */
  retentionMs: number;
  now?: () => number;
}

/**
 * The lifecycle events of every sandbox this node knows, in the node's state database: they survive restarts,
 * and those of a killed sandbox stay readable for `retentionMs`.
 */
export class SandboxLogStore {
  private readonly insertStmt;
  private readonly trimStmt;
  private readonly listStmt;
  private readonly hasStmt;
  private readonly endStmt;
  private readonly expiredStmt;
  private readonly now: () => number;

  constructor(
    private readonly db: StateDb,
    private readonly opts: SandboxLogStoreOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.insertStmt = db.prepare(
      `INSERT INTO sandbox_logs (sandbox_id, ts_ms, level, logger, message, fields)
       VALUES (@sandboxId, @ts, @level, @logger, @message, @fields)`,
    );
    this.trimStmt = db.prepare(
      `DELETE FROM sandbox_logs WHERE sandbox_id = @sandboxId AND seq <= (
         SELECT seq FROM sandbox_logs WHERE sandbox_id = @sandboxId ORDER BY seq DESC LIMIT 1 OFFSET @keep)`,
    );
    this.listStmt = db.prepare(
      'SELECT ts_ms, level, logger, message, fields FROM sandbox_logs WHERE sandbox_id = ? ORDER BY seq',
    );
    this.hasStmt = db.prepare('SELECT 1 FROM sandbox_logs WHERE sandbox_id = ? LIMIT 1');
    this.endStmt = db.prepare(
      'INSERT INTO sandbox_log_ends (sandbox_id, ended_ms) VALUES (?, ?) ON CONFLICT(sandbox_id) DO NOTHING',
    );
    this.expiredStmt = db.prepare('SELECT sandbox_id FROM sandbox_log_ends WHERE ended_ms <= ?');
  }

  append(sandboxId: string, line: Omit<SandboxLogLine, 'timestampMs'> & { timestampMs?: number }): void {
    this.db.transaction(() => {
      this.insertStmt.run({
        sandboxId,
        ts: line.timestampMs ?? this.now(),
        level: line.level,
        logger: line.logger,
        message: line.message,
        fields: JSON.stringify(line.fields),
      });
      this.trimStmt.run({ sandboxId, keep: this.opts.maxPerSandbox });
    })();
  }

  /** Lines of the sandbox, oldest first (empty when it has none). */
  list(sandboxId: string): SandboxLogLine[] {
    const rows = this.listStmt.all(sandboxId) as {
      ts_ms: number;
      level: SandboxLogLevel;
      logger: string;
      message: string;
      fields: string;
    }[];
    return rows.map((r) => ({
      timestampMs: r.ts_ms,
      level: r.level,
      logger: r.logger,
      message: r.message,
      fields: JSON.parse(r.fields) as Record<string, string>,
    }));
  }

  has(sandboxId: string): boolean {
    return this.hasStmt.get(sandboxId) !== undefined;
  }

  /** The sandbox is gone: its lines expire after the retention. */
  ended(sandboxId: string): void {
    this.endStmt.run(sandboxId, this.now());
  }

  /** Marks every sandbox with lines but not in `live` as ended (startup: sandboxes that went while the node was down). */
  endAllExcept(live: ReadonlySet<string>): void {
    const ids = this.db.prepare('SELECT DISTINCT sandbox_id FROM sandbox_logs').all() as {
      sandbox_id: string;
    }[];
    for (const { sandbox_id: id } of ids) if (!live.has(id)) this.ended(id);
  }

  /** Removes the lines of sandboxes that ended longer ago than the retention; returns how many sandboxes. */
  prune(): number {
    const expired = this.expiredStmt.all(this.now() - this.opts.retentionMs) as { sandbox_id: string }[];
    if (expired.length === 0) return 0;
    this.db.transaction(() => {
      for (const { sandbox_id: id } of expired) {
        this.db.prepare('DELETE FROM sandbox_logs WHERE sandbox_id = ?').run(id);
        this.db.prepare('DELETE FROM sandbox_log_ends WHERE sandbox_id = ?').run(id);
      }
    })();
    return expired.length;
  }
}
