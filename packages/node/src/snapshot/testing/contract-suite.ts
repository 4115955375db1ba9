/**
 * The contract every SnapshotRepository backend passes (imported by the backends' test files; not a test file
 * itself). Each backend supplies a `ContractTarget`: repository options a child process can reuse, plus a few
 * raw-storage helpers to simulate crashes and corruption.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpErrorAnswer, newSnapshotId } from '@aenv/protocol';
import { createSnapshotRepository, nextClaim, type SnapshotRepositoryOptions } from '../index.js';
import { RepositoryError } from '../errors.js';
import type {
  CommittedSnapshotDraft,
  LayerRef,
  NewSnapshotRecord,
  Resources,
  SnapshotRecord,
} from '../record.js';
import type { PublishInput, PublishProgress, SnapshotRepository } from '../repository.js';

export type StoredBlobRef =
  { kind: 'layer'; digest: string } | { kind: 'artifact'; id: string; name: string };

export interface ContractTarget {
  /** JSON-serialisable options (no logger): child processes open the same repository with them. */
  options: Omit<SnapshotRepositoryOptions, 'logger'>;
  corruptBlob(ref: StoredBlobRef): Promise<void>;
  removeBlob(ref: StoredBlobRef): Promise<void>;
  blobExists(ref: StoredBlobRef): Promise<boolean>;
  /** Writes an alias document pointing at `id` without any record (what a crash mid-create leaves). */
  writeDanglingAlias(alias: string, id: string): Promise<void>;
  aliasExists(alias: string): Promise<boolean>;
  /** A catalog document as stored, bypassing the repository (what a writer of the bucket or directory sees). */
  readRawDoc(ns: 'records' | 'commits' | 'aliases', name: string): Promise<string | undefined>;
  /** Writes a catalog document directly, bypassing the repository (what a writer of the bucket can do). */
  writeRawDoc(ns: 'records' | 'commits' | 'aliases', name: string, text: string): Promise<void>;
  /** Stores `content` as blob `ref` directly, with whatever store metadata makes it look right. */
  writeRawBlob(ref: StoredBlobRef, content: Buffer): Promise<void>;
  /** Leaves what an interrupted blob write leaves (a temp file / an unfinished multipart upload). */
  leaveTemporary(): Promise<void>;
  temporaryCount(): Promise<number>;
  /** Stores an artifact for a record that does not exist (what a crash during delete leaves). */
  leaveOrphanArtifact(id: string, name: string): Promise<void>;
  /** Directories of this host the backend writes to (the store itself for posix_fs, the local cache). */
  hostTrees: string[];
  cleanup(): Promise<void>;
}

/** Entries below `root` that group or others can access (path and octal mode). */
async function accessibleByOthers(root: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (p: string): Promise<void> => {
    const st = await lstat(p).catch(() => null);
    if (!st || st.isSymbolicLink()) return;
    if ((st.mode & 0o077) !== 0) out.push(`${p} ${(st.mode & 0o7777).toString(8)}`);
    if (st.isDirectory()) for (const e of await readdir(p)) await walk(join(p, e));
  };
  await walk(root);
  return out;
}

const REPO_ROOT = fileURLToPath(new URL('../../../../../', import.meta.url));
const CHILD = fileURLToPath(new URL('./repo-child.ts', import.meta.url));
const silent = pino({ level: 'silent' });

/** Buffer equality without vitest's element-wise deep compare (slow for megabytes). */
function expectBytes(actual: Buffer, expected: Buffer | undefined): void {
  expect(expected, 'expected bytes').toBeDefined();
  expect(actual.length).toBe(expected!.length);
  expect(actual.equals(expected!), 'content differs').toBe(true);
}

const resources = { cpuCount: 2, memoryMB: 512, diskSizeMB: 2048 };
const draft: CommittedSnapshotDraft = {
  context: {
    envVars: { A: '1' },
    workdir: '/home/user',
    user: 'user',
    exposedPorts: [],
    volumes: [],
    labels: {},
  },
  runtimeVersions: { envd: '0.5.15', tools: '0.1.0', driver: '4.1' },
  virtualizationMode: 'container',
};

export interface ContractFeatures {
  /** The backend downloads into the node-local LRU cache (oss); posix_fs hands out the stored file itself. */
  localCache: boolean;
}

