import Database from 'better-sqlite3';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { applyMigrations, openStateDb } from '../../../state/db.js';
import { IdRangeAllocator, idRangeMigrations, NoFreeIdRangeError } from './id-range-allocator.js';

const L = { start: 100000, size: 65536, count: 3 };

function memoryAllocator(count = L.count) {
  const db = new Database(':memory:');
  applyMigrations(db, idRangeMigrations);
  return new IdRangeAllocator(db, { ...L, count });
}

describe('IdRangeAllocator', () => {
  let dir: string | undefined;
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('gives every owner its own sandbox range, the same one when asked again', () => {
    const a = memoryAllocator();
    const r1 = a.acquire('s1');
    const r2 = a.acquire('s2');
    expect(r1).toEqual({ hostStart: 165536, size: 65536 });
    expect(r2).toEqual({ hostStart: 165536 + 65536, size: 65536 });
    expect(a.acquire('s1')).toEqual(r1);
    expect(a.get('s2')).toEqual(r2);
    expect(a.get('nobody')).toBeUndefined();
  });

  it('reuses a freed range as late as possible, and says clearly when none is left', () => {
    const a = memoryAllocator();
    const [r1, r2, r3] = [a.acquire('a'), a.acquire('b'), a.acquire('c')];
    expect(() => a.acquire('d')).toThrow(NoFreeIdRangeError);
    expect(() => a.acquire('d')).toThrow(/all 3 \(runtime.uid_ranges\)/);
    a.release('a');
    a.release('b');
    // Next-fit from the last one handed out (c): a's range comes round first, then b's.
    expect(a.acquire('e')).toEqual(r1);
    expect(a.acquire('f')).toEqual(r2);
    expect(new Set([r1.hostStart, r2.hostStart, r3.hostStart]).size).toBe(3);
  });

  it('moves a range to a new owner (a pre-started sandbox handed out) and refuses a double holder', () => {
    const a = memoryAllocator();
    const warm = a.acquire('warm-1');
    a.transfer('warm-1', 'sbx');
    expect(a.get('sbx')).toEqual(warm);
    expect(a.get('warm-1')).toBeUndefined();
    a.acquire('other');
    expect(() => a.transfer('other', 'sbx')).toThrow(/already holds/);
  });

  it('keeps allocations across a restart and frees what no known sandbox holds', async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-ranges-'));
    const path = join(dir, 'state.db');
    const db1 = openStateDb(path, idRangeMigrations);
    const a1 = new IdRangeAllocator(db1, L);
    const kept = a1.acquire('paused-1');
    a1.acquire('warm-x');
    a1.acquire('build:y');
    db1.close();
    const db2 = openStateDb(path, idRangeMigrations);
    const a2 = new IdRangeAllocator(db2, L);
    expect(a2.get('paused-1')).toEqual(kept);
    expect(a2.retainOnly(['paused-1', 'never-had-one']).sort()).toEqual(['build:y', 'warm-x']);
    expect(a2.get('warm-x')).toBeUndefined();
    // A new sandbox never gets the kept one.
    const fresh = [a2.acquire('n1'), a2.acquire('n2')];
    for (const r of fresh) expect(r.hostStart).not.toBe(kept.hostStart);
    db2.close();
  });
});
