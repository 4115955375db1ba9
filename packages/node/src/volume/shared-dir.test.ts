// Volumes on a shared directory: two nodes (two services, each with its own store and node id) on one real
// directory, as two cluster nodes on one NFS export; crashes are left-behind files, as a killed node leaves them.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '@aenv/config';
import { isDomainError } from '@aenv/protocol';
import { VolumeFiles } from './content.js';
import { VolumeService } from './service.js';
import { volumeSettings } from './settings.js';
import { nodeKey, SharedDirStore, STALE_CLAIM_MS } from './shared-dir.js';

const silent = { info() {}, warn() {}, error() {}, debug() {}, child: () => silent } as never;
// The process's own uid: chown to it works without root.
const OWNER = { hostStart: process.getuid?.() ?? 0, size: 65536 };

describe('volumes on a shared directory', () => {
  let root: string;
  const users = { a: new Map<string, string[]>(), b: new Map<string, string[]>() };
  let now = Date.now();
  const store = (node: string) =>
    new SharedDirStore({ root, nodeId: node, owner: OWNER, logger: silent, now: () => now });
  const service = (node: 'a' | 'b') => {
    const s = new VolumeService({
      store: store(`node-${node}`),
      maxSizeMB: 1,
      maxVolumeCount: 4,
      tokenSecret: 'k'.repeat(40),
      logger: silent,
    });
    s.setUsers(() => users[node]);
    return s;
  };
  let a: VolumeService;
  let b: VolumeService;

  beforeEach(async () => {
    root = mkdtempSync(join(tmpdir(), 'aenv-shared-'));
    users.a.clear();
    users.b.clear();
    now = Date.now();
    a = service('a');
    b = service('b');
    await a.init();
    await b.init();
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('one volume for every node: made on one, listed, found by name and mounted on the other', async () => {
    const v = await a.create('data');
    expect(await b.list()).toEqual([{ volumeID: v.volumeID, name: 'data' }]);
    expect(await b.get(v.volumeID)).toEqual(v);
    await expect(b.create('data')).rejects.toSatisfy((e) => isDomainError(e, 'already_exists'));
    const [m] = await b.resolveMounts([{ name: 'data', path: '/d' }]);
    expect(m).toEqual({ volumeId: v.volumeID, name: 'data', path: '/d' });
    const dir = await b.mountDir(v.volumeID);
    expect(dir).toBe(join(root, 'data', v.volumeID));
    expect(statSync(dir).mode & 0o7777).toBe(0o1777);
    for (const d of ['data', 'meta', 'names', 'leases', 'deleting'])
      expect(statSync(join(root, d)).mode & 0o777, d).toBe(0o700);
    // Ids form paths: anything but a UUID names nothing.
    for (const id of ['../meta', '..', 'x/../../etc', ''])
      await expect(a.get(id)).rejects.toSatisfy((e) => isDomainError(e, 'not_found'));
    await expect(a.mountDir('../../etc')).rejects.toSatisfy((e) => isDomainError(e, 'not_found'));
  });

  it("refuses a delete while any node's sandbox mounts the volume, allows it once they are gone", async () => {
    const v = await a.create('busy');
    users.b.set(v.volumeID, ['sbx-on-b']);
    await b.mountDir(v.volumeID); // b's lease
    const refused = await a.delete(v.volumeID).catch((e: unknown) => e);
    expect(isDomainError(refused, 'conflict')).toBe(true);
    expect(String((refused as Error).message)).toMatch(/mounted by sandbox sbx-on-b on node node-b/);
    // A's own sandbox: refused before the shared directory is asked.
    users.a.set(v.volumeID, ['sbx-on-a']);
    await expect(a.delete(v.volumeID)).rejects.toThrow(/mounted by sandbox sbx-on-a;/);
    // Both sandboxes go: B's lease goes with its next reconcile, and the delete goes through from either node.
    users.a.clear();
    users.b.clear();
    await b.reconcileLeases();
    expect(readdirSync(join(root, 'leases', nodeKey('node-b')))).toEqual([]);
    await a.delete(v.volumeID);
    expect(await b.list()).toEqual([]);
    for (const d of ['data', 'meta', 'names', 'deleting']) expect(readdirSync(join(root, d)), d).toEqual([]);
    await expect(b.mountDir(v.volumeID)).rejects.toSatisfy((e) => isDomainError(e, 'not_found'));
    // The name is free again.
    await b.create('busy');
  });

  it('a reconcile rewrites only leases whose sandboxes changed', async () => {
    const v = await a.create('steady');
    users.b.set(v.volumeID, ['sbx-1']);
    await b.mountDir(v.volumeID);
    const file = join(root, 'leases', nodeKey('node-b'), v.volumeID);
    const written = statSync(file).ino; // written by tmp + rename: a rewrite is a new inode
    await b.reconcileLeases();
    expect(statSync(file).ino).toBe(written);
    users.b.set(v.volumeID, ['sbx-1', 'sbx-2']);
    await b.reconcileLeases();
    expect(statSync(file).ino).not.toBe(written);
    expect(readFileSync(file, 'utf8')).toContain('sbx-2');
    // Gone and needed again: written again (the node does not trust its memory over a removed file).
    users.b.clear();
    await b.reconcileLeases();
    expect(existsSync(file)).toBe(false);
    users.b.set(v.volumeID, ['sbx-3']);
    await b.reconcileLeases();
    expect(readFileSync(file, 'utf8')).toContain('sbx-3');
  });

  it('a mount and a delete under way refuse each other, never both go through', async () => {
    const v = await a.create('race');
    // A delete marker as a delete that has not decided yet leaves it: the mount is refused, its lease dropped.
    mkdirSync(join(root, 'deleting', v.volumeID));
    writeFileSync(join(root, 'deleting', v.volumeID, `${nodeKey('node-a')}.0`), '{}');
    await expect(b.mountDir(v.volumeID)).rejects.toThrow(/being deleted/);
    expect(readdirSync(join(root, 'leases', nodeKey('node-b')))).toEqual([]);
    // A marker a node left when it died (old) does not block mounts.
    now += STALE_CLAIM_MS + 1000;
    await b.mountDir(v.volumeID);
  });

  it('a lease of a node that held a sandbox when it died blocks deletion until that node starts again', async () => {
    const v = await a.create('kept');
    users.b.set(v.volumeID, ['sbx-1']);
    await b.mountDir(v.volumeID);
    users.b.clear(); // the node died; its sandboxes are gone with it
    await expect(a.delete(v.volumeID)).rejects.toThrow(/on node node-b/);
    const restarted = service('b');
    await restarted.init();
    await restarted.reconcileLeases();
    await a.delete(v.volumeID);
  });

  it('finishes a delete and drops a create a crash interrupted', async () => {
    const gone = await a.create('gone');
    const kept = await a.create('kept');
    // A delete that removed the metadata, then died: data, name and marker are left.
    rmSync(join(root, 'meta', `${gone.volumeID}.json`));
    mkdirSync(join(root, 'deleting', gone.volumeID));
    writeFileSync(
      join(root, 'deleting', gone.volumeID, `${nodeKey('node-a')}.1`),
      JSON.stringify({ node: 'node-a', name: 'gone' }),
    );
    // A delete of node-a that died before deciding: the volume stays, the marker goes.
    mkdirSync(join(root, 'deleting', kept.volumeID));
    writeFileSync(join(root, 'deleting', kept.volumeID, `${nodeKey('node-a')}.2`), '{}');
    // A create of node-a that claimed a name and made the directory, no metadata.
    const half = '11111111-1111-4111-8111-111111111111';
    writeFileSync(join(root, 'names', 'half'), JSON.stringify({ id: half, node: 'node-a' }));
    mkdirSync(join(root, 'data', half));
    // Another node's create in progress (fresh claim): left alone.
    const other = '22222222-2222-4222-8222-222222222222';
    writeFileSync(join(root, 'names', 'other'), JSON.stringify({ id: other, node: 'node-b' }));
    await service('a').init();
    expect(readdirSync(join(root, 'data')).sort()).toEqual([kept.volumeID]);
    expect(readdirSync(join(root, 'names')).sort()).toEqual(['kept', 'other']);
    expect(readdirSync(join(root, 'deleting'))).toEqual([]);
    expect((await b.list()).map((v) => v.name)).toEqual(['kept']);
    // The other node's claim blocks the name while fresh, and is taken over once stale.
    await expect(b.create('other')).rejects.toSatisfy((e) => isDomainError(e, 'already_exists'));
    const old = (Date.now() - STALE_CLAIM_MS - 1000) / 1000;
    utimesSync(join(root, 'names', 'other'), old, old);
    expect((await b.create('other')).name).toBe('other');
  });

  it('bounds content-API writes by max_size_mb and does not follow links a sandbox planted', async () => {
    const v = await a.create('small');
    const dir = await a.dirOf(v.volumeID);
    const files = new VolumeFiles(dir, OWNER);
    const limitBytes = 1024 * 1024;
    await files.writeFile('/half', Readable.from([Buffer.alloc(600 * 1024)]), { limitBytes });
    const full = await files
      .writeFile('/more', Readable.from([Buffer.alloc(600 * 1024)]), { limitBytes })
      .catch((e: unknown) => e);
    expect(isDomainError(full, 'insufficient_storage')).toBe(true);
    expect(readdirSync(dir)).toEqual(['half']);
    // Replacing a file counts what it frees.
    await files.writeFile('/half', Readable.from([Buffer.alloc(700 * 1024)]), { limitBytes });
    // A link out of the volume (to the shared directory's metadata) is neither followed nor counted.
    symlinkSync(join(root, 'meta'), join(dir, 'up'));
    await expect(files.list('/up')).rejects.toThrow(/symbolic link|not a directory/);
    await expect(files.writeFile('/up/x.json', Readable.from(['{}']))).rejects.toThrow(
      /symbolic link|not a directory/,
    );
    expect(existsSync(join(root, 'meta', 'x.json'))).toBe(false);
  });
});

describe('[volume] settings', () => {
  const load = (toml: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-volcfg-'));
    try {
      writeFileSync(join(dir, 'aenv.toml'), toml);
      return volumeSettings(loadConfig({ configPath: join(dir, 'aenv.toml'), env: {}, flags: {} }).config);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  it('needs an absolute shared_dir with storage = "shared_dir", and refuses it otherwise', () => {
    expect(load('[volume]\nstorage = "shared_dir"\nshared_dir = "/mnt/v"\n').storage).toEqual({
      kind: 'shared_dir',
      dir: '/mnt/v',
    });
    expect(load('').storage).toEqual({ kind: 'node' });
    expect(() => load('[volume]\nstorage = "shared_dir"\n')).toThrow(/needs volume.shared_dir/);
    expect(() => load('[volume]\nshared_dir = "/mnt/v"\n')).toThrow(/used only with volume.storage/);
    expect(() => load('[volume]\nstorage = "cloud"\n')).toThrow(/volume.storage/);
  });
});
