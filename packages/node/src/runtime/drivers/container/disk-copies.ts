import { randomBytes } from 'node:crypto';
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import type { DirLifecycleLogger } from './spare-dirs.js';

// Named like spare dirs, so a restart's SpareDirs.init removes ready ones and Trash.init half-made ones.
const COPY_PREFIX = '.spare-copy-';
const TMP_PREFIX = '.spare-tmp-';

const suffix = () => randomBytes(6).toString('hex');

interface Source {
  count: number;
  ready: string[];
  filling: Promise<void> | null;
  dropped: boolean;
}

/**
 * Sandbox dirs cloned ahead of time from a saved disk that many sandboxes start on (a start capture's): a
 * restore from it renames one into place instead of waiting for a btrfs snapshot (a transaction commit,
 * 10–25 ms here). Refilled in the background after each take.
 */
export class DiskCopies {
  private readonly sources = new Map<string, Source>();
  private closed = false;

  constructor(
    private readonly opts: {
      dir: string;
      /** Makes a sandbox dir at `path` holding a copy of the saved disk `source` (its upper/ only). */
      make(source: string, path: string): Promise<void>;
      remove(path: string): Promise<void>;
      log: DirLifecycleLogger;
    },
  ) {}

  /** Keeps `count` copies of `source` ready from now on. */
  keep(source: string, count: number): void {
    if (this.closed) return;
    const s = this.sources.get(source) ?? { count, ready: [], filling: null, dropped: false };
    s.count = count;
    this.sources.set(source, s);
    this.fill(source, s);
  }

  /** A ready copy of `source` (the caller renames it into place, then calls `refill` once its work is done). */
  take(source: string): string | null {
    return this.sources.get(source)?.ready.shift() ?? null;
  }

  /** Tops the copies of `source` up in the background (after a restore: a copy's commit would slow it). */
  refill(source: string): void {
    const s = this.sources.get(source);
    if (s) this.fill(source, s);
  }

  /** Stops keeping copies of `source` and removes the ready ones (before `source` itself goes). */
  async drop(source: string): Promise<void> {
    const s = this.sources.get(source);
    if (!s) return;
    this.sources.delete(source);
    s.dropped = true;
    await s.filling;
    await this.removeAll(s);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const source of [...this.sources.keys()]) await this.drop(source);
  }

  private fill(source: string, s: Source): void {
    if (s.filling || s.dropped || s.ready.length >= s.count) return;
    s.filling = (async () => {
      while (!s.dropped && !this.closed && s.ready.length < s.count) {
        const id = suffix();
        const tmp = join(this.opts.dir, `${TMP_PREFIX}${id}`);
        try {
          await this.opts.make(source, tmp);
          const path = join(this.opts.dir, `${COPY_PREFIX}${id}`);
          await rename(tmp, path);
          s.ready.push(path);
        } catch (err) {
          this.opts.log.warn(
            { err: (err as Error).message, source },
            'cannot prepare a copy of a saved disk',
          );
          await this.opts.remove(tmp).catch(() => {});
          return;
        }
      }
    })().finally(() => {
      s.filling = null;
    });
  }

  private async removeAll(s: Source): Promise<void> {
    for (const path of s.ready.splice(0)) await this.opts.remove(path).catch(() => {});
  }
}
