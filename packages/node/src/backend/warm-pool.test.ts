import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../util/log.js';
import { WarmPool, type WarmPoolOptions } from './warm-pool.js';

const QUIET = 60_000;

/** A pool whose boots are counted and finish when the test lets them (`release`). */
function harness(over: Partial<WarmPoolOptions<string, string>> = {}) {
  let clock = 0;
  let n = 0;
  let memory = true;
  const pending: (() => void)[] = [];
  const live = new Set<string>();
  let running = 0;
  let maxRunning = 0;
  const pool = new WarmPool<string, string>({
    low: 2,
    high: 16,
    quietMs: QUIET,
    fillConcurrency: 2,
    maxTemplates: 2,
    memoryOk: () => memory,
    boot: (spec) => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      return new Promise((resolve) =>
        pending.push(() => {
          running--;
          const v = `${spec}#${++n}`;
          live.add(v);
          resolve(v);
        }),
      );
    },
    discard: async (v) => {
      live.delete(v);
    },
    labelOf: (spec) => spec,
    logger: createLogger('json', 'silent'),
    now: () => clock,
    ...over,
  });
  const flush = () => new Promise((r) => setImmediate(r));
  return {
    pool,
    live,
    get maxRunning() {
      return maxRunning;
    },
    get pendingBoots() {
      return pending.length;
    },
    setMemory: (ok: boolean) => (memory = ok),
    advance: (ms: number) => (clock += ms),
    /** Lets every boot started so far (and those they start, up to `rounds`) finish. */
    async releaseAll(rounds = 50) {
      for (let i = 0; i < rounds && pending.length > 0; i++) {
        for (const done of pending.splice(0)) done();
        await flush();
        await flush();
      }
    },
    ready: (key: string) => pool.stats().find((s) => s.label === key)?.ready ?? 0,
    target: (key: string) => pool.stats().find((s) => s.label === key)?.target ?? 0,
  };
}

let open: WarmPool<string, string>[] = [];
afterEach(async () => {
  await Promise.all(open.map((p) => p.close()));
  open = [];
});
const make = (over: Partial<WarmPoolOptions<string, string>> = {}) => {
  const h = harness(over);
  open.push(h.pool);
  return h;
};

