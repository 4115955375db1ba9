// The node's volumes in the state database. A row is written before its directory is made and removed after
// the directory is gone, with its state saying which step it was in: a crash between them is finished at the
// next start (`VolumeService.init`).
import type { Migration, StateDb } from '../state/db.js';
import type { VolumeRow } from './types.js';

export const volumeMigrations: Migration[] = [
  {
    id: 'volume-0001-volumes',
    up: (db) =>
      db.exec(`CREATE TABLE volumes (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        size_mb INTEGER NOT NULL,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL
      )`),
  },
];

export type VolumeRowState = 'creating' | 'ready' | 'deleting';

interface Row {
  id: string;
  name: string;
  size_mb: number;
  state: VolumeRowState;
  created_at: string;
}

const toVolume = (r: Row): VolumeRow => ({
  id: r.id,
  name: r.name,
  sizeMB: r.size_mb,
  createdAt: r.created_at,
});

export class VolumeCatalog {
  constructor(private readonly db: StateDb) {}

  /** Inserts a `creating` row; false when the name is taken (by a volume in any state). */
  insert(v: VolumeRow): boolean {
    const r = this.db
      .prepare(
        `INSERT INTO volumes (id, name, size_mb, state, created_at) VALUES (?, ?, ?, 'creating', ?)
         ON CONFLICT(name) DO NOTHING`,
      )
      .run(v.id, v.name, v.sizeMB, v.createdAt);
    return r.changes === 1;
  }

  /** Durable (full fsync): a volume the API said exists must survive a machine crash. */
  setState(id: string, state: VolumeRowState): void {
    this.db.pragma('synchronous = FULL');
    try {
      this.db.prepare('UPDATE volumes SET state = ? WHERE id = ?').run(state, id);
    } finally {
      this.db.pragma('synchronous = NORMAL');
    }
  }

  delete(id: string): void {
    this.db.prepare('DELETE FROM volumes WHERE id = ?').run(id);
  }

  get(id: string): VolumeRow | undefined {
    const r = this.db.prepare(`SELECT * FROM volumes WHERE id = ? AND state = 'ready'`).get(id) as
      Row | undefined;
    return r ? toVolume(r) : undefined;
  }

  byName(name: string): VolumeRow | undefined {
    const r = this.db.prepare(`SELECT * FROM volumes WHERE name = ? AND state = 'ready'`).get(name) as
      Row | undefined;
    return r ? toVolume(r) : undefined;
  }

  list(): VolumeRow[] {
    return (
      this.db.prepare(`SELECT * FROM volumes WHERE state = 'ready' ORDER BY created_at, id`).all() as Row[]
    ).map(toVolume);
  }

  /** Rows a crash left half made or half removed. */
  unfinished(): { id: string; state: VolumeRowState }[] {
    return this.db.prepare(`SELECT id, state FROM volumes WHERE state != 'ready'`).all() as {
      id: string;
      state: VolumeRowState;
    }[];
  }

  allIds(): Set<string> {
    return new Set((this.db.prepare('SELECT id FROM volumes').all() as { id: string }[]).map((r) => r.id));
  }
}
