import type { Logger } from '../util/log.js';
import { CatalogRepository } from './catalog-repository.js';
import { invalidRequest } from './errors.js';
import { S3Storage, type OssOptions } from './oss/s3-storage.js';
import { PosixStorage } from './posix/posix-storage.js';
import { RecordSigner } from './signing.js';
import type { SnapshotRepository } from './repository.js';

export * from './errors.js';
export * from './record.js';
export * from './repository.js';
export * from './sandbox-claim.js';
export { RecordSigner, canonicalJson } from './signing.js';
export type { OssOptions, OssCredentials } from './oss/s3-storage.js';

export interface CompressionOptions {
  /** Compress blobs with zstd when uploading to oss (the local cache keeps raw files). */
  enabled: boolean;
  /** zstd level, 1..19. */
  level: number;
}

export interface SnapshotRepositoryOptions {
  /** `[snapshot].repository_backend` */
  backend: 'posix_fs' | 'oss';
  /** `[backend.posix_fs]` */
  posixFs: { snapshotStore: string };
  /** `[backend.oss]`; required for `oss`. */
  oss?: OssOptions;
  /** `[snapshot].local_cache_path`: node-local cache of downloaded oss blobs. */
  localCachePath: string;
  /** `[backend.oss].cache_max_size_gb` (may be fractional). */
  cacheMaxSizeGb: number;
  /** `[snapshot.publish_compression]` */
  compression: CompressionOptions;
  logger: Logger;
  /**
   * Record signing (docs/snapshots.md#record-signing): the cluster secret, and what to do with documents that have
   * no signature (default refuse). Every node sharing a repository needs the same secret.
   */
  signing: { secret: string; unsigned?: 'refuse' | 'accept' };
  /** How long an operation waits for a record/alias/GC lock (default 60 s). */
  lockTimeoutMs?: number;
  /** Cache entries used more recently than this are not evicted (default 60 s), so a fetched path stays valid. */
  cacheMinEvictAgeMs?: number;
}

const DEFAULT_LOCK_TIMEOUT_MS = 60_000;

export function createSnapshotRepository(opts: SnapshotRepositoryOptions): SnapshotRepository {
  const logger = opts.logger.child({ component: 'snapshot-repository', backend: opts.backend });
  const lockTimeoutMs = opts.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  const signing = {
    signer: new RecordSigner(opts.signing.secret),
    unsigned: opts.signing.unsigned ?? 'refuse',
  } as const;
  if (opts.backend === 'posix_fs') {
    if (!opts.posixFs?.snapshotStore) throw invalidRequest('backend.posix_fs.snapshot_store is required');
    return new CatalogRepository({
      store: new PosixStorage({ snapshotStore: opts.posixFs.snapshotStore, logger }),
      logger,
      lockTimeoutMs,
      ...signing,
    });
  }
  if (opts.backend === 'oss') {
    if (!opts.oss) throw invalidRequest('[backend.oss] settings are required for repository_backend = "oss"');
    if (!(opts.cacheMaxSizeGb > 0))
      throw invalidRequest(`cache_max_size_gb must be > 0 (got ${opts.cacheMaxSizeGb})`);
    const level = opts.compression.level;
    if (!Number.isInteger(level) || level < 1 || level > 19) {
      throw invalidRequest(`publish_compression.level must be an integer 1..19 (got ${level})`);
    }
    const store = new S3Storage({
      oss: opts.oss,
      localCachePath: opts.localCachePath,
      cacheMaxBytes: Math.floor(opts.cacheMaxSizeGb * 1024 ** 3),
      cacheMinEvictAgeMs: opts.cacheMinEvictAgeMs ?? 60_000,
      compression: opts.compression,
      logger,
    });
    return new CatalogRepository({ store, logger, lockTimeoutMs, ...signing });
  }
  throw invalidRequest(
    `unknown snapshot repository backend ${JSON.stringify(opts.backend)} (posix_fs | oss)`,
  );
}