export function defineRepositoryContract(
  name: string,
  setup: () => Promise<ContractTarget>,
  features: ContractFeatures,
): void {
  describe(`snapshot repository contract: ${name}`, () => {
    let target: ContractTarget;
    let repo: SnapshotRepository;
    let files: string;
    const opened: SnapshotRepository[] = [];
    const uid = randomUUID().slice(0, 8);
    const alias = (label: string) => `${label}-${uid}`;

    const open = (extra: Partial<SnapshotRepositoryOptions> = {}) => {
      const r = createSnapshotRepository({ ...target.options, ...extra, logger: silent });
      opened.push(r);
      return r;
    };
    const file = async (content: Buffer | string = randomBytes(4096)) => {
      const path = join(files, randomUUID());
      await writeFile(path, content);
      return path;
    };
    const sandboxRecord = (extra: Partial<NewSnapshotRecord> = {}): NewSnapshotRecord => ({
      source: { kind: 'sandbox', sourceSandboxId: `sbx-${uid}` },
      resources,
      ...extra,
    });
    const simpleInput = async (): Promise<PublishInput> => ({
      layers: [{ path: await file(), mediaType: 'application/vnd.aenv.disk-diff.v1.tar' }],
      artifacts: { memory: { path: await file(), mediaType: 'application/vnd.aenv.memory.v1.tar' } },
      committed: draft,
    });
    const publishNew = async (extra: Partial<NewSnapshotRecord> = {}, input?: PublishInput) => {
      const rec = await repo.create(sandboxRecord(extra));
      return repo.publish(rec.id, input ?? (await simpleInput()));
    };
    /** The repository's reason for a failure, and the status the API answers it with on most routes. */
    const expectError = async (p: Promise<unknown>, reason: string, status: number) => {
      const err = await p.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, `expected a ${reason} error`).toBeInstanceOf(RepositoryError);
      const e = err as RepositoryError;
      expect({ reason: e.reason, status: httpErrorAnswer(e.kind).status }).toEqual({ reason, status });
      return e;
    };

    beforeAll(async () => {
      target = await setup();
      repo = open();
      files = await mkdtemp(join(tmpdir(), 'aenv-repo-files-'));
    });

    afterAll(async () => {
      for (const r of opened) await r.close();
      await rm(files, { recursive: true, force: true });
      await target?.cleanup();
    });

    it('creates records and finds them by id, by alias and by an upper-case id', async () => {
      const rec = await repo.create({
        alias: alias('tpl'),
        source: { kind: 'template', build: { status: 'waiting' } },
        resources,
      });
      expect(rec).toMatchObject({
        version: 1,
        alias: alias('tpl'),
        source: { kind: 'template', build: { status: 'waiting' } },
      });
      expect(rec.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(rec.createdAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(rec.committed).toBeUndefined();
      expect(await repo.get(rec.id)).toEqual(rec);
      expect(await repo.get(alias('tpl'))).toEqual(rec);
      expect(await repo.get(rec.id.toUpperCase())).toEqual(rec);
      expect(await open().get(rec.id)).toEqual(rec); // a second instance over the same storage
      expect(await repo.find(newSnapshotId())).toBeUndefined();
      const nf = await expectError(repo.get(newSnapshotId()), 'NotFound', 404);
      expect(nf.subject).toBe('snapshot');
      await expectError(repo.get(alias('nobody')), 'NotFound', 404);
    });

    it('rejects bad input with InvalidRequest (400)', async () => {
      for (const bad of ['', 'a/b', 'a.b', 'a:b', 'ünï', 'x'.repeat(256)]) {
        const err = await expectError(repo.create(sandboxRecord({ alias: bad })), 'InvalidRequest', 400);
        expect(err.message).toMatch(/invalid snapshot alias/);
      }
      await expectError(repo.get('a/b'), 'InvalidRequest', 400);
      await expectError(
        repo.create({ ...sandboxRecord(), resources: { cpuCount: 0, memoryMB: 1, diskSizeMB: 1 } }),
        'InvalidRequest',
        400,
      );
      await expectError(repo.create(sandboxRecord({ id: 'not-a-uuid' })), 'InvalidRequest', 400);
      const rec = await repo.create(sandboxRecord());
      await expectError(repo.create(sandboxRecord({ id: rec.id })), 'InvalidRequest', 400);
      await expectError(repo.bindAlias('bad alias', rec.id), 'InvalidRequest', 400);
      await expectError(
        repo.update('nope', () => {}),
        'InvalidRequest',
        400,
      );
    });

    it('updates records under their lock and keeps identity fields fixed', async () => {
      const rec = await repo.create({
        source: { kind: 'template', build: { status: 'waiting' } },
        resources,
      });
      const startBuild = (r: SnapshotRecord) => {
        if (r.source.kind !== 'template' || r.source.build.status !== 'waiting')
          throw new Error('build already started');
        r.source.build = { status: 'building', startedAt: new Date().toISOString() };
      };
      const started = await repo.update(rec.id, startBuild);
      expect(started.source).toMatchObject({ kind: 'template', build: { status: 'building' } });
      await expect(repo.update(rec.id, startBuild)).rejects.toThrow('build already started');
      await expectError(
        repo.update(rec.id, (r) => void (r.alias = 'x')),
        'InvalidRequest',
        400,
      );
      await expectError(
        repo.update(rec.id, (r) => void (r.createdAt = '2000-01-01T00:00:00.000Z')),
        'InvalidRequest',
        400,
      );
      await expectError(
        repo.update(rec.id, (r) => void (r.resources.cpuCount = -1)),
        'InvalidRequest',
        400,
      );
      await expectError(
        repo.update(newSnapshotId(), () => {}),
        'NotFound',
        404,
      );
      expect((await repo.get(rec.id)).source).toMatchObject({ build: { status: 'building' } });
    });

    it('lists by createdAt descending then id, with kind/sandbox/alias/committed filters', async () => {
      const sbx = `list-${uid}`;
      const a = await repo.create({ source: { kind: 'sandbox', sourceSandboxId: sbx }, resources });
      await new Promise((r) => setTimeout(r, 5));
      const b = await repo.create({ source: { kind: 'paused', sandboxId: sbx }, resources });
      await new Promise((r) => setTimeout(r, 5));
      const c = await publishNew({
        source: { kind: 'sandbox', sourceSandboxId: sbx },
        alias: alias('listed'),
      });
      const mine = await repo.list({ sandboxId: sbx });
      expect(mine.map((r) => r.id)).toEqual([c.id, b.id, a.id]);
      const all = await repo.list();
      for (let i = 1; i < all.length; i++) {
        const [p, q] = [all[i - 1]!, all[i]!];
        const ordered = p.createdAt > q.createdAt || (p.createdAt === q.createdAt && p.id < q.id);
        expect(ordered, `${p.id} before ${q.id}`).toBe(true);
      }
      expect((await repo.list({ sandboxId: sbx, kind: 'sandbox' })).map((r) => r.id)).toEqual([c.id, a.id]);
      expect((await repo.list({ sandboxId: sbx, kind: 'paused' })).map((r) => r.id)).toEqual([b.id]);
      expect((await repo.list({ sandboxId: sbx, committed: true })).map((r) => r.id)).toEqual([c.id]);
      expect((await repo.list({ alias: alias('listed') })).map((r) => r.id)).toEqual([c.id]);
      expect((await repo.list({ kind: 'template' })).every((r) => r.source.kind === 'template')).toBe(true);
    });

    it('binds aliases: same id is a no-op, another existing record conflicts (409), dangling aliases are replaced', async () => {
      const one = await publishNew();
      const two = await publishNew();
      const name = alias('bind');
      expect((await repo.bindAlias(name, one.id)).alias).toBe(name);
      expect((await repo.bindAlias(name, one.id)).alias).toBe(name);
      const err = await expectError(repo.bindAlias(name, two.id), 'AliasConflict', 409);
      expect(err.message).toContain(one.id);
      await expectError(repo.create(sandboxRecord({ alias: name })), 'AliasConflict', 409);
      await expectError(repo.bindAlias(alias('other'), one.id), 'InvalidRequest', 400);
      expect((await repo.get(name)).id).toBe(one.id);

      const dangling = alias('dangling');
      await target.writeDanglingAlias(dangling, newSnapshotId());
      expect(await repo.find(dangling)).toBeUndefined();
      expect(await target.aliasExists(dangling)).toBe(false);
      await target.writeDanglingAlias(dangling, newSnapshotId());
      expect((await repo.bindAlias(dangling, two.id)).alias).toBe(dangling);
      expect((await repo.get(dangling)).id).toBe(two.id);
    });

    it('keeps what it stores on this host owner-only, and makes what an older version left so', async () => {
      for (const t of target.hostTrees) {
        await mkdir(join(t, 'older'), { recursive: true, mode: 0o755 });
        await writeFile(join(t, 'older', 'blob'), 'x', { mode: 0o644 });
        await chmod(t, 0o755);
      }
      const rec = await publishNew();
      const c = rec.committed!;
      expect((await readFile(await repo.fetch(c.layers[0]!))).length).toBe(4096);
      await repo.fetchArtifact(rec.id, 'memory');
      const fresh = open(); // its init fixes what is there
      await fresh.fetch(c.layers[0]!);
      for (const t of target.hostTrees) expect(await accessibleByOthers(t)).toEqual([]);
    });

    it('publishes: content-addressed layers, per-record artifacts, commit marker, fetch returns the raw content', async () => {
      const layerA = randomBytes(300_000);
      const layerB = Buffer.from('small layer\n'.repeat(1000));
      const memory = randomBytes(100_000);
      const rec = await repo.create(sandboxRecord());
      const events: PublishProgress[] = [];
      const published = await repo.publish(
        rec.id,
        {
          layers: [
            { path: await file(layerA), mediaType: 'application/vnd.aenv.layer.v1.tar' },
            { path: await file(layerB), mediaType: 'application/vnd.aenv.layer.v1.tar' },
          ],
          artifacts: {
            memory: { path: await file(memory), mediaType: 'application/vnd.aenv.memory.v1.tar' },
          },
          committed: { ...draft, extra: { pauseKind: 'memory' } },
        },
        { onProgress: (e) => void events.push(e) },
      );
      const c = published.committed!;
      expect(c.layers.map((l) => l.size)).toEqual([layerA.length, layerB.length]);
      expect(c.layers[0]!.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect(c.artifacts.memory).toMatchObject({
        size: memory.length,
        mediaType: 'application/vnd.aenv.memory.v1.tar',
      });
      expect(c).toMatchObject({
        virtualizationMode: 'container',
        runtimeVersions: draft.runtimeVersions,
        extra: { pauseKind: 'memory' },
      });
      expect(events.map((e) => e.step)).toEqual(['blob-stored', 'blob-stored', 'blob-stored', 'committed']);
      expect(await repo.get(rec.id)).toEqual(published);
      expectBytes(await readFile(await repo.fetch(c.layers[0]!)), layerA);
      expectBytes(await readFile(await repo.fetch(c.layers[1]!)), layerB);
      expectBytes(await readFile(await repo.fetchArtifact(rec.id, 'memory')), memory);
      expectBytes(await readFile(await open().fetch(c.layers[0]!)), layerA);

      await expectError(repo.publish(rec.id, await simpleInput()), 'InvalidRequest', 400);
      await expectError(repo.publish(newSnapshotId(), await simpleInput()), 'NotFound', 404);
      const fresh = await repo.create(sandboxRecord());
      const missing = { ...(await simpleInput()), layers: [{ path: join(files, 'absent'), mediaType: 'x' }] };
      await expectError(repo.publish(fresh.id, missing), 'InvalidRequest', 400);
      const badName = {
        ...(await simpleInput()),
        artifacts: { '../x': { path: await file(), mediaType: 'x' } },
      };
      await expectError(repo.publish(fresh.id, badName), 'InvalidRequest', 400);
      const badDraft = { ...(await simpleInput()), committed: { ...draft, virtualizationMode: '' } };
      await expectError(repo.publish(fresh.id, badDraft), 'InvalidRequest', 400);
      expect((await repo.get(fresh.id)).committed).toBeUndefined();
    });

    it('deduplicates identical layers by digest', async () => {
      const content = randomBytes(50_000);
      const first = await publishNew(
        {},
        { ...(await simpleInput()), layers: [{ path: await file(content), mediaType: 'l' }] },
      );
      const events: PublishProgress[] = [];
      const rec = await repo.create(sandboxRecord());
      const second = await repo.publish(
        rec.id,
        { ...(await simpleInput()), layers: [{ path: await file(content), mediaType: 'l' }] },
        { onProgress: (e) => void events.push(e) },
      );
      expect(second.committed!.layers[0]!.digest).toBe(first.committed!.layers[0]!.digest);
      const layerEvent = events.find((e) => e.step === 'blob-stored' && e.kind === 'layer');
      expect(layerEvent).toMatchObject({ deduplicated: true });
    });

    it('marks a template build ready when it is published', async () => {
      const rec = await repo.create({
        alias: alias('build'),
        source: { kind: 'template', build: { status: 'waiting' } },
        resources,
      });
      await repo.update(rec.id, (r) => {
        if (r.source.kind === 'template')
          r.source.build = { status: 'building', startedAt: new Date().toISOString() };
      });
      const done = await repo.publish(rec.id, await simpleInput());
      expect(done.source).toMatchObject({ kind: 'template', build: { status: 'ready' } });
      expect(done.source.kind === 'template' && done.source.build.finishedAt).toBeTruthy();
      expect((await repo.list({ kind: 'template', committed: true })).map((r) => r.id)).toContain(rec.id);
      expect((await repo.list({ kind: 'sandbox' })).map((r) => r.id)).not.toContain(rec.id);
    });

    it('a corrupted layer fails fetch with IntegrityMismatch and affects nothing else', async () => {
      const rec = await publishNew(
        {},
        {
          ...(await simpleInput()),
          layers: [
            { path: await file(randomBytes(200_000)), mediaType: 'l' },
            { path: await file(randomBytes(200_000)), mediaType: 'l' },
          ],
        },
      );
      const [bad, good] = rec.committed!.layers;
      await target.corruptBlob({ kind: 'layer', digest: bad!.digest });
      await expectError(repo.fetch(bad!), 'IntegrityMismatch', 409);
      await expectError(open().fetch(bad!), 'IntegrityMismatch', 409);
      expect((await readFile(await repo.fetch(good!))).length).toBe(200_000);
      expect(await readFile(await repo.fetchArtifact(rec.id, 'memory'))).toHaveLength(4096);
      expect((await repo.get(rec.id)).committed).toEqual(rec.committed);
      expect((await repo.list()).map((r) => r.id)).toContain(rec.id);
    });

    it('a missing artifact or layer is a clear NotFound', async () => {
      const rec = await publishNew();
      await target.removeBlob({ kind: 'artifact', id: rec.id, name: 'memory' });
      const err = await expectError(repo.fetchArtifact(rec.id, 'memory'), 'NotFound', 404);
      expect(err.subject).toBe('artifact');
      expect(err.message).toMatch(/memory/);
      const noName = await expectError(repo.fetchArtifact(rec.id, 'rootfs'), 'NotFound', 404);
      expect(noName.message).toMatch(/has no artifact 'rootfs'/);
      await target.removeBlob({ kind: 'layer', digest: rec.committed!.layers[0]!.digest });
      const layerErr = await expectError(repo.fetch(rec.committed!.layers[0]!), 'NotFound', 404);
      expect(layerErr.subject).toBe('layer');
      const unpublished = await repo.create(sandboxRecord());
      await expectError(repo.fetchArtifact(unpublished.id, 'memory'), 'NotFound', 404);
      await expectError(repo.fetch({ digest: 'sha256:xyz', size: 1, mediaType: 'l' }), 'InvalidRequest', 400);
    });

    it('deletes idempotently (by id or alias), removing the alias and artifacts but keeping shared layers', async () => {
      const shared = randomBytes(10_000);
      const a = await publishNew(
        { alias: alias('del') },
        { ...(await simpleInput()), layers: [{ path: await file(shared), mediaType: 'l' }] },
      );
      const b = await publishNew(
        {},
        { ...(await simpleInput()), layers: [{ path: await file(shared), mediaType: 'l' }] },
      );
      expect(await repo.delete(alias('del'))).toBe(true);
      expect(await repo.delete(a.id)).toBe(false);
      expect(await repo.delete(alias('del'))).toBe(false);
      expect(await repo.find(a.id)).toBeUndefined();
      expect(await target.aliasExists(alias('del'))).toBe(false);
      expect(await target.blobExists({ kind: 'artifact', id: a.id, name: 'memory' })).toBe(false);
      expectBytes(await readFile(await repo.fetch(b.committed!.layers[0]!)), shared);
      // The alias is free again.
      expect((await publishNew({ alias: alias('del') })).alias).toBe(alias('del'));
    });

    it('GC removes only layers no committed record references', async () => {
      const onlyA = randomBytes(20_000);
      const shared = randomBytes(20_000);
      const a = await publishNew(
        {},
        {
          ...(await simpleInput()),
          layers: [
            { path: await file(onlyA), mediaType: 'l' },
            { path: await file(shared), mediaType: 'l' },
          ],
        },
      );
      const b = await publishNew(
        {},
        { ...(await simpleInput()), layers: [{ path: await file(shared), mediaType: 'l' }] },
      );
      const [la, ls] = a.committed!.layers;
      expect((await repo.gcLayers()).removed).not.toContain(la!.digest);
      await repo.delete(a.id);
      const gc = await repo.gcLayers();
      expect(gc.removed).toContain(la!.digest);
      expect(gc.removed).not.toContain(ls!.digest);
      expect(await target.blobExists({ kind: 'layer', digest: la!.digest })).toBe(false);
      expect(await target.blobExists({ kind: 'layer', digest: ls!.digest })).toBe(true);
      expectBytes(await readFile(await repo.fetch(b.committed!.layers[0]!)), shared);
      for (const r of await repo.list({ committed: true })) {
        for (const l of r.committed!.layers) expect(gc.removed).not.toContain(l.digest);
      }
    });

    it('sandbox claims: compare-and-swap by owner and generation, one winner among racing repositories', async () => {
      const sandbox = `sbx${uid}claim`;
      expect(await repo.readClaim(sandbox)).toBeUndefined();
      expect(await repo.swapClaim(sandbox, null, nextClaim(sandbox, 'node-a', 1, 'running'))).toBe(true);
      // A second "create" and a swap from a stale expectation both fail and change nothing.
      expect(await repo.swapClaim(sandbox, null, nextClaim(sandbox, 'node-b', 1, 'running'))).toBe(false);
      expect(
        await repo.swapClaim(
          sandbox,
          { owner: 'node-a', generation: 0 },
          nextClaim(sandbox, 'node-b', 2, 'running'),
        ),
      ).toBe(false);
      expect(await repo.readClaim(sandbox)).toMatchObject({
        owner: 'node-a',
        generation: 1,
        state: 'running',
      });
      // Several nodes (each its own repository handle) take over the same pause at once: exactly one wins.
      const takers = ['node-b', 'node-c', 'node-d', 'node-e'].map((node) => ({ node, repo: open() }));
      const results = await Promise.all(
        takers.map((t) =>
          t.repo.swapClaim(
            sandbox,
            { owner: 'node-a', generation: 1 },
            nextClaim(sandbox, t.node, 2, 'running'),
          ),
        ),
      );
      expect(results.filter(Boolean)).toHaveLength(1);
      const winner = takers[results.indexOf(true)]!.node;
      expect(await repo.readClaim(sandbox)).toMatchObject({ owner: winner, generation: 2 });
      // A claim names its own sandbox; ids that cannot be the node's are refused before touching the store.
      await expectError(
        repo.swapClaim(sandbox, null, nextClaim('other', 'node-a', 1, 'running')),
        'InvalidRequest',
        400,
      );
      await expectError(repo.readClaim('../records/x'), 'InvalidRequest', 400);
      expect(await repo.deleteClaim(sandbox, { owner: 'node-a', generation: 1 })).toBe(false);
      expect(await repo.deleteClaim(sandbox, { owner: winner, generation: 2 })).toBe(true);
      expect(await repo.readClaim(sandbox)).toBeUndefined();
    });

    it('webhook definitions: a cluster-wide limit among racing repositories, update, delete, ids checked', async () => {
      const def = (n: number) => ({
        id: `0190a0a0-0000-7000-8000-${String(n).padStart(12, '0')}`,
        name: `w${n}`,
        url: `http://r${n}.test/`,
        enabled: true,
        events: ['sandbox.lifecycle.created'],
        secret: `s${n}`,
        createdAt: new Date().toISOString(),
      });
      const before = (await repo.readWebhooks()).webhooks.length;
      const handles = [0, 1, 2, 3].map(() => open());
      const made = await Promise.all(handles.map((h, i) => h.createWebhook(def(i + 1), before + 2)));
      expect(made.filter(Boolean)).toHaveLength(2);
      const mine = (await repo.readWebhooks()).webhooks.filter((w) => w.name.startsWith('w'));
      expect(mine).toHaveLength(2);
      const w = mine[0]!;
      expect(await repo.createWebhook(w, 1000)).toBe(false); // its id is taken
      const next = await repo.updateWebhook(w.id, (cur) => ({ ...cur, url: 'http://moved.test/', id: 'x' }));
      expect(next).toMatchObject({ id: w.id, url: 'http://moved.test/', createdAt: w.createdAt });
      expect((await handles[0]!.readWebhooks()).webhooks.find((x) => x.id === w.id)?.url).toBe(
        'http://moved.test/',
      );
      for (const x of mine) expect(await repo.deleteWebhook(x.id)).toBe(true);
      expect(await repo.deleteWebhook(w.id)).toBe(false);
      expect(await repo.updateWebhook(w.id, (cur) => cur)).toBeUndefined();
      for (const bad of ['../records/x', 'x', w.id.toUpperCase()])
        await expectError(repo.deleteWebhook(bad), 'InvalidRequest', 400);
      await expectError(repo.createWebhook({ ...def(9), url: '' }, 1000), 'InvalidRequest', 400);
    });

    it('secrets: names unique and a cluster-wide limit among racing repositories, update, delete, ids checked', async () => {
      const def = (n: number, name = `s${n}`) => ({
        id: `sec_${String(n).padStart(24, '0')}`,
        name,
        version: 1,
        sealed: `aXY.dGFn.Ym9keQ${n}`,
        metadata: { n: String(n) },
        createdAt: new Date().toISOString(),
        updatedAt: new Date().toISOString(),
      });
      const before = (await repo.readSecrets()).secrets.length;
      const handles = [0, 1, 2, 3].map(() => open());
      // Two racing creates of one name: one wins. Then the limit holds among the rest.
      const same = await Promise.all([1, 2].map((n, i) => handles[i]!.createSecret(def(n, 'same'), 1000)));
      expect(same.sort()).toEqual(['created', 'name-taken']);
      const made = await Promise.all(handles.map((h, i) => h.createSecret(def(i + 10), before + 3)));
      expect(made.filter((m) => m === 'created')).toHaveLength(2);
      expect(made.filter((m) => m === 'full')).toHaveLength(2);
      const mine = (await repo.readSecrets()).secrets.filter((x) => /^s\d+$|^same$/.test(x.name));
      expect(mine).toHaveLength(3);
      const s = mine.find((x) => x.name !== 'same')!;
      const next = await repo.updateSecret(s.id, (cur) => ({
        ...cur,
        version: 2,
        sealed: 'bmV3.dGFn.dmFs',
        name: 'renamed',
        id: 'sec_x',
      }));
      expect(next).toMatchObject({ id: s.id, name: s.name, version: 2, sealed: 'bmV3.dGFn.dmFs' });
      expect((await handles[0]!.readSecrets()).secrets.find((x) => x.id === s.id)?.version).toBe(2);
      for (const x of mine) expect(await repo.deleteSecret(x.id)).toBe(true);
      expect(await repo.deleteSecret(s.id)).toBe(false);
      expect(await repo.updateSecret(s.id, (cur) => cur)).toBeUndefined();
      for (const bad of ['../records/x', 'sec_', s.id.toUpperCase(), 'name'])
        await expectError(repo.deleteSecret(bad), 'InvalidRequest', 400);
      await expectError(repo.createSecret({ ...def(9), sealed: 'plain text' }, 1000), 'InvalidRequest', 400);
    });

    for (const mode of ['create', 'bind'] as const) {
      it(`two processes publishing the same alias at once (${mode}): exactly one wins`, async () => {
        const name = alias(`race-${mode}`);
        const children = await Promise.all(
          [0, 1].map(async () =>
            startChild({
              options: target.options,
              scenario: 'race',
              mode,
              alias: name,
              input: await simpleInput(),
            }),
          ),
        );
        try {
          await Promise.all(children.map((c) => c.next('ready')));
          for (const c of children) c.proc.stdin.write('go\n');
          const results = await Promise.all(children.map((c) => c.next('result')));
          const winners = results.filter((r) => r.ok);
          const losers = results.filter((r) => !r.ok);
          expect(winners, JSON.stringify(results)).toHaveLength(1);
          expect(losers[0]).toMatchObject({ kind: 'AliasConflict' });
          const bound = await repo.get(name);
          expect(bound.id).toBe(winners[0]!.id);
          expect(bound.committed).toBeDefined();
        } finally {
          for (const c of children) c.kill();
        }
      });
    }

    it('an interrupted publish (process killed) leaves nothing visible; publishing again succeeds', async () => {
      const rec = await repo.create(sandboxRecord());
      const input: PublishInput = {
        layers: [
          { path: await file(randomBytes(64_000)), mediaType: 'l' },
          { path: await file(randomBytes(64_000)), mediaType: 'l' },
        ],
        artifacts: { memory: { path: await file(randomBytes(64_000)), mediaType: 'm' } },
        committed: draft,
      };
      const child = await startChild({
        options: target.options,
        scenario: 'publish-and-hang',
        id: rec.id,
        input,
      });
      await child.next('stored');
      await child.killAndWait();
      const after = await repo.get(rec.id);
      expect(after.committed).toBeUndefined();
      expect((await repo.list({ committed: true })).map((r) => r.id)).not.toContain(rec.id);
      await expectError(repo.fetchArtifact(rec.id, 'memory'), 'NotFound', 404);
      const done = await repo.publish(rec.id, input);
      expect(done.committed!.layers).toHaveLength(2);
      expect(await readFile(await repo.fetchArtifact(rec.id, 'memory'))).toEqual(
        await readFile(input.artifacts.memory!.path),
      );
      expect((await publishNew()).committed).toBeDefined();
    });

    it('reconcile removes abandoned records, orphans and temporaries; keeps templates and committed records', async () => {
      const abandoned = await repo.create(sandboxRecord({ alias: alias('abandoned') }));
      const template = await repo.create({
        source: { kind: 'template', build: { status: 'waiting' } },
        resources,
      });
      const committed = await publishNew();
      const orphan = newSnapshotId();
      await target.leaveOrphanArtifact(orphan, 'memory');
      await target.leaveTemporary();
      expect(await target.temporaryCount()).toBeGreaterThan(0);
      const result = await repo.reconcile({ staleAfterMs: 0 });
      expect(result.temporariesRemoved).toBeGreaterThan(0);
      expect(await target.temporaryCount()).toBe(0);
      expect(result.orphansRemoved).toContain(orphan);
      expect(await target.blobExists({ kind: 'artifact', id: orphan, name: 'memory' })).toBe(false);
      expect(result.abandonedRecordsRemoved).toContain(abandoned.id);
      expect(await repo.find(abandoned.id)).toBeUndefined();
      expect(await target.aliasExists(alias('abandoned'))).toBe(false);
      expect(await repo.find(template.id)).toBeDefined();
      expect((await repo.get(committed.id)).committed).toBeDefined();
    });

    describe('a hostile writer of the store (record signing, docs/snapshots.md#record-signing)', () => {
      type Doc = Record<string, unknown> & { signature?: unknown };
      const raw = async (ns: 'records' | 'commits', id: string): Promise<Doc> =>
        JSON.parse((await target.readRawDoc(ns, id))!) as Doc;
      const write = (ns: 'records' | 'commits' | 'aliases', id: string, v: unknown) =>
        target.writeRawDoc(ns, id, typeof v === 'string' ? v : `${JSON.stringify(v, null, 2)}\n`);
      /** Runs `tamper`, checks the record is refused everywhere while others work, then puts it back. */
      const refusedWhile = async (
        rec: SnapshotRecord,
        tamper: () => Promise<void>,
        message: RegExp,
        opts: { artifact?: boolean } = {},
      ) => {
        const saved = {
          records: await target.readRawDoc('records', rec.id),
          commits: await target.readRawDoc('commits', rec.id),
        };
        const bystander = await publishNew();
        // Listed once while it was good: what a listing remembers must not outlive a change of the document.
        expect((await repo.list()).map((x) => x.id)).toContain(rec.id);
        await tamper();
        for (const r of [repo, open()]) {
          const err = await expectError(r.get(rec.id), 'IntegrityMismatch', 409);
          expect(err.message).toMatch(message);
          expect(err.message).toMatch(/refusing to use it/);
          const listed = (await r.list()).map((x) => x.id);
          expect(listed).not.toContain(rec.id);
          expect(listed).toContain(bystander.id);
          expect((await r.get(bystander.id)).committed).toEqual(bystander.committed);
          if (opts.artifact !== false)
            await expectError(r.fetchArtifact(rec.id, 'memory'), 'IntegrityMismatch', 409);
        }
        await expectError(
          repo.update(rec.id, () => {}),
          'IntegrityMismatch',
          409,
        );
        for (const ns of ['records', 'commits'] as const) if (saved[ns]) await write(ns, rec.id, saved[ns]);
        expect(await repo.get(rec.id)).toEqual(rec);
      };

      it('writes a signature into every record and commit marker', async () => {
        const rec = await publishNew({ alias: alias('signed') });
        for (const ns of ['records', 'commits'] as const) {
          expect((await raw(ns, rec.id)).signature).toMatchObject({
            alg: 'hmac-sha256',
            keyId: expect.stringMatching(/^[0-9a-f]{16}$/),
            mac: expect.stringMatching(/^[0-9a-f]{64}$/),
          });
        }
      });

      it('refuses a record whose fields were changed (resources, source, alias)', async () => {
        const rec = await publishNew({ alias: alias('tamper-rec') });
        const edits: ((d: Doc) => void)[] = [
          (d) => void ((d.resources as Resources).memoryMB = 65536),
          (d) => void (d.source = { kind: 'template', build: { status: 'ready' } }),
          (d) => void (d.alias = alias('stolen')),
          (d) => void (d.extraField = 'x'),
        ];
        for (const edit of edits) {
          await refusedWhile(
            rec,
            async () => {
              const d = await raw('records', rec.id);
              edit(d);
              await write('records', rec.id, d);
            },
            /does not match its signature/,
          );
        }
      });

      it('refuses a commit marker whose content, layer digest or artifact digest was changed', async () => {
        const rec = await publishNew();
        const other = await publishNew();
        const edits: ((d: Doc) => void)[] = [
          (d) => void ((d.committed as CommittedSnapshotDraft).context.envVars.LD_PRELOAD = '/tmp/x.so'),
          (d) => void ((d.committed as CommittedSnapshotDraft).extra = { layers: ['/'] }),
          // Point the record at another record's (genuine, signed) blobs: digests and sizes are bound too.
          (d) => void ((d.committed as { layers: unknown }).layers = other.committed!.layers),
          (d) =>
            void ((d.committed as { artifacts: Record<string, unknown> }).artifacts.memory =
              other.committed!.artifacts.memory),
        ];
        for (const edit of edits) {
          await refusedWhile(
            rec,
            async () => {
              const d = await raw('commits', rec.id);
              edit(d);
              await write('commits', rec.id, d);
            },
            /commit marker of .* does not match its signature/,
          );
        }
      });

      it('refuses a swapped artifact, and one swapped together with its digest in the marker', async () => {
        const rec = await publishNew();
        const evil = randomBytes(4096);
        const evilDigest = `sha256:${createHash('sha256').update(evil).digest('hex')}`;
        const original = await readFile(await repo.fetchArtifact(rec.id, 'memory'));
        // Swap the bytes only: the fetch verifies them against the signed digest.
        await target.writeRawBlob({ kind: 'artifact', id: rec.id, name: 'memory' }, evil);
        const cold = open({ localCachePath: await mkdtemp(join(tmpdir(), 'aenv-cold-')) });
        await expectError(cold.fetchArtifact(rec.id, 'memory'), 'IntegrityMismatch', 409);
        // Swap the bytes and their digest in the marker: the marker's signature fails.
        await refusedWhile(
          rec,
          async () => {
            const d = await raw('commits', rec.id);
            const memory = (d.committed as { artifacts: Record<string, LayerRef> }).artifacts.memory!;
            memory.digest = evilDigest;
            await write('commits', rec.id, d);
          },
          /does not match its signature/,
        );
        await target.writeRawBlob({ kind: 'artifact', id: rec.id, name: 'memory' }, original);
        expectBytes(await readFile(await open().fetchArtifact(rec.id, 'memory')), original);
      });

      it('refuses a signed record copied under another id, and a marker moved to another record', async () => {
        const a = await publishNew();
        const b = await publishNew();
        await refusedWhile(
          b,
          async () => {
            await write('records', b.id, (await target.readRawDoc('records', a.id))!);
            await write('commits', b.id, (await target.readRawDoc('commits', a.id))!);
          },
          /does not match its signature/,
        );
        await refusedWhile(
          b,
          async () => write('commits', b.id, (await target.readRawDoc('commits', a.id))!),
          /commit marker of .* does not match its signature/,
        );
      });

      it('refuses an unsigned record (a planted one, or a signature stripped)', async () => {
        const rec = await publishNew();
        await refusedWhile(
          rec,
          async () => {
            const d = await raw('commits', rec.id);
            delete d.signature;
            await write('commits', rec.id, d);
          },
          /is not signed/,
        );
        const planted = newSnapshotId();
        const d = await raw('records', rec.id);
        delete d.signature;
        await write('records', planted, { ...d, id: planted, alias: undefined });
        await expectError(repo.get(planted), 'IntegrityMismatch', 409);
        expect((await repo.list()).map((r) => r.id)).not.toContain(planted);
        expect(await repo.delete(planted)).toBe(true); // the operator can still remove it
      });

      it('refuses records signed with another key, naming both keys', async () => {
        const foreign = open({ signing: { secret: 'another cluster' } });
        const rec = await foreign.create(sandboxRecord());
        const err = await expectError(repo.get(rec.id), 'IntegrityMismatch', 409);
        expect(err.message).toMatch(
          /signed with another key [0-9a-f]{16} \(this node's key is [0-9a-f]{16}\)/,
        );
        expect(err.message).toMatch(/record_signing_secret/);
        expect(await foreign.delete(rec.id)).toBe(true);
      });

      it('refuses an alias repointed at another record', async () => {
        const named = await publishNew({ alias: alias('victim') });
        const attacker = await publishNew({ alias: alias('attacker') });
        const unnamed = await publishNew();
        for (const target2 of [attacker.id, unnamed.id]) {
          await write('aliases', alias('victim'), JSON.stringify(target2));
          const err = await expectError(repo.get(alias('victim')), 'IntegrityMismatch', 409);
          expect(err.message).toMatch(/alias '.*' points at snapshot .*, whose signed record is/);
          expect(await repo.delete(alias('victim')).catch((e: { reason?: string }) => e.reason)).toBe(
            'IntegrityMismatch',
          );
          expect((await repo.get(target2)).committed).toBeDefined();
        }
        await write('aliases', alias('victim'), JSON.stringify(named.id));
        expect((await repo.get(alias('victim'))).id).toBe(named.id);
      });

      it('migrates an unsigned store: signUnsigned signs what parses, never a bad signature', async () => {
        const old = await publishNew({ alias: alias('old') });
        const bad = await publishNew();
        for (const ns of ['records', 'commits'] as const) {
          const d = await raw(ns, old.id);
          delete d.signature;
          await write(ns, old.id, d);
        }
        const tampered = await raw('records', bad.id);
        (tampered.resources as Resources).cpuCount = 64;
        await write('records', bad.id, tampered);
        await expectError(repo.get(old.id), 'IntegrityMismatch', 409);
        // unsigned_records = "accept" reads it unverified
        expect(
          (await open({ signing: { secret: 'contract-test-secret', unsigned: 'accept' } }).get(old.id)).id,
        ).toBe(old.id);
        const result = await repo.signUnsigned();
        expect(result.signed).toEqual(expect.arrayContaining([`records/${old.id}`, `commits/${old.id}`]));
        expect(result.signed).not.toContain(`records/${bad.id}`);
        expect(result.skipped).toContain(`records/${bad.id}`);
        expect(await repo.get(alias('old'))).toEqual(old);
        await expectError(repo.get(bad.id), 'IntegrityMismatch', 409);
        expect((await repo.signUnsigned()).signed).toEqual([]);
      });
    });

    // posix_fs has no cache to test: its fetch returns the stored file itself.
    if (features.localCache) {
      it('the local cache evicts least recently used blobs beyond its size bound', async () => {
        const mib = 1024 * 1024;
        const cacheDir = await mkdtemp(join(tmpdir(), 'aenv-cache-'));
        try {
          const small = open({
            localCachePath: cacheDir,
            cacheMaxSizeGb: (2.5 * mib) / 1024 ** 3,
            cacheMinEvictAgeMs: 0,
          });
          const contents = [randomBytes(mib), randomBytes(mib), randomBytes(mib)];
          const rec = await publishNew(
            {},
            {
              ...(await simpleInput()),
              layers: await Promise.all(contents.map(async (c) => ({ path: await file(c), mediaType: 'l' }))),
            },
          );
          const [a, b, c] = rec.committed!.layers;
          const pa = await small.fetch(a!);
          const pb = await small.fetch(b!);
          await small.fetch(a!); // a is now more recent than b
          const pc = await small.fetch(c!);
          expect([existsSync(pa), existsSync(pb), existsSync(pc)]).toEqual([true, false, true]);
          expectBytes(await readFile(await small.fetch(b!)), contents[1]); // downloaded again
          expect([existsSync(pa), existsSync(pc)]).toEqual([false, true]);
          const [x, y] = await Promise.all([small.fetch(a!), small.fetch(a!)]);
          expect(x).toBe(y);
          expectBytes(await readFile(x), contents[0]);
        } finally {
          await rm(cacheDir, { recursive: true, force: true });
        }
      });
    }
  });
}

interface ChildEvent {
  event: string;
  ok?: boolean;
  id?: string;
  kind?: string;
  message?: string;
}

interface Child {
  proc: ChildProcessWithoutNullStreams;
  next(event: string): Promise<ChildEvent>;
  kill(): void;
  killAndWait(): Promise<void>;
}

async function startChild(args: Record<string, unknown>): Promise<Child> {
  const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, JSON.stringify(args)], {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (s: string) => (stderr += s));
  const events: ChildEvent[] = [];
  const waiters: (() => void)[] = [];
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    proc.once('close', () => {
      exited = true;
      waiters.splice(0).forEach((w) => w());
      resolve();
    }),
  );
  createInterface({ input: proc.stdout }).on('line', (line) => {
    try {
      events.push(JSON.parse(line) as ChildEvent);
    } catch {
      events.push({ event: 'noise', message: line });
    }
    waiters.splice(0).forEach((w) => w());
  });
  return {
    proc,
    async next(event) {
      for (;;) {
        const i = events.findIndex((e) => e.event === event || e.event === 'crash');
        if (i >= 0) {
          const [e] = events.splice(i, 1);
          if (e!.event === 'crash') throw new Error(`child crashed: ${e!.message}\n${stderr}`);
          return e!;
        }
        if (exited) throw new Error(`child exited before '${event}': ${stderr}`);
        await new Promise<void>((r) => waiters.push(r));
      }
    },
    kill() {
      if (!exited) proc.kill('SIGKILL');
    },
    async killAndWait() {
      if (!exited) proc.kill('SIGKILL');
      await exit;
    },
  };
}
