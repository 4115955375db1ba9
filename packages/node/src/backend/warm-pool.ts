import { Backoff } from '../util/backoff.js';
import type { Logger } from '../util/log.js';
import { detached } from '../util/phases.js';
import { PoolTarget } from './pool-target.js';

export interface WarmPoolOptions<S, T> {
  /** Ready sandboxes kept per template in use without demand (`[pool].warm_sandboxes`; 0 disables the pool). */
  low: number;
  /** The most ready sandboxes the target of one template grows to (`[pool].high_watermark`). */
  high: number;
  /** A template's target above `low` halves after this long without a create of it. */
  quietMs: number;
  /** Sandboxes booted at once while refilling (all templates together). */
  fillConcurrency: number;
  /** Templates kept warm at most; the least recently used one is dropped beyond it. */
  maxTemplates: number;
  /** False while the host has too little memory available to boot more (checked before each boot). */
  memoryOk(): boolean;
  boot(spec: S): Promise<T>;
  discard(value: T): Promise<void>;
  /** Names a template in metrics and stats. */
  labelOf(spec: S): string;
  /** Told of every create that asked the pool (metrics). */
  onCreate?(label: string, hit: boolean): void;
  logger: Logger;
  now?: () => number;
}

/** One template's pool, as metrics show it. */
export interface WarmPoolStats {
  label: string;
  ready: number;
  booting: number;
  target: number;
}

interface Entry<S, T> {
  spec: S;
  label: string;
  ready: T[];
  booting: number;
  target: PoolTarget;
  failedUntil: number;
  /** Delays after failed boots: 1 s doubling to 30 s, reset by a boot that succeeds. */
  retry: Backoff;
}

/** How often targets are checked for decay and a fill held back by memory is retried. */
const TICK_MS = 1000;
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 30_000;

/**
 * Pre-started sandboxes per template (docs/architecture.md#lifecycle, "Warm sandbox pool"). A create takes
 * one at once; the pool refills toward each template's target (pool-target.ts: it grows with the demand it
 * sees and decays when it stops), `fillConcurrency` boots at a time, none while host memory is short.
 * Templates enter the pool when used (or prewarmed) and leave it least-recently-used first.
 */
export class WarmPool<S, T> {
  /** Insertion order = least recently used first. */
  private readonly entries = new Map<string, Entry<S, T>>();
  private readonly boots = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private memoryShortLogged = false;
  private closed = false;
  private readonly now: () => number;

  constructor(private readonly opts: WarmPoolOptions<S, T>) {
    this.now = opts.now ?? Date.now;
    if (this.enabled) {
      this.timer = setInterval(() => this.tick(), Math.min(TICK_MS, opts.quietMs));
      this.timer.unref();
    }
  }

  get enabled(): boolean {
    return this.opts.low > 0 && !this.closed;
  }

  /** A create of `key`: a ready sandbox if one is waiting (recorded as a hit or a miss); keeps `key` warm. */
  take(key: string, spec: S): T | undefined {
    if (!this.enabled) return undefined;
    const entry = this.touch(key, spec);
    const value = entry.ready.shift();
    entry.target.onCreate(value !== undefined, entry.ready.length, this.now());
    this.opts.onCreate?.(entry.label, value !== undefined);
    this.kick();
    return value;
  }

  /** Keeps `key` warm (most recently used first) without taking from it; boots what is missing. */
  want(key: string, spec: S): void {
    if (!this.enabled) return;
    this.touch(key, spec);
    this.kick();
  }

  /** Drops the ready sandboxes of `key` (its template changed or went away). */
  async forget(key: string): Promise<void> {
    const entry = this.entries.get(key);
    this.entries.delete(key);
    await this.discardAll(entry?.ready ?? []);
  }

  stats(): WarmPoolStats[] {
    return [...this.entries.values()].map((e) => ({
      label: e.label,
      ready: e.ready.length,
      booting: e.booting,
      target: e.target.value,
    }));
  }

