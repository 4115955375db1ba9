import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SecretStore, secretMigrations } from '../secrets/secret-store.js';
import { createSnapshotRepository } from '../snapshot/index.js';
import type { SnapshotRepository } from '../snapshot/repository.js';
import { openStateDb, type StateDb } from '../state/db.js';
import { SharedSecrets } from './shared-secrets.js';

const log = pino({ level: 'silent' });
const CLUSTER_KEY = randomBytes(32);

/** Nodes with their own state.db, one posix_fs repository between them (docs/networking.md#secrets-in-a-cluster). */
describe('/secrets shared through the repository', () => {
  let dir: string;
  const nodes: { db: StateDb; store: SecretStore; repo: SnapshotRepository; secrets: SharedSecrets }[] = [];
  const node = (name: string, key = CLUSTER_KEY) => {
    const db = openStateDb(join(dir, `${name}.db`), secretMigrations);
    const store = new SecretStore(db, key);
    const repo = createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'shared') },
      localCachePath: join(dir, `${name}-cache`),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      logger: log,
      signing: { secret: 'cluster-secret' },
    });
    const n = { db, store, repo, secrets: new SharedSecrets(store, repo, log) };
    nodes.push(n);
    return n;
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-shared-secrets-'));
  });
  afterEach(async () => {
    for (const n of nodes.splice(0)) {
      n.secrets.stop();
      await n.repo.close();
      n.db.close();
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('a secret made on one node is served and filled in by the other; updates and deletes reach it', async () => {
    const [a, b] = [node('a'), node('b')];
    const made = await a.secrets.create('upstream', 'sk-one-7f3e', { team: 't' }, 10);
    if (typeof made === 'string') throw new Error(made);
    expect(await b.secrets.get(made.secretID)).toEqual(made);
    expect(await b.secrets.get('UPSTREAM')).toEqual(made);
    expect(b.secrets.valueOf('upstream')).toBe('sk-one-7f3e');
    // Only sealed in the repository: the value is in no file of it.
    const docs = join(dir, 'shared', 'repository', 'catalog', 'secrets');
    expect(readdirSync(docs)).toEqual([`${made.secretID}.json`]);
    expect(readFileSync(join(docs, `${made.secretID}.json`), 'utf8')).not.toContain('sk-one');

    const updated = await b.secrets.update('upstream', 'sk-two-1a2b', { team: 'u' });
    expect(updated).toMatchObject({ currentVersion: 2, metadata: { team: 'u' } });
    expect((await a.secrets.get('upstream'))?.currentVersion).toBe(2);
    expect(a.secrets.valueOf('upstream')).toBe('sk-two-1a2b');

    expect(await a.secrets.delete(made.secretID)).toBe(true);
    expect(await b.secrets.get('upstream')).toBeUndefined();
    expect(b.secrets.valueOf('upstream')).toBeUndefined();
    expect(await b.secrets.delete('upstream')).toBe(false);
    expect(await b.secrets.update('upstream', 'x')).toBeUndefined();
  });

  it('names are unique and the limit holds across nodes; a page token means the same on every node', async () => {
    const [a, b] = [node('a'), node('b')];
    expect(typeof (await a.secrets.create('one', 'v', {}, 3))).toBe('object');
    expect(await b.secrets.create('one', 'other', {}, 3)).toBe('exists');
    expect(typeof (await b.secrets.create('two', 'v', {}, 3))).toBe('object');
    expect(typeof (await a.secrets.create('three', 'v', {}, 3))).toBe('object');
    expect(await b.secrets.create('four', 'v', {}, 3)).toBe('full');
    const first = await a.secrets.list(2);
    const rest = await b.secrets.list(2, first.next);
    expect([...first.items, ...rest.items].map((s) => s.name).sort()).toEqual(['one', 'three', 'two']);
    expect(rest.next).toBeUndefined();
    expect((await a.secrets.list(100)).items).toEqual((await b.secrets.list(100)).items);
  });

  it('the timer copies secrets made elsewhere, so egress finds them without any API call on this node', async () => {
    const [a, b] = [node('a'), node('b')];
    b.secrets.start();
    await a.secrets.create('late', 'sk-late', {}, 10);
    for (let i = 0; i < 100 && b.secrets.valueOf('late') === undefined; i++)
      await new Promise((r) => setTimeout(r, 100));
    expect(b.secrets.valueOf('late')).toBe('sk-late');
  });

  it('publishes a secret made before the node shared a repository; a name taken there wins', async () => {
    const a = node('a');
    a.store.create('mine', 'local-value', {});
    a.store.create('taken', 'local-taken', {});
    const b = node('b');
    await b.secrets.create('taken', 'cluster-taken', {}, 10);
    expect((await a.secrets.list(10)).items.map((s) => s.name).sort()).toEqual(['mine', 'taken']);
    expect(b.secrets.valueOf('mine')).toBeUndefined(); // b has not copied yet
    await b.secrets.list(10);
    expect(b.secrets.valueOf('mine')).toBe('local-value');
    expect(a.secrets.valueOf('taken')).toBe('cluster-taken');
  });

  it('a node with another key serves the metadata but cannot open the value (egress refuses the header)', async () => {
    const [a, other] = [node('a'), node('other', randomBytes(32))];
    await a.secrets.create('k', 'v', {}, 10);
    expect((await other.secrets.get('k'))?.name).toBe('k');
    expect(() => other.secrets.valueOf('k')).toThrow();
  });
});
