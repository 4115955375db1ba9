import Database from 'better-sqlite3';
import { chmodSync, closeSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';

export type StateDb = Database.Database;

/**
 * One schema change. `id` is global and permanent ("0001-sandboxes", "image-0001-layers", ...):
 * once released, a migration is never edited, only followed by a new one.
 */
export interface Migration {
  id: string;
  up(db: StateDb): void;
}

/** Opens (creating if needed) the node's state database and applies pending migrations in order. */
export function openStateDb(path: string, migrations: readonly Migration[]): StateDb {
  if (path !== ':memory:') makePrivate(path);
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // WAL + NORMAL: every commit survives a process crash; callers that need machine-crash durability
  // (a completed pause) raise it to FULL for that commit.
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  applyMigrations(db, migrations);
  return db;
}

/**
 * The database holds sandboxes' env vars and metadata: owner-only, in a 0700 dir. SQLite gives the -wal and
 * -shm files the mode of the database file, so that file is made (or fixed) first; older ones are fixed too.
 */
function makePrivate(path: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  closeSync(openSync(path, 'a', 0o600));
  for (const f of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      chmodSync(f, 0o600);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
}

export function applyMigrations(db: StateDb, migrations: readonly Migration[]): void {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    id TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL
  )`);
  const applied = new Set(
    (db.prepare('SELECT id FROM schema_migrations').all() as { id: string }[]).map((r) => r.id),
  );
  const seen = new Set<string>();
  for (const m of migrations) {
    if (seen.has(m.id)) throw new Error(`duplicate migration id ${m.id}`);
    seen.add(m.id);
    if (applied.has(m.id)) continue;
    db.transaction(() => {
      m.up(db);
      db.prepare('INSERT INTO schema_migrations (id, applied_at) VALUES (?, ?)').run(
        m.id,
        new Date().toISOString(),
      );
    })();
  }
}