describe('warm sandbox pool sizing', () => {
  it('fills a template to the low watermark when it is first wanted', async () => {
    const h = make();
    h.pool.want('t', 't');
    await h.releaseAll();
    expect(h.ready('t')).toBe(2);
    expect(h.target('t')).toBe(2);
  });

  it('grows the target with a burst that drains it, refilling at most fill_concurrency at a time', async () => {
    const h = make();
    h.pool.want('t', 't');
    await h.releaseAll();
    const hits = Array.from({ length: 20 }, () => h.pool.take('t', 't')).filter((v) => v !== undefined);
    expect(hits).toHaveLength(2);
    expect(h.target('t')).toBe(16);
    expect(h.pendingBoots).toBe(2);
    await h.releaseAll();
    expect(h.ready('t')).toBe(16);
    expect(h.maxRunning).toBe(2);
    // The next burst is mostly served from the pool.
    const second = Array.from({ length: 20 }, () => h.pool.take('t', 't')).filter((v) => v !== undefined);
    expect(second).toHaveLength(16);
    await h.releaseAll();
    // Capped at high_watermark (16), never above it.
    expect(h.target('t')).toBe(16);
    expect(h.ready('t')).toBe(16);
    expect(h.maxRunning).toBe(2);
  });

  it('counts booting sandboxes toward the target (no overshoot while boots are in flight)', async () => {
    const h = make({ fillConcurrency: 8, high: 4 });
    h.pool.want('t', 't');
    for (let i = 0; i < 10; i++) h.pool.take('t', 't');
    expect(h.target('t')).toBe(4);
    expect(h.pendingBoots).toBe(4);
    await h.releaseAll();
    expect(h.ready('t')).toBe(4);
    expect(h.live.size).toBe(4);
  });

  it('decays after a quiet period and removes the sandboxes beyond the target', async () => {
    const h = make();
    h.pool.want('t', 't');
    await h.releaseAll();
    const taken = Array.from({ length: 20 }, () => h.pool.take('t', 't')).filter((v) => v !== undefined);
    await h.releaseAll();
    expect(h.ready('t')).toBe(16);
    h.advance(QUIET - 1);
    h.pool.tick();
    expect(h.ready('t')).toBe(16);
    h.advance(1);
    h.pool.tick();
    await h.releaseAll();
    expect(h.target('t')).toBe(8);
    expect(h.ready('t')).toBe(8);
    for (let i = 0; i < 3; i++) {
      h.advance(QUIET);
      h.pool.tick();
    }
    await h.releaseAll();
    expect(h.target('t')).toBe(2);
    expect(h.ready('t')).toBe(2);
    // Only the idle surplus went away: what was handed out is not the pool's any more.
    expect(h.live.size).toBe(2 + taken.length);
    expect(taken.every((v) => h.live.has(v))).toBe(true);
  });

  it('boots nothing while host memory is short, and resumes once it is back', async () => {
    const h = make();
    h.setMemory(false);
    h.pool.want('t', 't');
    await h.releaseAll();
    expect(h.pendingBoots).toBe(0);
    expect(h.ready('t')).toBe(0);
    // A create still works (a miss) and grows the demand, but boots nothing.
    expect(h.pool.take('t', 't')).toBeUndefined();
    expect(h.pendingBoots).toBe(0);
    h.setMemory(true);
    h.pool.tick();
    await h.releaseAll();
    expect(h.ready('t')).toBe(2);
  });

  it('retries failed boots after a delay that starts at 1 s and doubles, and refills once boots succeed', async () => {
    let failing = true;
    let attempts = 0;
    const h = make({
      low: 1,
      high: 1,
      fillConcurrency: 1,
      boot: async (spec) => {
        attempts++;
        if (failing) throw new Error('boot failed');
        return spec;
      },
    });
    const pool = h.pool;
    const settle = () => new Promise((r) => setImmediate(r));
    pool.want('t', 't');
    await settle();
    expect(attempts).toBe(1);
    // The first delay is 0.5–1 s (jittered): nothing is retried before it, once after it.
    h.advance(400);
    pool.tick();
    await settle();
    expect(attempts).toBe(1);
    h.advance(700);
    pool.tick();
    await settle();
    expect(attempts).toBe(2);
    // The second is 1–2 s, the third 2–4 s.
    h.advance(2100);
    pool.tick();
    await settle();
    expect(attempts).toBe(3);
    failing = false;
    h.advance(4100);
    pool.tick();
    await settle();
    expect(attempts).toBe(4);
    expect(pool.stats()[0]?.ready).toBe(1);
  });

  it('keeps the most recently used templates and removes the ready sandboxes of the one dropped', async () => {
    const h = make();
    h.pool.want('a', 'a');
    h.pool.want('b', 'b');
    await h.releaseAll();
    expect(h.live.size).toBe(4);
    h.pool.want('a', 'a'); // a is now the most recent: b goes when c comes
    h.pool.want('c', 'c');
    await h.releaseAll();
    expect(h.pool.stats().map((s) => s.label)).toEqual(['a', 'c']);
    expect([...h.live].filter((v) => v.startsWith('b'))).toEqual([]);
  });

  it('is off with a low watermark of 0', async () => {
    const h = make({ low: 0 });
    expect(h.pool.enabled).toBe(false);
    h.pool.want('t', 't');
    expect(h.pool.take('t', 't')).toBeUndefined();
    expect(h.pendingBoots).toBe(0);
    expect(h.pool.stats()).toEqual([]);
  });

  it('removes every ready sandbox on close, and one whose boot finishes after', async () => {
    const h = make();
    h.pool.want('t', 't');
    await h.releaseAll();
    h.pool.take('t', 't');
    h.pool.take('t', 't'); // drained: target 4, boots running
    expect(h.pendingBoots).toBe(2);
    const closing = h.pool.close();
    await h.releaseAll();
    await closing;
    expect(h.live.size).toBe(2); // only the two handed out
  });
});
