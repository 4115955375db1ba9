import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStateDb, type StateDb } from '../state/db.js';
import { SandboxLogStore, sandboxLogMigrations } from './sandbox-log-store.js';

describe('SandboxLogStore', () => {
  let dir: string;
  let db: StateDb;
  afterEach(() => {
    db?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function open(now: () => number, maxPerSandbox = 3) {
    dir = mkdtempSync(join(tmpdir(), 'aenv-logs-'));
    db = openStateDb(join(dir, 'state.db'), sandboxLogMigrations);
    return new SandboxLogStore(db, { maxPerSandbox, retentionMs: 1000, now });
  }

  it('keeps the last lines of each sandbox apart from the others, and expires them after the sandbox ended', () => {
    let now = 0;
    const store = open(() => now);
    for (let i = 1; i <= 5; i++)
      store.append('a', { level: 'info', logger: 'lifecycle', message: `a${i}`, fields: { n: String(i) } });
    store.append('b', { level: 'warn', logger: 'lifecycle', message: 'b1', fields: {}, timestampMs: 42 });
    expect(store.list('a').map((l) => l.message)).toEqual(['a3', 'a4', 'a5']);
    expect(store.list('b')).toEqual([
      { timestampMs: 42, level: 'warn', logger: 'lifecycle', message: 'b1', fields: {} },
    ]);
    expect(store.list('c')).toEqual([]);
    expect(store.has('c')).toBe(false);

    store.ended('a');
    now = 999;
    expect(store.prune()).toBe(0);
    expect(store.has('a')).toBe(true);
    now = 1000;
    expect(store.prune()).toBe(1);
    expect(store.has('a')).toBe(false);
    expect(store.has('b')).toBe(true);
  });

  it('ends the sandboxes that are gone at startup, and survives a reopen', () => {
    let now = 0;
    const store = open(() => now);
    store.append('live', { level: 'info', logger: 'lifecycle', message: 'x', fields: {} });
    store.append('gone', { level: 'info', logger: 'lifecycle', message: 'y', fields: {} });
    store.endAllExcept(new Set(['live']));
    now = 5000;
    expect(store.prune()).toBe(1);
    db.close();
    db = openStateDb(join(dir, 'state.db'), sandboxLogMigrations);
    const again = new SandboxLogStore(db, { maxPerSandbox: 3, retentionMs: 1000, now: () => now });
    expect(again.list('live').map((l) => l.message)).toEqual(['x']);
    expect(again.has('gone')).toBe(false);
  });
});
