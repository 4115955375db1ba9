import { randomUUID } from 'node:crypto';
import { rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../util/log.js';
import { LocalBlobCache } from '../cache/local-cache.js';
import { digestHex, type FileDigest } from '../digest.js';
import { backendError, notFound, RepositoryError } from '../errors.js';
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
import { copyToTemp } from '../posix/fs-util.js';
import { createS3Client, normalizePrefix, type OssOptions } from './s3-client.js';
import { LeaseLocks } from './s3-lock.js';
import { PreconditionFailed, S3Ops } from './s3-ops.js';
import { compressFile, writeRawContent } from './zstd.js';

export type { OssOptions } from './s3-client.js';
export type OssCredentials = Pick<
  OssOptions,
  'credentialProcess' | 'accessKeyId' | 'accessKeySecret' | 'securityToken'
>;

export interface S3StoreOptions {
  oss: OssOptions;
  localCachePath: string;
  cacheMaxBytes: number;
  cacheMinEvictAgeMs: number;
  compression: { enabled: boolean; level: number };
  logger: Logger;
}

/** What the server proved it enforces (probed once at init). */
export interface S3Capabilities {
  conditionalCreate: boolean;
  conditionalReplace: boolean;
  conditionalDelete: boolean;
}

const META_DIGEST = 'aenv-digest';
const META_CODEC = 'aenv-codec';
const META_RAW_SIZE = 'aenv-raw-size';
const META_STORED_SIZE = 'aenv-compressed-size';
const DEFAULT_LEASE_MS = 30_000;
const DOC_READ_CONCURRENCY = 16;

/**
 * oss backend (any S3-compatible store). Keys under `<prefix>`:
 *   catalog/records/<id>.json, catalog/aliases/<alias>.json, catalog/commits/<id>.json (commit marker, created
 *   with If-None-Match), artifacts/<id>/<name>, layers/sha256/<hex>, locks/… (lease objects, see s3-lock.ts).
 * Blobs are stored zstd-compressed (codec and sizes in object metadata); the digest is of the raw content,
 * which is what the node-local cache keeps.
 */
export class S3Storage implements RepositoryStorage {
  readonly backend = 'oss' as const;
  readonly ops: S3Ops;
  readonly cache: LocalBlobCache;
  capabilities: S3Capabilities = {
    conditionalCreate: true,
    conditionalReplace: true,
    conditionalDelete: true,
  };
  private readonly log: Logger;
  private readonly locks: LeaseLocks;
  private clockOffsetMs = 0;
  /** Catalog documents by key with the ETag they were read at (see readAllDocs). */
  private readonly docCache = new Map<string, { etag: string; text: string }>();

  constructor(private readonly opts: S3StoreOptions) {
    this.log = opts.logger;
    this.ops = new S3Ops(createS3Client(opts.oss), opts.oss.bucket, normalizePrefix(opts.oss.prefix));
    this.cache = new LocalBlobCache({
      root: opts.localCachePath,
      maxBytes: opts.cacheMaxBytes,
      minEvictAgeMs: opts.cacheMinEvictAgeMs,
      logger: opts.logger,
    });
    this.locks = new LeaseLocks({
      ops: this.ops,
      leaseMs: opts.oss.leaseMs ?? DEFAULT_LEASE_MS,
      logger: opts.logger,
      clockOffsetMs: () => this.clockOffsetMs,
    });
  }

  async init(): Promise<void> {
    const { endpoint, bucket } = this.opts.oss;
    try {
      await this.ops.headBucket();
    } catch (err) {
      const detail =
        (err as Error).name === 'NotFound'
          ? 'bucket does not exist'
          : (err as Error).message || (err as Error).name;
      throw new RepositoryError(
        'Backend',
        `S3 bucket '${bucket}' at ${endpoint} is not reachable: ${detail}`,
        { cause: err },
      );
    }
    await this.probe();
    await this.cache.init();
  }

  async close(): Promise<void> {
    this.ops.client.destroy();
  }

  lock(name: LockName, mode: LockMode, timeoutMs: number): Promise<LockHandle> {
    const key =
      name.kind === 'gc'
        ? 'locks/gc'
        : name.kind === 'record'
          ? `locks/records/${name.id}`
          : `locks/aliases/${name.alias}`;
    return this.locks.acquire(key, mode, timeoutMs);
  }

  readDoc(ns: DocNamespace, name: string): Promise<string | undefined> {
    return this.ops.getText(docKey(ns, name));
  }

  async writeDoc(
    ns: DocNamespace,
    name: string,
    text: string,
    opts: { ifAbsent?: boolean } = {},
  ): Promise<boolean> {
    const key = docKey(ns, name);
    if (!opts.ifAbsent) {
      await this.ops.putText(key, text);
      return true;
    }
    if (!this.capabilities.conditionalCreate && (await this.ops.head(key))) return false;
    try {
      await this.ops.putText(key, text, { ifNoneMatch: '*' });
      return true;
    } catch (err) {
      if (err instanceof PreconditionFailed) return false;
      throw err;
    }
  }

  deleteDoc(ns: DocNamespace, name: string): Promise<void> {
    return this.ops.delete(docKey(ns, name));
  }

  async listDocs(ns: DocNamespace): Promise<string[]> {
    const dir = docDir(ns);
    return (await this.ops.list(dir))
      .map((o) => o.key.slice(dir.length))
      .filter((k) => k.endsWith('.json') && !k.includes('/'))
      .map((k) => k.slice(0, -5));
  }

  /**
   * One LIST plus a GET for each document that is new or changed since the last call (by ETag): listing the
   * catalog does not re-read every record each time.
   */
  async readAllDocs(ns: DocNamespace): Promise<Map<string, string>> {
    const dir = docDir(ns);
    const listed = (await this.ops.list(dir)).filter((o) => {
      const rest = o.key.slice(dir.length);
      return rest.endsWith('.json') && !rest.includes('/');
    });
    const present = new Set(listed.map((o) => o.key));
    for (const key of this.docCache.keys())
      if (key.startsWith(dir) && !present.has(key)) this.docCache.delete(key);
    const out = new Map<string, string>();
    let next = 0;
    const worker = async () => {
      while (next < listed.length) {
        const o = listed[next++]!;
        let cached = this.docCache.get(o.key);
        if (!cached || cached.etag !== o.etag) {
          cached = await this.ops.getVersionedText(o.key);
          if (!cached) continue; // deleted since the listing
          this.docCache.set(o.key, cached);
        }
        out.set(o.key.slice(dir.length, -'.json'.length), cached.text);
      }
    };
    await Promise.all(Array.from({ length: Math.min(DOC_READ_CONCURRENCY, listed.length) }, worker));
    return out;
  }

  async hasBlob(loc: BlobLocation, size: number): Promise<boolean> {
    const head = await this.ops.head(blobKey(loc));
    return (
      head !== undefined &&
      head.metadata[META_DIGEST] === loc.digest &&
      head.metadata[META_RAW_SIZE] === String(size)
    );
  }

  async stageBlob(file: string): Promise<StagedBlob> {
    await this.cache.init();
    const compress = this.opts.compression.enabled;
    let upload = join(this.cache.tmpDir, `upload-${randomUUID()}`);
    let raw: FileDigest;
    try {
      if (compress) {
        raw = await compressFile(file, upload, this.opts.compression.level);
      } else {
        const copied = await copyToTemp(this.cache.tmpDir, file);
        upload = copied.tmp;
        raw = copied;
      }
    } catch (err) {
      await rm(upload, { force: true });
      throw err;
    }
    const discard = () => rm(upload, { force: true });
    return {
      digest: raw.digest,
      size: raw.size,
      commit: async (loc) => {
        const stored = (await stat(upload)).size;
        const codec = compress ? 'zstd' : 'none';
        await this.ops.putFile(blobKey(loc), upload, stored, {
          [META_DIGEST]: raw.digest,
          [META_CODEC]: codec,
          [META_RAW_SIZE]: String(raw.size),
          [META_STORED_SIZE]: String(stored),
        });
        this.log.debug(
          { key: blobKey(loc), codec, rawBytes: raw.size, storedBytes: stored },
          'blob uploaded',
        );
      },
      discard,
    };
  }

  async fetchBlob(loc: BlobLocation, size: number): Promise<string> {
    const key = blobKey(loc);
    const what =
      loc.kind === 'layer' ? `layer ${loc.digest}` : `artifact '${loc.name}' of snapshot ${loc.snapshotId}`;
    return this.cache.get(loc.digest, size, async (tmp) => {
      const obj = await this.ops.getStream(key);
      if (!obj) throw notFound(loc.kind, `${what} is missing from the repository`);
      const raw = await writeRawContent(obj.body, obj.metadata[META_CODEC] ?? 'none', tmp, what).catch(
        (err) => {
          if (err instanceof RepositoryError) throw err;
          throw backendError(`download ${what}`, err);
        },
      );
      if (raw.digest !== loc.digest || raw.size !== size) {
        this.log.error(
          { key, expected: loc.digest, actual: raw.digest },
          'corrupt blob in snapshot repository',
        );
        throw new RepositoryError(
          'IntegrityMismatch',
          `${what} is corrupt: stored content has ${raw.digest} (${raw.size} bytes)`,
        );
      }
    });
  }

  deleteBlob(loc: BlobLocation): Promise<void> {
    return this.ops.delete(blobKey(loc));
  }

  async listLayers(): Promise<StoredLayer[]> {
    return (await this.ops.list('layers/sha256/'))
      .map((o) => ({ hex: o.key.slice('layers/sha256/'.length), modifiedAtMs: o.lastModifiedMs }))
      .filter((o) => /^[0-9a-f]{64}$/.test(o.hex))
      .map((o) => ({ digest: `sha256:${o.hex}`, modifiedAtMs: o.modifiedAtMs }));
  }

  async deleteArtifacts(snapshotId: string): Promise<void> {
    for (const o of await this.ops.list(`artifacts/${snapshotId}/`)) await this.ops.delete(o.key);
  }

  listArtifactOwners(): Promise<string[]> {
    return this.ops.listChildren('artifacts/');
  }

  async cleanupTemporaries(olderThanMs: number): Promise<number> {
    return this.ops.abortStaleUploads(Date.now() - olderThanMs);
  }

  /**
   * Checks what the server enforces, on a throw-away key: If-None-Match create, If-Match replace, If-Match
   * delete. Whatever is missing weakens the guarantees (logged); also measures the server's clock offset.
   */
  private async probe(): Promise<void> {
    const key = `locks/.probe-${randomUUID()}`;
    const ops = this.ops;
    const before = Date.now();
    await ops.putText(key, 'probe', { ifNoneMatch: '*' });
    try {
      const head = await ops.head(key);
      // LastModified has one-second resolution; lease checks allow for that second.
      if (head) this.clockOffsetMs = head.lastModifiedMs - before;
      const rejects = async (f: () => Promise<unknown>) => {
        try {
          await f();
          return false;
        } catch (err) {
          if (err instanceof PreconditionFailed) return true;
          this.log.warn({ err: (err as Error).message }, 'S3 conditional-request probe failed');
          return false;
        }
      };
      const caps: S3Capabilities = {
        conditionalCreate: await rejects(() => ops.putText(key, 'again', { ifNoneMatch: '*' })),
        conditionalReplace: await rejects(() => ops.putText(key, 'again', { ifMatch: '"0000000000000000"' })),
        conditionalDelete: await rejects(() => ops.delete(key, '"0000000000000000"')),
      };
      this.capabilities = caps;
      ops.conditionalDelete = caps.conditionalDelete;
      if (!caps.conditionalCreate) {
        this.log.warn(
          { capabilities: caps },
          'S3 server ignores If-None-Match: locks, alias binding and the commit marker fall back to check-then-write (two nodes racing can both win)',
        );
      } else if (!caps.conditionalReplace || !caps.conditionalDelete) {
        this.log.warn(
          { capabilities: caps },
          'S3 server ignores If-Match: lock renewal and stale-lock breaking are unconditional (a holder stalled past its lease is not told it lost the lock)',
        );
      } else {
        this.log.debug({ capabilities: caps, clockOffsetMs: this.clockOffsetMs }, 'S3 capabilities');
      }
    } finally {
      ops.conditionalDelete = false;
      await ops.delete(key).catch(() => {});
      ops.conditionalDelete = this.capabilities.conditionalDelete;
    }
  }
}

function docDir(ns: DocNamespace): string {
  return `catalog/${ns}/`;
}

function docKey(ns: DocNamespace, name: string): string {
  return `${docDir(ns)}${name}.json`;
}

function blobKey(loc: BlobLocation): string {
  return loc.kind === 'layer'
    ? `layers/sha256/${digestHex(loc.digest)}`
    : `artifacts/${loc.snapshotId}/${loc.name}`;
}
