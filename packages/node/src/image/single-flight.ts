// Shares one in-flight operation among concurrent callers with the same key. The shared operation gets its own
// AbortSignal, aborted only when every caller that joined it has given up.

export class SingleFlight<T> {
  private readonly flights = new Map<
    string,
    { promise: Promise<T>; waiters: number; controller: AbortController }
  >();

  /** Number of operations currently running (for tests and metrics). */
  get size(): number {
    return this.flights.size;
  }

  has(key: string): boolean {
    return this.flights.has(key);
  }

  run(key: string, fn: (signal: AbortSignal) => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    let flight = this.flights.get(key);
    if (!flight) {
      const controller = new AbortController();
      const promise = (async () => {
        try {
          return await fn(controller.signal);
        } finally {
          this.flights.delete(key);
        }
      })();
      // Callers observe the outcome through their own promises; a flight that everyone left still settles.
      promise.catch(() => {});
      flight = { promise, waiters: 0, controller };
      this.flights.set(key, flight);
    }
    const f = flight;
    f.waiters++;
    if (!signal) return f.promise.finally(() => void f.waiters--);
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const onAbort = (): void => {
        if (settled) return;
        settled = true;
        f.waiters--;
        if (f.waiters === 0) f.controller.abort(signal.reason);
        reject(signal.reason);
      };
      if (signal.aborted) {
        onAbort();
        return;
      }
      signal.addEventListener('abort', onAbort, { once: true });
      f.promise.then(
        (v) => {
          if (settled) return;
          settled = true;
          f.waiters--;
          signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        (e: unknown) => {
          if (settled) return;
          settled = true;
          f.waiters--;
          signal.removeEventListener('abort', onAbort);
          reject(e);
        },
      );
    });
  }
}
