import type { Migration, StateDb } from '../state/db.js';
import type { SandboxRecord } from './types.js';

export const orchestratorMigrations: Migration[] = [
  {
    id: 'orchestrator-0001-sandboxes',
    up: (db) =>
      db.exec(`CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        record TEXT NOT NULL,
        updated_at TEXT NOT NULL
      )`),
  },
];

/** Durable copy of every sandbox record; the orchestrator's in-memory map is rebuilt from it at startup. */
export class SandboxStore {
  private readonly upsertStmt;
  private readonly deleteStmt;
  private readonly allStmt;

  constructor(private readonly db: StateDb) {
    this.upsertStmt = db.prepare(
      `INSERT INTO sandboxes (id, state, record, updated_at) VALUES (@id, @state, @record, @updatedAt)
       ON CONFLICT(id) DO UPDATE SET state = excluded.state, record = excluded.record, updated_at = excluded.updated_at`,
    );
    this.deleteStmt = db.prepare('DELETE FROM sandboxes WHERE id = ?');
    this.allStmt = db.prepare('SELECT id, record FROM sandboxes');
  }

  /**
   * Writes the record. `durable` forces a full fsync of this commit (used when a pause completes: the paused
   * sandbox must survive a machine crash, not only a process crash).
   */
  save(record: SandboxRecord, durable = false): void {
    const row = {
      id: record.id,
      state: record.state,
      record: JSON.stringify(record),
      updatedAt: new Date().toISOString(),
    };
    if (!durable) {
      this.upsertStmt.run(row);
      return;
    }
    this.db.pragma('synchronous = FULL');
    try {
      this.upsertStmt.run(row);
    } finally {
      this.db.pragma('synchronous = NORMAL');
    }
  }

  delete(id: string): void {
    this.deleteStmt.run(id);
  }

  /** Every stored record; rows that do not decode are returned separately so the caller can clean them up. */
  loadAll(): { records: SandboxRecord[]; undecodable: string[] } {
    const records: SandboxRecord[] = [];
    const undecodable: string[] = [];
    for (const row of this.allStmt.all() as { id: string; record: string }[]) {
      try {
        const r = JSON.parse(row.record) as SandboxRecord;
        if (r.id !== row.id || typeof r.state !== 'string') throw new Error('mismatch');
        records.push(r);
      } catch {
        undecodable.push(row.id);
      }
    }
    return { records, undecodable };
  }
}
