// The volume service against a real state database and real directories (a plain-directory VolumeDisks: the
// CoW volume's subvolumes and quotas are exercised by test/e2e/volumes.test.ts).
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isDomainError } from '@aenv/protocol';
import type { VolumeDisks } from '../runtime/driver.js';
import { openStateDb, type StateDb } from '../state/db.js';
import { volumeMigrations } from './catalog.js';
import { NodeVolumeStore } from './node-store.js';
import { VolumeService } from './service.js';

const silent = { info() {}, warn() {}, error() {}, debug() {}, child: () => silent } as never;

function dirDisks(root: string): VolumeDisks {
  return {
    enforcesLimits: true,
    ownerRange: { hostStart: 100000, size: 65536 },
    dirOf: (id) => join(root, id),
    async create(id) {
      mkdirSync(join(root, id), { recursive: true });
      return join(root, id);
    },
    async remove(id) {
      rmSync(join(root, id), { recursive: true, force: true });
    },
    async list() {
      return readdirSync(root);
    },
  };
}

describe('VolumeService', () => {
  let dir: string;
  let db: StateDb;
  let svc: VolumeService;
  const make = () =>
    new VolumeService({
      store: new NodeVolumeStore(db, dirDisks(join(dir, 'v')), silent),
      maxSizeMB: 64,
      maxVolumeCount: 2,
      tokenSecret: 'k'.repeat(40),
      logger: silent,
    });
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-vol-'));
    mkdirSync(join(dir, 'v'));
    db = openStateDb(join(dir, 'state.db'), volumeMigrations);
    svc = make();
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates, finds, lists and deletes; a duplicate name is a conflict, an unknown id not found', async () => {
    const v = await svc.create('data');
    expect(await svc.get(v.volumeID)).toEqual(v);
    expect(await svc.list()).toEqual([{ volumeID: v.volumeID, name: 'data' }]);
    await expect(svc.create('data')).rejects.toSatisfy((e) => isDomainError(e, 'already_exists'));
    expect(svc.tokenMatches(v.volumeID, v.token)).toBe(true);
    expect(svc.tokenMatches(v.volumeID, v.token.slice(1))).toBe(false);
    expect(svc.tokenMatches(v.volumeID, svc.token('other'))).toBe(false);
    await svc.delete(v.volumeID);
    await expect(svc.get(v.volumeID)).rejects.toThrow(/not found/);
    await expect(svc.delete(v.volumeID)).rejects.toSatisfy((e) => isDomainError(e, 'not_found'));
    expect(readdirSync(join(dir, 'v'))).toEqual([]);
  });

  it('refuses deletion while a sandbox mounts the volume or a create holds it', async () => {
    const v = await svc.create('busy');
    let users = ['sbx-1'];
    svc.setUsers(() => new Map([[v.volumeID, users]]));
    await expect(svc.delete(v.volumeID)).rejects.toSatisfy((e) => isDomainError(e, 'conflict'));
    users = [];
    const release = svc.hold(await svc.resolveMounts([{ name: 'busy', path: '/data' }]));
    await expect(svc.delete(v.volumeID)).rejects.toSatisfy((e) => isDomainError(e, 'conflict'));
    release();
    release();
    await svc.delete(v.volumeID);
  });

  it('resolves mounts: count limit, overlap, unknown names; a snapshot needs its volumes', async () => {
    const a = await svc.create('a');
    await svc.create('b');
    expect(await svc.resolveMounts([{ name: 'a', path: '/x/' }])).toEqual([
      { volumeId: a.volumeID, name: 'a', path: '/x' },
    ]);
    const bad = [
      [
        { name: 'a', path: '/x' },
        { name: 'b', path: '/x/y' },
      ],
      [
        { name: 'a', path: '/x' },
        { name: 'b', path: '/x' },
      ],
      [
        { name: 'a', path: '/x' },
        { name: 'b', path: '/y' },
        { name: 'a', path: '/z' },
      ],
      [{ name: 'c', path: '/x' }],
      [null],
      { name: 'a' },
    ];
    for (const m of bad) await expect(svc.resolveMounts(m), JSON.stringify(m)).rejects.toThrow();
    const needed = [{ volumeId: a.volumeID, name: 'a', path: '/snap' }];
    expect(await svc.resolveMounts(undefined, needed)).toEqual(needed);
    // The request's own mount at the same path wins.
    expect((await svc.resolveMounts([{ name: 'b', path: '/snap' }], needed)).map((m) => m.name)).toEqual([
      'b',
    ]);
    await svc.delete(a.volumeID);
    await expect(svc.resolveMounts(undefined, needed)).rejects.toThrow(/no longer exists/);
  });

  it('finishes a create or delete a crash interrupted and removes directories no row owns', async () => {
    const kept = await svc.create('kept');
    db.prepare(`INSERT INTO volumes VALUES ('half', 'half', 64, 'creating', 'x')`).run();
    mkdirSync(join(dir, 'v', 'half'));
    mkdirSync(join(dir, 'v', 'stray'));
    await make().init();
    expect(readdirSync(join(dir, 'v'))).toEqual([kept.volumeID]);
    expect((await svc.list()).map((v) => v.name)).toEqual(['kept']);
  });
});