  /** The sandboxes waiting in the pool. */
  readyValues(): T[] {
    return [...this.entries.values()].flatMap((e) => e.ready);
  }

  /** Lowers the targets of templates left quiet, discards what they hold beyond it, and refills. */
  tick(): void {
    if (!this.enabled) return;
    const now = this.now();
    for (const e of this.entries.values()) {
      if (!e.target.decay(now)) continue;
      const surplus = e.ready.splice(e.target.value);
      if (surplus.length > 0) {
        this.opts.logger.debug({ template: e.label, target: e.target.value }, 'warm pool shrinks');
        void this.discardAll(surplus);
      }
    }
    this.kick();
  }

  private touch(key: string, spec: S): Entry<S, T> {
    let entry = this.entries.get(key);
    if (entry) {
      this.entries.delete(key);
      entry.spec = spec;
    } else {
      const { low, high, quietMs } = this.opts;
      entry = {
        spec,
        label: this.opts.labelOf(spec),
        ready: [],
        booting: 0,
        target: new PoolTarget({ low, high, quietMs }, this.now()),
        failedUntil: 0,
        retry: new Backoff(RETRY_FIRST_MS, RETRY_MAX_MS),
      };
    }
    this.entries.set(key, entry);
    while (this.entries.size > this.opts.maxTemplates) {
      const [oldest, stale] = this.entries.entries().next().value as [string, Entry<S, T>];
      this.entries.delete(oldest);
      void this.discardAll(stale.ready);
    }
    return entry;
  }

  /** Starts boots (most recently used template first) up to `fillConcurrency` and each target. */
  private kick(): void {
    while (this.enabled && this.boots.size < this.opts.fillConcurrency) {
      const key = this.nextKey();
      if (key === undefined) return;
      if (!this.opts.memoryOk()) {
        if (!this.memoryShortLogged) {
          this.opts.logger.warn(
            'warm pool not refilled: host memory available is below the configured ratio',
          );
          this.memoryShortLogged = true;
        }
        return;
      }
      this.memoryShortLogged = false;
      const entry = this.entries.get(key)!;
      entry.booting++;
      // Background work: not a phase of the request whose create started it.
      const run: Promise<void> = detached(() => this.bootInto(key, entry)).finally(() => {
        entry.booting--;
        this.boots.delete(run);
        this.kick();
      });
      this.boots.add(run);
    }
  }

  private nextKey(): string | undefined {
    const now = this.now();
    for (const [key, e] of [...this.entries].reverse()) {
      if (e.ready.length + e.booting >= e.target.value || e.failedUntil > now) continue;
      return key;
    }
    return undefined;
  }

  private async bootInto(key: string, entry: Entry<S, T>): Promise<void> {
    let value: T;
    try {
      value = await this.opts.boot(entry.spec);
    } catch (err) {
      const delayMs = entry.retry.fail();
      this.opts.logger.warn(
        { err, template: entry.label, failures: entry.retry.failing, retryInMs: delayMs },
        'could not pre-start a sandbox; retrying',
      );
      entry.failedUntil = this.now() + delayMs;
      return;
    }
    entry.retry.succeed();
    // Closed, dropped (LRU or forget) or shrunk meanwhile: not wanted any more.
    if (this.closed || this.entries.get(key) !== entry || entry.ready.length >= entry.target.value) {
      await this.opts.discard(value).catch(() => {});
      return;
    }
    entry.ready.push(value);
  }

  private async discardAll(values: T[]): Promise<void> {
    await Promise.all(values.map((v) => this.opts.discard(v).catch(() => {})));
  }

  /** Stops refilling and removes every ready sandbox. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    while (this.boots.size > 0) await Promise.all([...this.boots]);
    const all = this.readyValues();
    this.entries.clear();
    await this.discardAll(all);
  }
}
