import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStateDb, type StateDb } from '../state/db.js';
import { IdempotencyStore, idempotencyMigrations, type StoredAnswer } from './idempotency-store.js';

const answer = (n: number): StoredAnswer => ({
  status: 201,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ sandboxID: `s${n}` }),
});

describe('IdempotencyStore', () => {
  let dir: string;
  let path: string;
  let db: StateDb;
  let clock: number;
  const open = (opts: { retentionMs?: number; maxKeys?: number; team?: string } = {}) =>
    new IdempotencyStore(db, {
      team: opts.team ?? 'team-a',
      retentionMs: opts.retentionMs ?? 60_000,
      maxKeys: opts.maxKeys ?? 100,
      now: () => clock,
    });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'idem-store-'));
    path = join(dir, 'state.db');
    db = openStateDb(path, idempotencyMigrations);
    clock = 1_000_000;
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('goes from running (with its sandbox) to answered, and forgets a released key', () => {
    const s = open();
    expect(s.get('k1')).toBeUndefined();
    const at = s.begin('k1', 'fp1');
    expect(at).toBe(clock);
    expect(s.get('k1')).toEqual({ key: 'k1', fingerprint: 'fp1', createdAt: clock, state: 'running' });
    s.noteSandbox('k1', 'sbx-1');
    expect(s.interrupted()).toEqual([
      {
        team: 'team-a',
        key: 'k1',
        fingerprint: 'fp1',
        createdAt: clock,
        state: 'running',
        sandboxId: 'sbx-1',
      },
    ]);
    s.answer('k1', 'fp1', at, answer(1));
    expect(s.get('k1')).toEqual({
      key: 'k1',
      fingerprint: 'fp1',
      createdAt: clock,
      state: 'answered',
      answer: answer(1),
    });
    expect(s.interrupted()).toEqual([]);
    s.begin('k2', 'fp2');
    s.release('k2');
    expect(s.get('k2')).toBeUndefined();
  });

  it("never reads or settles another team's key; lists every team's interrupted ones", () => {
    const a = open();
    const b = open({ team: 'team-b' });
    a.answer('k1', 'fp1', a.begin('k1', 'fp1'), answer(1));
    expect(b.get('k1')).toBeUndefined();
    // team b's own k1 is its own row: beginning, answering and releasing it leaves team a's as it was.
    b.answer('k1', 'fp2', b.begin('k1', 'fp2'), answer(2));
    expect(b.get('k1')).toMatchObject({ fingerprint: 'fp2', answer: answer(2) });
    b.release('k1');
    expect(a.get('k1')).toMatchObject({ fingerprint: 'fp1', answer: answer(1) });
    b.begin('k2', 'fp');
    expect(a.interrupted()).toEqual([expect.objectContaining({ team: 'team-b', key: 'k2' })]);
    a.release('k2', 'team-b');
    expect(b.get('k2')).toBeUndefined();
  });

  it('keeps answers across a reopen of state.db, which only its owner can read', () => {
    const s = open();
    s.answer('k1', 'fp1', s.begin('k1', 'fp1'), answer(1));
    db.close();
    chmodSync(path, 0o644); // as a server from before this rule left it
    db = openStateDb(path, idempotencyMigrations);
    expect(open().get('k1')).toMatchObject({ state: 'answered', answer: answer(1) });
    for (const f of [path, `${path}-wal`]) expect(statSync(f).mode & 0o777).toBe(0o600);
  });

  it('drops an answer once the retention has passed', () => {
    const s = open({ retentionMs: 10_000 });
    s.answer('k1', 'fp1', s.begin('k1', 'fp1'), answer(1));
    clock += 9_999;
    expect(s.get('k1')?.state).toBe('answered');
    clock += 1;
    expect(s.get('k1')).toBeUndefined();
    expect(db.prepare('SELECT COUNT(*) AS n FROM idempotency_keys').get()).toEqual({ n: 0 });
  });

  it('keeps at most maxKeys answers, dropping the oldest first', () => {
    const s = open({ maxKeys: 3 });
    for (let i = 1; i <= 5; i++) {
      clock += 1;
      s.answer(`k${i}`, 'fp', s.begin(`k${i}`, 'fp'), answer(i));
    }
    const kept = (db.prepare('SELECT key FROM idempotency_keys ORDER BY key').all() as { key: string }[]).map(
      (r) => r.key,
    );
    expect(kept).toEqual(['k3', 'k4', 'k5']);
    expect(s.get('k1')).toBeUndefined();
  });

  it('reads an undecodable answer as absent and removes it', () => {
    const s = open();
    db.prepare(
      `INSERT INTO idempotency_keys (team, key, fingerprint, created_at, state, answer) VALUES ('team-a', 'bad', 'fp', ?, 'answered', '{')`,
    ).run(clock);
    expect(s.get('bad')).toBeUndefined();
    expect(db.prepare(`SELECT COUNT(*) AS n FROM idempotency_keys`).get()).toEqual({ n: 0 });
  });
});
