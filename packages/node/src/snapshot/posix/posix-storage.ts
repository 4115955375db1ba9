import { createHash } from 'node:crypto';
import { readdir, rename, rm, rmdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { KeyedMutex } from '../../util/keyed-mutex.js';
import { mapLimit } from '../../util/map-limit.js';
import type { Logger } from '../../util/log.js';
import { digestFile, digestHex } from '../digest.js';
import { notFound, RepositoryError } from '../errors.js';
import type {
  BlobLocation,
  DocNamespace,
  LockHandle,
  LockMode,
  LockName,
  RepositoryStorage,
  StagedBlob,
  StoredLayer,
} from '../storage.js';
import { acquireFlock, FlockError } from '../../util/flock.js';
import { privatizeTree } from '../../util/private-tree.js';
import {
  copyToTemp,
  ensureDir,
  fsyncDir,
  isErrno,
  readTextIfExists,
  unlinkIfExists,
  writeFileDurable,
} from './fs-util.js';

export interface PosixStorageOptions {
  /** `[backend.posix_fs].snapshot_store`; the repository lives in its `repository/` subdirectory. */
  snapshotStore: string;
  logger: Logger;
}

/** Record and alias locks are striped over this many lock files each, so lock files never need deleting. */
const LOCK_STRIPES = 256;
/** Catalog documents read at once when listing (on a network filesystem each read is a round trip). */
const DOC_READ_CONCURRENCY = 16;

/**
 * posix_fs backend. Layout under `<snapshot_store>/repository/`:
 *   catalog/records/<id>.json      record (without `committed`)
 *   catalog/aliases/<alias>        JSON string of the id
 *   catalog/claims/<sandbox>.json  owner of a sandbox that can move between nodes (sandbox-claim.ts)
 *   catalog/webhooks/<id>.json     a webhook every node of the repository delivers to (shared-webhook.ts)
 *   catalog/secrets/<id>.json      a /secrets secret, its value sealed (shared-secret.ts)
 *   snapshots/<id>/commit          commit marker (the committed data), written last
 *   snapshots/<id>/artifacts/<n>   per-record artifacts
 *   layers/sha256/<hex>            content-addressed layers
 *   locks/{records,aliases}/<xx>.lock, locks/gc.lock   flock(2) files (never deleted)
 *   tmp/                           temp files; everything is renamed/linked into place from here
 */
export class PosixStorage implements RepositoryStorage {
  readonly backend = 'posix_fs' as const;
  readonly root: string;
  private readonly log: Logger;
  private readonly localLocks = new KeyedMutex();
  /** Verified blobs by file identity (dev, inode, size, mtime, ctime): any write changes ctime. */
  private readonly verified = new Set<string>();
  private readonly verifying = new Map<string, Promise<void>>();

  constructor(opts: PosixStorageOptions) {
    this.root = join(opts.snapshotStore, 'repository');
    this.log = opts.logger;
  }

  private get tmpDir(): string {
    return join(this.root, 'tmp');
  }

  async init(): Promise<void> {
    // Snapshots hold sandbox disks and memory: owner-only, also what older versions wrote.
    await ensureDir(this.root);
    await privatizeTree(this.root);
    for (const d of [
      'catalog/records',
      'catalog/aliases',
      'catalog/claims',
      'catalog/webhooks',
      'catalog/secrets',
      'snapshots',
      'layers/sha256',
      'locks/records',
      'locks/aliases',
      'tmp',
    ]) {
      await ensureDir(join(this.root, d));
    }
  }

  async close(): Promise<void> {}

  async lock(name: LockName, mode: LockMode, timeoutMs: number): Promise<LockHandle> {
    const path = this.lockPath(name);
    const deadline = Date.now() + timeoutMs;
    // Same-process waiters queue here instead of each spawning a flock child; flock excludes other processes.
    const releaseLocal =
      mode === 'exclusive'
        ? await this.localLocks.acquire(path, timeoutMs).catch(() => {
            throw new RepositoryError('Backend', `timed out after ${timeoutMs} ms waiting for lock ${path}`);
          })
        : undefined;
    try {
      const held = await acquireFlock(path, mode, Math.max(1, deadline - Date.now()));
      return {
        release: async () => {
          try {
            await held.release();
          } finally {
            releaseLocal?.();
          }
        },
        assertHeld: () => {},
      };
    } catch (err) {
      releaseLocal?.();
      if (err instanceof FlockError) throw new RepositoryError('Backend', err.message, { cause: err });
      throw err;
    }
  }

  async readDoc(ns: DocNamespace, name: string): Promise<string | undefined> {
    return readTextIfExists(this.docPath(ns, name));
  }

  async writeDoc(
    ns: DocNamespace,
    name: string,
    text: string,
    opts: { ifAbsent?: boolean } = {},
  ): Promise<boolean> {
    return writeFileDurable(this.tmpDir, this.docPath(ns, name), text, opts);
  }

  async deleteDoc(ns: DocNamespace, name: string): Promise<void> {
    const path = this.docPath(ns, name);
    if (await unlinkIfExists(path)) await fsyncDir(dirname(path));
  }

  async listDocs(ns: DocNamespace): Promise<string[]> {
    if (ns === 'records') {
      return (await readdir(join(this.root, 'catalog/records')))
        .filter((f) => f.endsWith('.json'))
        .map((f) => f.slice(0, -5));
    }
    if (ns === 'aliases') return readdir(join(this.root, 'catalog/aliases'));
    if (ns === 'claims' || ns === 'webhooks' || ns === 'secrets') {
      return (await readdir(join(this.root, `catalog/${ns}`)))
        .filter((f) => f.endsWith('.json'))
        .map((f) => f.slice(0, -5));
    }
    const all = await readdir(join(this.root, 'snapshots'));
    const committed = new Array<boolean>(all.length);
    await mapLimit(all, DOC_READ_CONCURRENCY, async (id, i) => {
      committed[i] = await exists(join(this.root, 'snapshots', id, 'commit'));
    });
    return all.filter((_, i) => committed[i]);
  }

  async readAllDocs(ns: DocNamespace): Promise<Map<string, string>> {
    const names = await this.listDocs(ns);
    const texts = new Array<string | undefined>(names.length);
    await mapLimit(names, DOC_READ_CONCURRENCY, async (name, i) => {
      texts[i] = await this.readDoc(ns, name);
    });
    const out = new Map<string, string>();
    names.forEach((name, i) => {
      if (texts[i] !== undefined) out.set(name, texts[i]);
    });
    return out;
  }

  async hasBlob(loc: BlobLocation, size: number): Promise<boolean> {
    const st = await stat(this.blobPath(loc)).catch(() => undefined);
    return st !== undefined && st.isFile() && st.size === size;
  }

  async stageBlob(file: string): Promise<StagedBlob> {
    const copied = await copyToTemp(this.tmpDir, file);
    let done = false;
    return {
      digest: copied.digest,
      size: copied.size,
      commit: async (loc) => {
        const final = this.blobPath(loc);
        await ensureDir(dirname(final));
        await rename(copied.tmp, final);
        done = true;
        await fsyncDir(dirname(final));
      },
      discard: async () => {
        if (!done) await unlinkIfExists(copied.tmp);
        done = true;
      },
    };
  }

  async fetchBlob(loc: BlobLocation, size: number): Promise<string> {
    const path = this.blobPath(loc);
    const st = await stat(path, { bigint: true }).catch((err) => {
      if (isErrno(err, 'ENOENT')) throw notFound(loc.kind, `${describe(loc)} is missing from the repository`);
      throw err;
    });
    if (Number(st.size) !== size) {
      throw new RepositoryError(
        'IntegrityMismatch',
        `${describe(loc)} is corrupt: stored size ${st.size}, expected ${size}`,
      );
    }
    const identity = `${path}|${st.dev}|${st.ino}|${st.size}|${st.mtimeNs}|${st.ctimeNs}`;
    if (!this.verified.has(identity)) {
      let pending = this.verifying.get(identity);
      if (!pending) {
        pending = this.verify(path, loc).finally(() => this.verifying.delete(identity));
        this.verifying.set(identity, pending);
      }
      await pending;
      this.verified.add(identity);
    }
    return path;
  }

  async deleteBlob(loc: BlobLocation): Promise<void> {
    const path = this.blobPath(loc);
    if (await unlinkIfExists(path)) await fsyncDir(dirname(path));
  }

  async listLayers(): Promise<StoredLayer[]> {
    const dir = join(this.root, 'layers/sha256');
    const out: StoredLayer[] = [];
    for (const hex of await readdir(dir)) {
      if (!/^[0-9a-f]{64}$/.test(hex)) continue;
      const st = await stat(join(dir, hex)).catch(() => undefined);
      if (st) out.push({ digest: `sha256:${hex}`, modifiedAtMs: st.mtimeMs });
    }
    return out;
  }

  async deleteArtifacts(snapshotId: string): Promise<void> {
    const dir = join(this.root, 'snapshots', snapshotId);
    await rm(join(dir, 'artifacts'), { recursive: true, force: true });
    try {
      await rmdir(dir);
      await fsyncDir(dirname(dir));
    } catch (err) {
      if (!isErrno(err, 'ENOENT') && !isErrno(err, 'ENOTEMPTY')) throw err;
    }
  }

  async listArtifactOwners(): Promise<string[]> {
    return readdir(join(this.root, 'snapshots'));
  }

  async cleanupTemporaries(olderThanMs: number): Promise<number> {
    const cutoff = Date.now() - olderThanMs;
    let removed = 0;
    for (const name of await readdir(this.tmpDir)) {
      const path = join(this.tmpDir, name);
      const st = await stat(path).catch(() => undefined);
      if (st && st.mtimeMs < cutoff) {
        await rm(path, { recursive: true, force: true });
        removed++;
      }
    }
    return removed;
  }

  // ---- paths ----

  private docPath(ns: DocNamespace, name: string): string {
    if (ns === 'records') return join(this.root, 'catalog/records', `${name}.json`);
    if (ns === 'aliases') return join(this.root, 'catalog/aliases', name);
    if (ns === 'claims' || ns === 'webhooks' || ns === 'secrets')
      return join(this.root, `catalog/${ns}`, `${name}.json`);
    return join(this.root, 'snapshots', name, 'commit');
  }

  blobPath(loc: BlobLocation): string {
    if (loc.kind === 'layer') return join(this.root, 'layers/sha256', digestHex(loc.digest));
    return join(this.root, 'snapshots', loc.snapshotId, 'artifacts', loc.name);
  }

  private lockPath(name: LockName): string {
    if (name.kind === 'gc') return join(this.root, 'locks/gc.lock');
    const key = name.kind === 'record' ? name.id : name.alias;
    const stripe = createHash('sha256').update(key).digest().readUInt16BE(0) % LOCK_STRIPES;
    const dir = name.kind === 'record' ? 'records' : 'aliases';
    return join(this.root, 'locks', dir, `${stripe.toString(16).padStart(2, '0')}.lock`);
  }

  private async verify(path: string, loc: BlobLocation): Promise<void> {
    const actual = await digestFile(path);
    if (actual.digest !== loc.digest) {
      this.log.error(
        { path, expected: loc.digest, actual: actual.digest },
        'corrupt blob in snapshot repository',
      );
      throw new RepositoryError(
        'IntegrityMismatch',
        `${describe(loc)} is corrupt: stored content has ${actual.digest}`,
      );
    }
  }
}

function describe(loc: BlobLocation): string {
  return loc.kind === 'layer'
    ? `layer ${loc.digest}`
    : `artifact '${loc.name}' of snapshot ${loc.snapshotId} (${loc.digest})`;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}
