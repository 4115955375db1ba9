import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openStateDb } from '../state/db.js';
import { SecretStore, secretMigrations } from './secret-store.js';
import { resolveSecretsKey as resolve } from './secrets-key.js';

const resolveSecretsKey = (homePath: string) => resolve({ homePath }).key;

const root = mkdtempSync(join(tmpdir(), 'aenv-secret-store-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
function open() {
  const home = join(root, `h${n++}`);
  mkdirSync(home);
  const path = join(home, 'state.db');
  const db = openStateDb(path, secretMigrations);
  // A second apart: the list is in creation order (ties go by the random id).
  let t = Date.parse('2026-01-01T00:00:00.000Z');
  const clock = () => new Date((t += 1000));
  return { home, path, db, store: new SecretStore(db, resolveSecretsKey(home), clock) };
}

describe('secret store', () => {
  it('keeps values sealed at rest under a 0600 node key, returning them only through valueOf', () => {
    const { home, path, db, store } = open();
    const created = store.create('api-key', 'sk-live-0123456789', { team: 'a' })!;
    expect(created).toMatchObject({ name: 'api-key', currentVersion: 1, metadata: { team: 'a' } });
    expect(created.secretID).toMatch(/^sec_[0-9a-f]{24}$/);
    expect(JSON.stringify(created)).not.toContain('sk-live');
    expect(store.valueOf('api-key')).toBe('sk-live-0123456789');
    db.close();
    expect(readFileSync(path).includes('sk-live-0123456789')).toBe(false);
    expect(statSync(join(home, 'secrets', 'secrets-key')).mode & 0o777).toBe(0o600);
    // The same key on the next start: the value still opens.
    const again = new SecretStore(openStateDb(path, secretMigrations), resolveSecretsKey(home));
    expect(again.valueOf('api-key')).toBe('sk-live-0123456789');
  });

  it('finds by id or name, versions updates, refuses a taken name, deletes, pages in creation order', () => {
    const { store } = open();
    const a = store.create('a', 'v1', {})!;
    expect(store.create('a', 'other', {})).toBeNull();
    expect(store.get(a.secretID)).toEqual(store.get('A'));
    const updated = store.update('a', 'v2')!;
    expect(updated.currentVersion).toBe(2);
    expect(updated.metadata).toEqual({});
    expect(store.valueOf('a')).toBe('v2');
    expect(store.update('a', 'v3', { k: 'v' })!.metadata).toEqual({ k: 'v' });
    for (const name of ['b', 'c']) store.create(name, 'x', {});
    const first = store.list(2);
    expect(first.items.map((s) => s.name)).toEqual(['a', 'b']);
    expect(store.list(2, first.next!).items.map((s) => s.name)).toEqual(['c']);
    expect(store.list(2, first.next!).next).toBeUndefined();
    expect(store.delete(a.secretID)).toBe(true);
    expect(store.delete('a')).toBe(false);
    expect(store.valueOf('a')).toBeUndefined();
    expect(store.update('a', 'x')).toBeUndefined();
    expect(store.count()).toBe(2);
  });

  it('refuses a sealed value moved to another secret (the id is authenticated)', () => {
    const { db, store } = open();
    store.create('one', 'first', {});
    store.create('two', 'second', {});
    db.prepare(
      `UPDATE secrets SET sealed = (SELECT sealed FROM secrets WHERE name = 'one') WHERE name = 'two'`,
    ).run();
    expect(() => store.valueOf('two')).toThrow();
    expect(store.valueOf('one')).toBe('first');
  });
});
