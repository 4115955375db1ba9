import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from '../../util/log.js';
import { RepositoryError } from '../errors.js';
import type { LockHandle, LockMode } from '../storage.js';
import { PreconditionFailed, type HeadResult, type S3Ops } from './s3-ops.js';

export interface LeaseLockOptions {
  ops: S3Ops;
  leaseMs: number;
  logger: Logger;
  /** Server clock minus local clock (ms), so lease ages are judged on the server's clock. */
  clockOffsetMs: () => number;
}

const MAX_BACKOFF_MS = 500;

/**
 * Locks for an object store, which has no locks: a lock is an object created with `If-None-Match: *`
 * (exactly one creator wins) and kept alive by its holder, who rewrites it (`If-Match` its ETag) every
 * third of the lease. A lock whose object is older than the lease (by the server's clock) belongs to a dead
 * holder and is broken with a conditional delete. Shared mode (only the GC lock uses it) writes one marker
 * per holder; an exclusive holder waits until no live marker exists, and a shared holder re-checks the
 * exclusive object after writing its marker — with read-after-write consistency one of the two always sees
 * the other. A holder that cannot renew in time is told by `assertHeld()` and must not commit.
 */
export class LeaseLocks {
  private readonly owner = `${hostname()}:${process.pid}`;

  constructor(private readonly opts: LeaseLockOptions) {}

  async acquire(key: string, mode: LockMode, timeoutMs: number): Promise<LockHandle> {
    const deadline = Date.now() + timeoutMs;
    return mode === 'exclusive'
      ? this.acquireExclusive(key, deadline, timeoutMs)
      : this.acquireShared(key, deadline, timeoutMs);
  }

  private body(mode: LockMode): string {
    return JSON.stringify({ owner: this.owner, mode, token: randomUUID() });
  }

  private isStale(head: HeadResult): boolean {
    const serverNow = Date.now() + this.opts.clockOffsetMs();
    // LastModified has one-second resolution: allow for it.
    return serverNow - head.lastModifiedMs > this.opts.leaseMs + 1000;
  }

  private async acquireExclusive(key: string, deadline: number, timeoutMs: number): Promise<LockHandle> {
    const { ops } = this.opts;
    let backoff = 20;
    for (;;) {
      let etag: string | undefined;
      try {
        etag = await ops.putText(key, this.body('exclusive'), { ifNoneMatch: '*' });
      } catch (err) {
        if (!(err instanceof PreconditionFailed)) throw err;
      }
      if (etag !== undefined) {
        const handle = this.hold(key, etag);
        if (key.endsWith('/gc')) {
          try {
            await this.waitForSharedHolders(`${key}.shared/`, deadline, timeoutMs, handle);
          } catch (err) {
            await handle.release();
            throw err;
          }
        }
        return handle;
      }
      const head = await ops.head(key);
      if (head && this.isStale(head)) {
        await this.breakStale(key, head);
        continue;
      }
      if (Date.now() >= deadline) throw timeout(key, timeoutMs);
      await sleep(Math.min(backoff, Math.max(1, deadline - Date.now())));
      backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
    }
  }

  private async waitForSharedHolders(
    prefix: string,
    deadline: number,
    timeoutMs: number,
    handle: LockHandle,
  ): Promise<void> {
    const { ops } = this.opts;
    let backoff = 20;
    for (;;) {
      let live = 0;
      for (const marker of await ops.list(prefix)) {
        const head = await ops.head(marker.key);
        if (!head) continue;
        if (this.isStale(head)) await this.breakStale(marker.key, head);
        else live++;
      }
      if (live === 0) return;
      handle.assertHeld();
      if (Date.now() >= deadline) throw timeout(prefix, timeoutMs);
      await sleep(Math.min(backoff, Math.max(1, deadline - Date.now())));
      backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
    }
  }

  private async acquireShared(key: string, deadline: number, timeoutMs: number): Promise<LockHandle> {
    const { ops } = this.opts;
    let backoff = 20;
    for (;;) {
      if (!(await this.liveExclusive(key))) {
        const marker = `${key}.shared/${randomUUID()}`;
        const etag = await ops.putText(marker, this.body('shared'));
        if (!(await this.liveExclusive(key))) return this.hold(marker, etag);
        await ops.delete(marker);
      }
      if (Date.now() >= deadline) throw timeout(key, timeoutMs);
      await sleep(Math.min(backoff, Math.max(1, deadline - Date.now())));
      backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
    }
  }

  /** True when a live exclusive lock exists; a stale one is broken (so its zombie holder's renewal fails). */
  private async liveExclusive(key: string): Promise<boolean> {
    const head = await this.opts.ops.head(key);
    if (!head) return false;
    if (!this.isStale(head)) return true;
    await this.breakStale(key, head);
    return false;
  }

  private async breakStale(key: string, head: HeadResult): Promise<void> {
    try {
      await this.opts.ops.delete(key, head.etag);
      this.opts.logger.warn({ lock: key }, 'broke a stale repository lock (its holder stopped renewing it)');
    } catch (err) {
      if (!(err instanceof PreconditionFailed)) throw err;
    }
  }

  private hold(key: string, firstEtag: string): LockHandle {
    const { ops, leaseMs, logger } = this.opts;
    let etag = firstEtag;
    let lastRenewMs = Date.now();
    let lost = false;
    let released = false;
    let renewing: Promise<void> | undefined;
    const renew = async () => {
      try {
        etag = await ops.putText(key, this.body('exclusive'), { ifMatch: etag });
        lastRenewMs = Date.now();
      } catch (err) {
        if (err instanceof PreconditionFailed) {
          lost = true;
          logger.error({ lock: key }, 'repository lock was taken over while held');
        } else {
          logger.warn({ lock: key, err: (err as Error).message }, 'repository lock renewal failed; retrying');
        }
      }
    };
    const timer = setInterval(
      () => {
        if (!renewing && !lost) renewing = renew().finally(() => (renewing = undefined));
      },
      Math.max(50, Math.floor(leaseMs / 3)),
    );
    timer.unref();
    return {
      assertHeld: () => {
        if (lost || Date.now() - lastRenewMs > leaseMs) {
          throw new RepositoryError(
            'Backend',
            `repository lock ${key} was lost (not renewed within ${leaseMs} ms)`,
          );
        }
      },
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(timer);
        await renewing;
        if (lost) return;
        try {
          await ops.delete(key, etag);
        } catch (err) {
          if (!(err instanceof PreconditionFailed)) throw err;
        }
      },
    };
  }
}

function timeout(key: string, timeoutMs: number): RepositoryError {
  return new RepositoryError('Backend', `timed out after ${timeoutMs} ms waiting for repository lock ${key}`);
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
