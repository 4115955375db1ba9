import { mkdir, readFile, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DomainError, ErrorKind } from '@aenv/protocol';
import { SandboxMovedError } from './paused-sharing.js';
import { pausedRecord, quietLogger, SharedNodes, type TestNode } from './testing/shared-nodes.js';
import { openStateDb } from '../state/db.js';
import type { VolumeDisks } from '../runtime/driver.js';
import { volumeMigrations } from '../volume/catalog.js';
import { NodeVolumeStore } from '../volume/node-store.js';
import { SharedDirStore } from '../volume/shared-dir.js';
import { VolumeService } from '../volume/service.js';
import type { VolumeStore } from '../volume/store.js';
import type { VolumeMountRecord } from '../volume/types.js';

const logger = quietLogger;

/**
 * The sharing and take-over of paused sandboxes on one real posix_fs repository, as several nodes see it (each
 * node its own repository handle and pause dir): who may run a sandbox is decided by its claim alone.
 */
describe('paused sandboxes shared between nodes', () => {
  let nodes: SharedNodes;
  let base: string;
  const node = (id: string, volumes?: VolumeService) => nodes.node(id, volumes ? { volumes } : {});
  const record = pausedRecord;
  const pauseOn = (n: TestNode, id: string, mounts?: VolumeMountRecord[]) =>
    nodes.pauseOn(n, id, mounts ? { mounts } : {});

  beforeEach(async () => {
    nodes = await SharedNodes.create();
    base = nodes.base;
  });
  afterEach(async () => {
    await nodes.close();
  });

  it('a node takes over a pause another node shared: same memory and disk, the claim moves, the copy goes', async () => {
    const a = node('node-a');
    const b = node('node-b');
    await a.sharing.claimNew('sbx1');
    await pauseOn(a, 'sbx1');
    expect(await a.repository.readClaim('sbx1')).toMatchObject({
      owner: 'node-a',
      generation: 1,
      state: 'paused',
    });

    const taken = await b.adopt('sbx1');
    expect(taken).toMatchObject({ id: 'sbx1', state: 'paused', metadata: { team: 'rl' }, secure: true });
    expect(taken!.paused).toMatchObject({ kind: 'memory', artifactDir: b.pausedDir('sbx1') });
    expect(await readFile(join(b.pausedDir('sbx1'), 'memory', 'pages.img'), 'utf8')).toBe(
      'memory of sbx1 on node-a',
    );
    expect(await readFile(join(b.pausedDir('sbx1'), 'disk', 'file.txt'), 'utf8')).toBe('disk of sbx1');
    expect(await b.repository.readClaim('sbx1')).toMatchObject({ owner: 'node-b', generation: 2 });
    expect(await b.repository.list({ kind: 'paused', sandboxId: 'sbx1' })).toEqual([]);

    // A, back with its own (now stale) copy, may not resume it, and its kill leaves B's claim alone.
    const refused = await a.sharing.takeBack('sbx1').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SandboxMovedError);
    expect((refused as Error).message).toBe('sandbox sbx1 not found: it moved to node node-b');
    await a.sharing.release('sbx1');
    expect(await a.repository.readClaim('sbx1')).toMatchObject({ owner: 'node-b' });
    // B resumes its copy (claim one generation on), then kills it: a sandbox that moved leaves a tombstone, so
    // A's stale copy is still refused (and a third node finds nothing).
    await b.sharing.takeBack('sbx1');
    expect(await b.repository.readClaim('sbx1')).toMatchObject({
      owner: 'node-b',
      generation: 3,
      moved: true,
    });
    await b.sharing.release('sbx1');
    expect(await b.repository.readClaim('sbx1')).toMatchObject({ owner: 'node-b', state: 'killed' });
    const afterKill = await a.sharing.takeBack('sbx1').catch((e: unknown) => e);
    expect((afterKill as Error).message).toBe('sandbox sbx1 not found: it was killed on node node-b');
    expect(await node('node-c').adopt('sbx1')).toBeUndefined();
  });

  it('says it found a copy to take only when the repository holds one, before the take-over is done', async () => {
    const a = node('node-a');
    const b = node('node-b');
    const found: unknown[] = [];
    const noting = (sandboxId: string) => ({ onFound: () => found.push(sandboxId) });
    // Running on A: no copy, so B only looked (and its heartbeat must not take A's binding of it).
    await a.sharing.claimNew('sbx6');
    expect(await b.adopt('sbx6', noting('sbx6')).catch((e: unknown) => e)).toBeInstanceOf(DomainError);
    expect(await b.adopt('unknown-sandbox', noting('unknown-sandbox'))).toBeUndefined();
    expect(found).toEqual([]);
    await pauseOn(a, 'sbx6');
    // Found before the take-over is done: nothing is in B's pause dir yet.
    const taken = await b.adopt('sbx6', { onFound: () => found.push(existsSync(b.pausedDir('sbx6'))) });
    expect(taken?.id).toBe('sbx6');
    expect(found).toEqual([false]);
  });

  it('looks in the repository only for a sandbox whose claim says paused: unknown and running ones cost one read', async () => {
    const a = node('node-a');
    const b = node('node-b');
    await a.sharing.claimNew('sbx7');
    const lists = vi.spyOn(b.repository, 'list');
    expect(await b.adopt('unknown-sandbox')).toBeUndefined();
    const lost = await b.adopt('sbx7').catch((e: unknown) => e);
    expect((lost as Error).message).toMatch(/^sandbox sbx7 is lost: it was running on node node-a/);
    expect(lists).not.toHaveBeenCalled();
    // An id no claim can have is nothing to take; a repository that cannot be read is an error, not a miss.
    expect(await b.adopt('Not A Sandbox Id')).toBeUndefined();
    vi.spyOn(b.repository, 'readClaim').mockRejectedValueOnce(new Error('repository out of reach'));
    await expect(b.adopt('sbx7')).rejects.toThrow('repository out of reach');
    await pauseOn(a, 'sbx7');
    expect((await b.adopt('sbx7'))?.id).toBe('sbx7');
    expect(lists).toHaveBeenCalledTimes(1);
  });

  it('a sandbox that never moved leaves no claim behind when it is killed', async () => {
    const a = node('node-a');
    await a.sharing.claimNew('sbx4');
    await pauseOn(a, 'sbx4');
    await a.sharing.takeBack('sbx4');
    await a.sharing.release('sbx4');
    expect(await a.repository.readClaim('sbx4')).toBeUndefined();
  });

  it('of several nodes taking the same pause at once exactly one wins; the others keep nothing', async () => {
    const a = node('node-a');
    await pauseOn(a, 'sbx2');
    const takers = ['node-b', 'node-c', 'node-d'].map((id) => node(id));
    const results = await Promise.allSettled(takers.map((t) => t.adopt('sbx2')));
    const won = results.flatMap((r, i) => (r.status === 'fulfilled' && r.value ? [takers[i]!] : []));
    expect(won).toHaveLength(1);
    for (const [i, r] of results.entries()) {
      if (takers[i] === won[0]) continue;
      // A loser either lost the swap (409) or came after the copy was gone (nothing to take, or who holds it).
      if (r.status === 'rejected') {
        expect(r.reason).toBeInstanceOf(DomainError);
        expect([ErrorKind.Conflict, ErrorKind.NotFound]).toContain((r.reason as DomainError).kind);
      } else {
        expect(r.value).toBeUndefined();
      }
      expect(existsSync(takers[i]!.pausedDir('sbx2'))).toBe(false);
    }
    expect(await a.repository.readClaim('sbx2')).toMatchObject({ owner: won[0]!.id, generation: 2 });
  });

  it('a resume of its own copy first moves the claim on, so a node holding the old shared copy cannot take it', async () => {
    const a = node('node-a');
    const b = node('node-b');
    await pauseOn(a, 'sbx3');
    const stale = await b.repository.list({ kind: 'paused', sandboxId: 'sbx3', committed: true });
    expect(stale).toHaveLength(1);
    await a.sharing.takeBack('sbx3');
    expect(await a.repository.readClaim('sbx3')).toMatchObject({
      owner: 'node-a',
      generation: 2,
      state: 'running',
    });
    // The shared copy is gone with the resume; a node asked now names where the sandbox runs.
    const answer = await b.adopt('sbx3').catch((e: unknown) => e);
    expect(answer).toBeInstanceOf(DomainError);
    expect((answer as DomainError).message).toBe(
      'sandbox sbx3 is lost: it was running on node node-a, which no longer serves it, and it has no paused copy in the shared repository; it comes back if node node-a returns',
    );
    expect(await b.adopt('unknown-sandbox')).toBeUndefined();
  });

  describe('a sandbox that mounts a volume', () => {
    /** A node's volume service, as start-node.ts makes it: on its own state db and directories, or on `shared`. */
    const volumesOf = async (nodeId: string, shared?: string) => {
      let store: VolumeStore;
      if (shared) {
        const owner = { hostStart: process.getuid?.() ?? 0, size: 65536 };
        store = new SharedDirStore({ root: shared, nodeId, owner, logger });
      } else {
        const root = join(base, `${nodeId}-volumes`);
        await mkdir(root, { recursive: true });
        const disks: VolumeDisks = {
          enforcesLimits: true,
          ownerRange: { hostStart: 100000, size: 65536 },
          dirOf: (v) => join(root, v),
          create: async (v) => {
            await mkdir(join(root, v), { recursive: true });
            return join(root, v);
          },
          remove: (v) => rm(join(root, v), { recursive: true, force: true }),
          list: async () => [],
        };
        store = new NodeVolumeStore(openStateDb(':memory:', volumeMigrations), disks, logger);
      }
      const service = new VolumeService({
        store,
        maxSizeMB: 64,
        maxVolumeCount: 4,
        tokenSecret: 'k'.repeat(40),
        logger,
      });
      await service.init();
      return service;
    };
    const mountsOf = async (volumes: VolumeService, name: string): Promise<VolumeMountRecord[]> => [
      { volumeId: (await volumes.create(name)).volumeID, name, path: '/data' },
    ];

    it('node-affine volumes: never handed over, and another node refuses the take-over before the claim moves', async () => {
      const volumesA = await volumesOf('node-a');
      const a = node('node-a', volumesA);
      const b = node('node-b', await volumesOf('node-b'));
      const mounts = await mountsOf(volumesA, 'data');
      await a.sharing.claimNew('sbx5');
      await pauseOn(a, 'sbx5', mounts);

      expect(a.sharing.staysHere(record('sbx5', mounts))).toBe(
        'it mounts volume "data", which only this node has (volume.storage = "node"); it stays here paused and resumes here once the node serves again',
      );
      expect(await a.sharing.handOver(record('sbx5', mounts))).toBe(false);

      const refused = await b.adopt('sbx5').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(DomainError);
      expect((refused as DomainError).kind).toBe(ErrorKind.Unavailable);
      expect((refused as DomainError).message).toBe(
        'sandbox sbx5 mounts volume "data", which is not on node node-b: it resumes only on node node-a, which holds the volume; try again once that node serves it',
      );
      expect((refused as DomainError).details).toMatchObject({
        node: 'node-a',
        volumeID: mounts[0]!.volumeId,
      });
      // Nothing changed hands: the claim, the shared copy and the home node's pause are as the pause left them.
      expect(await a.repository.readClaim('sbx5')).toMatchObject({
        owner: 'node-a',
        generation: 1,
        state: 'paused',
      });
      expect(await a.repository.list({ kind: 'paused', sandboxId: 'sbx5', committed: true })).toHaveLength(1);
      expect(existsSync(b.pausedDir('sbx5'))).toBe(false);
      expect(await readFile(join(a.pausedDir('sbx5'), 'disk', 'file.txt'), 'utf8')).toBe('disk of sbx5');
      // ...so its own node resumes it.
      await a.sharing.takeBack('sbx5');
      expect(await a.repository.readClaim('sbx5')).toMatchObject({ owner: 'node-a', state: 'running' });
    });

    it('a node with no volumes at all refuses it too', async () => {
      const volumesA = await volumesOf('node-a');
      const a = node('node-a', volumesA);
      await pauseOn(a, 'sbx6', await mountsOf(volumesA, 'data'));
      const refused = await node('node-b')
        .adopt('sbx6')
        .catch((e: unknown) => e);
      expect((refused as DomainError).kind).toBe(ErrorKind.Unavailable);
      expect(await a.repository.readClaim('sbx6')).toMatchObject({ owner: 'node-a', state: 'paused' });
    });

    it('volumes on a shared directory: it is handed over and moves like any other', async () => {
      const shared = join(base, 'volumes');
      await mkdir(shared);
      const volumesA = await volumesOf('node-a', shared);
      const a = node('node-a', volumesA);
      const b = node('node-b', await volumesOf('node-b', shared));
      const mounts = await mountsOf(volumesA, 'data');
      await a.sharing.claimNew('sbx7');
      await pauseOn(a, 'sbx7', mounts);
      expect(a.sharing.staysHere(record('sbx7', mounts))).toBeUndefined();
      expect(await a.sharing.handOver(record('sbx7', mounts))).toBe(true);
      const taken = await b.adopt('sbx7');
      expect(taken).toMatchObject({ id: 'sbx7', state: 'paused', volumeMounts: mounts });
      expect(await b.repository.readClaim('sbx7')).toMatchObject({ owner: 'node-b', generation: 2 });
    });
  });
});
