// Which sandbox holds which uid/gid range, kept in state.db so that no two sandboxes ever get the same range,
// across restarts too. A range is held for the sandbox's whole life — running or paused, since its disk is
// owned by it — and freed when the sandbox is killed. See docs/security.md, "uid isolation".
import type { Migration, StateDb } from '../../../state/db.js';
import type { IdRange } from '../../driver.js';
import type { IdLayout } from './id-ranges.js';
import { rangeOfBlock } from './id-ranges.js';

export const idRangeMigrations: Migration[] = [
  {
    id: 'runtime-0001-id-ranges',
    up: (db) =>
      db.exec(`CREATE TABLE id_ranges (
        block INTEGER PRIMARY KEY,
        owner TEXT NOT NULL UNIQUE,
        allocated_at TEXT NOT NULL
      );
      CREATE TABLE id_range_cursor (
        id INTEGER PRIMARY KEY CHECK (id = 0),
        last_block INTEGER NOT NULL
      )`),
  },
];

/** Every range is in use: a clear error for the caller to pass on. */
export class NoFreeIdRangeError extends Error {
  constructor(count: number) {
    super(
      `no free uid range: all ${count} (runtime.uid_ranges) are held by sandboxes on this node; kill some or raise runtime.uid_ranges`,
    );
    this.name = 'NoFreeIdRangeError';
  }
}

export class IdRangeAllocator {
  private readonly byOwner;
  private readonly used;
  private readonly insert;
  private readonly deleteOwner;
  private readonly moveOwner;
  private readonly all;
  private readonly cursor;
  private readonly setCursor;

  constructor(
    private readonly db: StateDb,
    readonly layout: IdLayout,
  ) {
    this.byOwner = db.prepare<[string], { block: number }>('SELECT block FROM id_ranges WHERE owner = ?');
    this.used = db.prepare<[], { block: number }>('SELECT block FROM id_ranges ORDER BY block');
    this.insert = db.prepare('INSERT INTO id_ranges (block, owner, allocated_at) VALUES (?, ?, ?)');
    this.deleteOwner = db.prepare('DELETE FROM id_ranges WHERE owner = ?');
    this.moveOwner = db.prepare('UPDATE id_ranges SET owner = ? WHERE owner = ?');
    this.all = db.prepare<[], { block: number; owner: string }>('SELECT block, owner FROM id_ranges');
    this.cursor = db.prepare<[], { last_block: number }>(
      'SELECT last_block FROM id_range_cursor WHERE id = 0',
    );
    this.setCursor = db.prepare(
      'INSERT INTO id_range_cursor (id, last_block) VALUES (0, ?) ON CONFLICT(id) DO UPDATE SET last_block = excluded.last_block',
    );
  }

  /** The range `owner` holds, if any. */
  get(owner: string): IdRange | undefined {
    const row = this.byOwner.get(owner);
    return row ? rangeOfBlock(this.layout, row.block) : undefined;
  }

  /**
   * The range `owner` holds, or a free one now held by it. Next-fit: the search starts after the range
   * handed out last, so a freed range is reused as late as possible.
   */
  acquire(owner: string): IdRange {
    return this.db.transaction(() => {
      const held = this.get(owner);
      if (held) return held;
      const used = new Set(this.used.all().map((r) => r.block));
      const last = this.cursor.get()?.last_block ?? 0;
      const count = this.layout.count;
      for (let i = 1; i <= count; i++) {
        const block = ((last + i - 1) % count) + 1;
        if (used.has(block)) continue;
        this.insert.run(block, owner, new Date().toISOString());
        this.setCursor.run(block);
        return rangeOfBlock(this.layout, block);
      }
      throw new NoFreeIdRangeError(count);
    })();
  }

  /** Gives the range of `from` to `to` (a pre-started sandbox handed to a sandbox). */
  transfer(from: string, to: string): void {
    this.db.transaction(() => {
      if (this.get(to)) throw new Error(`${to} already holds a uid range`);
      this.moveOwner.run(to, from);
    })();
  }

  release(owner: string): void {
    this.deleteOwner.run(owner);
  }

  /** Frees every range whose owner is not in `keep` (startup: what no known sandbox holds). Returns them. */
  retainOnly(keep: Iterable<string>): string[] {
    const kept = new Set(keep);
    return this.db.transaction(() => {
      const freed: string[] = [];
      for (const row of this.all.all()) {
        if (kept.has(row.owner)) continue;
        this.deleteOwner.run(row.owner);
        freed.push(row.owner);
      }
      return freed;
    })();
  }
}
