/** Raised when a lock was not obtained in time (the sandbox stayed in a transitional state too long). */
export class LockTimeoutError extends Error {
  constructor(readonly key: string) {
    super(`timed out waiting for the operation in progress on ${key}`);
    this.name = 'LockTimeoutError';
  }
}

interface Waiter {
  grant: () => void;
  timer: NodeJS.Timeout | undefined;
}

/**
 * One FIFO mutex per key: the node's one per-key serialiser. Every state-changing operation on a sandbox runs
 * under its key in the orchestrator (with a timeout: "wait for the transition" = "wait for the lock"), the
 * runtime driver's operations on a container under its id (`serialize`, no timeout), repository writes under
 * their record's id. (Sharing one in-flight result, image/single-flight.ts, and group commit,
 * image/sync-coalescer.ts, are other jobs.)
 */
export class KeyedMutex {
  private readonly queues = new Map<string, Waiter[]>();

  isLocked(key: string): boolean {
    return this.queues.has(key);
  }

  async run<T>(key: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
    const release = await this.acquire(key, timeoutMs);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /** Runs `fn` once every earlier holder of `key` is done, however long that takes. */
  serialize<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return this.run(key, Infinity, fn);
  }

  /** `timeoutMs` = Infinity waits as long as it takes. */
  acquire(key: string, timeoutMs: number): Promise<() => void> {
    const queue = this.queues.get(key);
    const release = () => this.release(key);
    if (!queue) {
      this.queues.set(key, []);
      return Promise.resolve(release);
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        grant: () => {
          if (waiter.timer) clearTimeout(waiter.timer);
          resolve(release);
        },
        timer: undefined,
      };
      if (Number.isFinite(timeoutMs)) {
        waiter.timer = setTimeout(() => {
          const i = queue.indexOf(waiter);
          if (i >= 0) queue.splice(i, 1);
          reject(new LockTimeoutError(key));
        }, timeoutMs);
      }
      queue.push(waiter);
    });
  }

  private release(key: string): void {
    const queue = this.queues.get(key);
    if (!queue) return;
    const next = queue.shift();
    if (next) next.grant();
    else this.queues.delete(key);
  }
}
