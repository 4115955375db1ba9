import { randomBytes } from 'node:crypto';
import { readdir, rename } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { Logger } from '../../../util/log.js';

export type DirLifecycleLogger = Pick<Logger, 'warn'>;

const SPARE_PREFIX = '.spare-';
const SPARE_TMP_PREFIX = '.spare-tmp-';
const TRASH_PREFIX = '.trash-';

const suffix = () => randomBytes(6).toString('hex');

/**
 * A few empty sandbox dirs made ahead of time (a subvolume with its upper/work/rootfs/... already owned
 * by the mapped root), so a create only renames one into place instead of spending a `btrfs` process
 * and a dozen syscalls. Refilled in the background; names start with '.', which reconcile leaves alone.
 */
export class SpareDirs {
  private readonly ready: string[] = [];
  private filling: Promise<void> | null = null;
  private closed = false;

  constructor(
    private readonly opts: {
      dir: string;
      count: number;
      /** Makes a complete empty sandbox dir at the path. */
      make(path: string): Promise<void>;
      remove(path: string): Promise<void>;
      log: DirLifecycleLogger;
    },
  ) {}

  /** Drops spares a previous run left (their layout may be outdated) and starts filling. */
  async init(): Promise<void> {
    for (const name of await readdir(this.opts.dir)) {
      // Half-made ones (.spare-tmp-*) are the Trash's to remove.
      if (name.startsWith(SPARE_PREFIX) && !name.startsWith(SPARE_TMP_PREFIX)) {
        await this.opts.remove(join(this.opts.dir, name));
      }
    }
    this.fill();
  }

  /** A ready spare dir (the caller renames it, then calls `fill` once its own work is done), or null. */
  take(): string | null {
    return this.ready.shift() ?? null;
  }

  /** Tops the spares up in the background (after a create, so the refill does not slow that create). */
  fill(): void {
    if (this.filling || this.closed || this.ready.length >= this.opts.count) return;
    this.filling = (async () => {
      while (!this.closed && this.ready.length < this.opts.count) {
        const id = suffix();
        const tmp = join(this.opts.dir, `${SPARE_TMP_PREFIX}${id}`);
        try {
          await this.opts.make(tmp);
          const path = join(this.opts.dir, `${SPARE_PREFIX}${id}`);
          await rename(tmp, path);
          this.ready.push(path);
        } catch (err) {
          this.opts.log.warn({ err: (err as Error).message }, 'cannot prepare a spare sandbox dir');
          await this.opts.remove(tmp).catch(() => {});
          return;
        }
      }
    })().finally(() => {
      this.filling = null;
    });
  }

  /** Resolves when no refill is running. */
  async idle(): Promise<void> {
    await this.filling;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.filling;
    for (const path of this.ready.splice(0)) await this.opts.remove(path).catch(() => {});
  }
}

/**
 * Deleting a sandbox dir (a btrfs subvolume, or a tree) is moved out of the caller's way: the dir is
 * renamed to `.trash-*` at once (so its id is free again) and removed in the background. Leftovers of
 * a crash are removed by `init`.
 */
export class Trash {
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly opts: { dir: string; remove(path: string): Promise<void>; log: DirLifecycleLogger },
  ) {}

  async init(): Promise<void> {
    for (const name of await readdir(this.opts.dir)) {
      if (name.startsWith(TRASH_PREFIX) || name.startsWith(SPARE_TMP_PREFIX)) {
        this.enqueue(join(this.opts.dir, name));
      }
    }
  }

  /** Renames `path` (a direct child of the dir) out of the way; false when it does not exist. */
  async discard(path: string): Promise<boolean> {
    const trashed = join(this.opts.dir, `${TRASH_PREFIX}${basename(path)}-${suffix()}`);
    try {
      await rename(path, trashed);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
    this.enqueue(trashed);
    return true;
  }

  private enqueue(path: string): void {
    this.queue = this.queue.then(() =>
      this.opts.remove(path).catch((err: Error) => {
        this.opts.log.warn({ err: err.message, path }, 'cannot remove a discarded sandbox dir');
      }),
    );
  }

  /** Resolves when everything discarded so far is gone. */
  async drain(): Promise<void> {
    await this.queue;
  }
}
