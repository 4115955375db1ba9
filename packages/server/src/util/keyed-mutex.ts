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
 * One FIFO mutex per key. Every state-changing operation on a sandbox runs under its key, so transitional
 * states exist only while their operation holds the lock, and "wait for the transition" = "wait for the lock".
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
      waiter.timer = setTimeout(() => {
        const i = queue.indexOf(waiter);
        if (i >= 0) queue.splice(i, 1);
        reject(new LockTimeoutError(key));
      }, timeoutMs);
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
