import { chmodSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStateDb } from './db.js';

const mode = (p: string) => statSync(p).mode & 0o777;

describe('openStateDb', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps the database, its -wal and -shm owner-only, and fixes older files', () => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-db-'));
    const path = join(dir, 'state', 'state.db');
    const db = openStateDb(path, [{ id: 't-1', up: (d) => d.exec('CREATE TABLE t (v TEXT)') }]);
    db.prepare('INSERT INTO t VALUES (?)').run('SECRET=1');
    for (const f of [path, `${path}-wal`, `${path}-shm`]) expect(mode(f)).toBe(0o600);
    expect(mode(join(dir, 'state'))).toBe(0o700);
    db.close();
    // A database written by an older version (0644, like its -wal and -shm) is made private on open.
    writeFileSync(`${path}-wal`, '');
    for (const f of [path, `${path}-wal`]) chmodSync(f, 0o644);
    openStateDb(path, []).close();
    expect(mode(path)).toBe(0o600);
  });
});
