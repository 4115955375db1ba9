import type { Logger } from '../util/log.js';
import { detached } from '../util/phases.js';

/** A booted sandbox (envd healthy, not yet /init'ed) waiting to be handed out. */
export interface WarmSandbox<T> {
  key: string;
  /** Whatever the backend needs to adopt it. */
  value: T;
}

export interface WarmPoolOptions<S, T> {
  /** Ready sandboxes kept per template in use (0 disables the pool). */
  size: number;
  /** Templates kept warm at most; the least recently used one is dropped beyond it. */
  maxTemplates: number;
  boot(spec: S): Promise<T>;
  discard(value: T): Promise<void>;
  logger: Logger;
}

/**
 * Pre-started sandboxes per template (docs/architecture.md#lifecycle, "Warm sandbox pool").
 * A create takes one at once and the pool boots a replacement in the background, one at a time, so it never
 * competes with creates for more than one core. Templates enter the pool when used (or prewarmed) and leave it
 * least-recently-used first.
 */
export class WarmPool<S, T> {
  private readonly ready = new Map<string, T[]>();
  private readonly wanted = new Map<string, S>();
  private readonly failedUntil = new Map<string, number>();
  private filling: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly opts: WarmPoolOptions<S, T>) {}

  get enabled(): boolean {
    return this.opts.size > 0 && !this.closed;
  }

  /** A ready sandbox for `key`, if one is waiting. */
  take(key: string): T | undefined {
    const list = this.ready.get(key);
    const value = list?.shift();
    if (value !== undefined) this.kick();
    return value;
  }

  /** Keeps `key` warm (most recently used first); boots what is missing in the background. */
  want(key: string, spec: S): void {
    if (!this.enabled) return;
    this.wanted.delete(key);
    this.wanted.set(key, spec);
    while (this.wanted.size > this.opts.maxTemplates) {
      const oldest = this.wanted.keys().next().value as string;
      this.wanted.delete(oldest);
      const stale = this.ready.get(oldest) ?? [];
      this.ready.delete(oldest);
      for (const v of stale) void this.opts.discard(v).catch(() => {});
    }
    this.kick();
  }

  /** Drops the ready sandboxes of `key` (its template changed or went away). */
  async forget(key: string): Promise<void> {
    this.wanted.delete(key);
    const stale = this.ready.get(key) ?? [];
    this.ready.delete(key);
    await Promise.all(stale.map((v) => this.opts.discard(v).catch(() => {})));
  }

  counts(): Record<string, number> {
    return Object.fromEntries([...this.ready].map(([k, v]) => [k, v.length]));
  }

  private kick(): void {
    if (!this.filling && this.enabled) {
      // Background work: not a phase of the request whose `want` started it.
      this.filling = detached(() => this.fill()).finally(() => (this.filling = undefined));
    }
  }

  private nextKey(): string | undefined {
    const now = Date.now();
    for (const key of [...this.wanted.keys()].reverse()) {
      if ((this.ready.get(key)?.length ?? 0) >= this.opts.size) continue;
      if ((this.failedUntil.get(key) ?? 0) > now) continue;
      return key;
    }
    return undefined;
  }

  private async fill(): Promise<void> {
    for (let key = this.nextKey(); key !== undefined && !this.closed; key = this.nextKey()) {
      const spec = this.wanted.get(key)!;
      try {
        const value = await this.opts.boot(spec);
        if (this.closed || !this.wanted.has(key)) {
          await this.opts.discard(value).catch(() => {});
          continue;
        }
        const list = this.ready.get(key) ?? [];
        list.push(value);
        this.ready.set(key, list);
      } catch (err) {
        this.opts.logger.warn({ err, key }, 'could not pre-start a sandbox; retrying in 30 s');
        this.failedUntil.set(key, Date.now() + 30_000);
      }
    }
  }

  /** Stops refilling and removes every ready sandbox. */
  async close(): Promise<void> {
    this.closed = true;
    await this.filling;
    const all = [...this.ready.values()].flat();
    this.ready.clear();
    await Promise.all(all.map((v) => this.opts.discard(v).catch(() => {})));
  }
}
