import { randomUUID } from 'node:crypto';
import { chmod, mkdir, readdir, rename, rm, stat, unlink, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../util/log.js';
import { privatizeTree } from '../../util/private-tree.js';
import { digestHex } from '../digest.js';
import { RepositoryError } from '../errors.js';

export interface LocalBlobCacheOptions {
  /** `[snapshot].local_cache_path`; blobs live in `blobs/sha256/<hex>`, downloads in progress in `tmp/`. */
  root: string;
  /** Size bound; least recently used entries are evicted above it. */
  maxBytes: number;
  /** Entries used more recently than this are never evicted, so a path just handed out stays valid. */
  minEvictAgeMs: number;
  logger: Logger;
}

const STALE_TEMP_MS = 60 * 60 * 1000;

interface Entry {
  size: number;
  lastUsedMs: number;
  /** Tie-breaker for uses within the same millisecond. */
  seq: number;
}

/**
 * Node-local, size-bounded LRU cache of raw blobs keyed by digest, with one download per digest at a time
 * (single-flight). Recency survives restarts through the files' mtime. Holds only verified content: a blob is
 * renamed in only after `fill` wrote and verified it.
 */
export class LocalBlobCache {
  private readonly entries = new Map<string, Entry>();
  private readonly inflight = new Map<string, Promise<string>>();
  private totalBytes = 0;
  private seq = 0;
  private loaded: Promise<void> | undefined;

  constructor(private readonly opts: LocalBlobCacheOptions) {}

  get blobsDir(): string {
    return join(this.opts.root, 'blobs/sha256');
  }

  get tmpDir(): string {
    return join(this.opts.root, 'tmp');
  }

  get sizeBytes(): number {
    return this.totalBytes;
  }

  /** Creates the directories, drops downloads a crash left behind, and indexes what is cached. */
  init(): Promise<void> {
    this.loaded ??= (async () => {
      // Cached snapshot content is as private as the repository's: owner-only, also what older versions wrote.
      await mkdir(this.blobsDir, { recursive: true, mode: 0o700 });
      await mkdir(this.tmpDir, { recursive: true, mode: 0o700 });
      await privatizeTree(this.opts.root);
      // Downloads/uploads a crash left behind; recent ones may belong to another process sharing the cache.
      const cutoff = Date.now() - STALE_TEMP_MS;
      for (const name of await readdir(this.tmpDir)) {
        const st = await stat(join(this.tmpDir, name)).catch(() => undefined);
        if (st && st.mtimeMs < cutoff) await rm(join(this.tmpDir, name), { recursive: true, force: true });
      }
      for (const hex of await readdir(this.blobsDir)) {
        const st = await stat(join(this.blobsDir, hex)).catch(() => undefined);
        if (!st?.isFile() || !/^[0-9a-f]{64}$/.test(hex)) continue;
        this.entries.set(hex, { size: st.size, lastUsedMs: st.mtimeMs, seq: 0 });
        this.totalBytes += st.size;
      }
    })();
    return this.loaded;
  }

  has(digest: string): boolean {
    return this.entries.has(digestHex(digest));
  }

  /**
   * The cached path of `digest`; on a miss `fill(tmpPath)` must write the verified raw content to `tmpPath`.
   * Concurrent callers for the same digest share one fill.
   */
  async get(digest: string, size: number, fill: (tmpPath: string) => Promise<void>): Promise<string> {
    await this.init();
    const hex = digestHex(digest);
    const path = join(this.blobsDir, hex);
    const entry = this.entries.get(hex);
    if (entry && entry.size === size) {
      if (
        await stat(path).then(
          (s) => s.size === size,
          () => false,
        )
      ) {
        await this.touch(hex, path);
        return path;
      }
      this.forget(hex);
    }
    let pending = this.inflight.get(hex);
    if (!pending) {
      pending = this.download(hex, path, size, fill).finally(() => this.inflight.delete(hex));
      this.inflight.set(hex, pending);
    }
    return pending;
  }

  private async download(
    hex: string,
    path: string,
    size: number,
    fill: (tmpPath: string) => Promise<void>,
  ): Promise<string> {
    const tmp = join(this.tmpDir, `${hex}.${randomUUID()}`);
    try {
      await fill(tmp);
      await chmod(tmp, 0o600);
      const st = await stat(tmp);
      if (st.size !== size) {
        throw new RepositoryError(
          'IntegrityMismatch',
          `blob sha256:${hex} has ${st.size} bytes, expected ${size}`,
        );
      }
      await rename(tmp, path);
    } finally {
      await rm(tmp, { force: true });
    }
    this.forget(hex);
    this.entries.set(hex, { size, lastUsedMs: Date.now(), seq: ++this.seq });
    this.totalBytes += size;
    await this.evict(hex);
    return path;
  }

  private async touch(hex: string, path: string): Promise<void> {
    const entry = this.entries.get(hex);
    if (!entry) return;
    entry.lastUsedMs = Date.now();
    entry.seq = ++this.seq;
    const t = new Date(entry.lastUsedMs);
    await utimes(path, t, t).catch(() => {});
  }

  private forget(hex: string): void {
    const entry = this.entries.get(hex);
    if (!entry) return;
    this.totalBytes -= entry.size;
    this.entries.delete(hex);
  }

  /** Evicts least recently used entries (never `keep`, never one in use recently) until under the bound. */
  private async evict(keep: string): Promise<void> {
    if (this.totalBytes <= this.opts.maxBytes) return;
    const now = Date.now();
    const candidates = [...this.entries.entries()]
      .filter(
        ([hex, e]) =>
          hex !== keep && !this.inflight.has(hex) && now - e.lastUsedMs >= this.opts.minEvictAgeMs,
      )
      .sort(([, a], [, b]) => a.lastUsedMs - b.lastUsedMs || a.seq - b.seq);
    for (const [hex] of candidates) {
      if (this.totalBytes <= this.opts.maxBytes) break;
      await unlink(join(this.blobsDir, hex)).catch(() => {});
      this.forget(hex);
      this.opts.logger.debug({ digest: `sha256:${hex}` }, 'evicted blob from local snapshot cache');
    }
    if (this.totalBytes > this.opts.maxBytes) {
      this.opts.logger.warn(
        { sizeBytes: this.totalBytes, maxBytes: this.opts.maxBytes },
        'local snapshot cache is over its size bound (remaining entries are in use)',
      );
    }
  }
}
