import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSnapshotRepository } from '../snapshot/index.js';
import type { SnapshotRepository } from '../snapshot/repository.js';
import { openStateDb, type StateDb } from '../state/db.js';
import { sandboxEventMigrations } from './sandbox-events.js';
import { SharedDefinitions } from './webhook-definitions.js';
import { WebhookStore, webhookMigrations } from './webhook-store.js';

const log = pino({ level: 'silent' });
const fields = (url: string) => ({
  name: 'n',
  url,
  enabled: true,
  events: ['sandbox.lifecycle.created' as const],
  secret: 's3cret',
});

/** Two nodes: each its own state.db, one posix_fs repository between them (docs/events.md#in-a-cluster). */
describe('webhook definitions shared through the repository', () => {
  let dir: string;
  const nodes: { db: StateDb; store: WebhookStore; repo: SnapshotRepository; defs: SharedDefinitions }[] = [];
  const node = (name: string) => {
    const db = openStateDb(join(dir, `${name}.db`), [...sandboxEventMigrations, ...webhookMigrations]);
    const store = new WebhookStore(db, 100);
    const repo = createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'shared') },
      localCachePath: join(dir, `${name}-cache`),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      logger: log,
      signing: { secret: 'cluster-secret' },
    });
    const n = { db, store, repo, defs: new SharedDefinitions(store, repo, log) };
    nodes.push(n);
    return n;
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-webhook-defs-'));
  });
  afterEach(async () => {
    for (const n of nodes.splice(0)) {
      n.defs.stop();
      await n.repo.close();
      n.db.close();
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('a webhook made on one node is delivered by the other; updates and deletes reach it too', async () => {
    const [a, b] = [node('a'), node('b')];
    const w = (await a.defs.create(fields('http://one.test/'), 10))!;
    expect((await b.defs.list()).map((x) => [x.id, x.url])).toEqual([[w.id, 'http://one.test/']]);
    // b delivers its own events to it, signed with the same secret.
    expect(b.store.get(w.id)?.secret).toBe('s3cret');
    expect(b.store.enqueue({ id: 'e1', type: 'sandbox.lifecycle.created', sandboxId: 'x' }, '{}', 0)).toBe(1);
    await b.defs.update(w.id, { url: 'http://two.test/', enabled: false });
    expect((await a.defs.get(w.id))?.url).toBe('http://two.test/');
    expect(a.store.get(w.id)?.enabled).toBe(false);
    expect(await a.defs.delete(w.id)).toBe(true);
    expect(await b.defs.get(w.id)).toBeUndefined();
    expect(b.store.pendingCount()).toBe(0);
    expect(await b.defs.delete(w.id)).toBe(false);
  });

  it('max_webhooks counts the whole cluster', async () => {
    const [a, b] = [node('a'), node('b')];
    expect(await a.defs.create(fields('http://1.test/'), 2)).toBeDefined();
    expect(await b.defs.create(fields('http://2.test/'), 2)).toBeDefined();
    expect(await a.defs.create(fields('http://3.test/'), 2)).toBeUndefined();
    expect(await b.defs.list()).toHaveLength(2);
  });

  it('a node that joins later gets every definition on its first sync', async () => {
    const a = node('a');
    const w = (await a.defs.create(fields('http://one.test/'), 10))!;
    const late = node('late');
    late.defs.start();
    expect((await late.defs.list()).map((x) => x.id)).toEqual([w.id]);
    expect(late.store.get(w.id)?.secret).toBe('s3cret');
  });

  it('publishes webhooks made before the node shared a repository, once', async () => {
    const a = node('a');
    const local = a.store.create(fields('http://old.test/'), 10)!;
    const b = node('b');
    expect(await b.defs.list()).toEqual([]);
    expect((await a.defs.list()).map((x) => x.id)).toEqual([local.id]);
    expect((await b.defs.list()).map((x) => x.id)).toEqual([local.id]);
    expect(await b.defs.delete(local.id)).toBe(true);
    // Deleted in the cluster: not published again by the node that first had it.
    expect(await a.defs.list()).toEqual([]);
  });

  it('a tampered document is not used and does not delete the copy a node has', async () => {
    const [a, b] = [node('a'), node('b')];
    const w = (await a.defs.create(fields('http://one.test/'), 10))!;
    await b.defs.list();
    const path = join(dir, 'shared/repository/catalog/webhooks', `${w.id}.json`);
    writeFileSync(path, readFileSync(path, 'utf8').replace('http://one.test/', 'http://evil.test/'));
    expect((await b.defs.list()).map((x) => x.url)).toEqual(['http://one.test/']);
    expect((await node('c').defs.list()).map((x) => x.url)).toEqual([]);
  });
});
