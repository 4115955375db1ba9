import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  NO_HOST_OBJECTS,
  eventually,
  hostObjects,
  metricsNow,
  startServer,
  useSdk,
  type TestServer,
} from './harness.js';

const HIGH = 32;
const BURST = 20;

/** The warm pool's series from GET /metrics, summed over templates (one is in use here). */
interface PoolMetrics {
  ready: number;
  booting: number;
  target: number;
  hits: number;
  misses: number;
  memoryBytes: number;
}

async function poolMetrics(server: TestServer): Promise<PoolMetrics> {
  const sum = await metricsNow(server);
  return {
    ready: sum(/^aenv_warm_pool_sandboxes\{.*state="ready"/),
    booting: sum(/^aenv_warm_pool_sandboxes\{.*state="booting"/),
    target: sum(/^aenv_warm_pool_target\{/),
    hits: sum(/^aenv_warm_pool_creates_total\{.*result="hit"/),
    misses: sum(/^aenv_warm_pool_creates_total\{.*result="miss"/),
    memoryBytes: sum(/^aenv_warm_pool_memory_bytes /),
  };
}

/**
 * The warm pool sized from demand (docs/architecture.md, "Warm sandbox pool"): bursts of creates grow the
 * template's target toward high_watermark, so a later burst is served from the pool.
 */
describe('warm sandbox pool sized from demand', () => {
  let server: TestServer;
  /** The most pre-started sandboxes (ready + booting) seen at once, sampled all along. */
  let most = 0;
  let sampling = true;
  let sampler: Promise<void> | undefined;

  beforeAll(async () => {
    server = await startServer({
      name: 'wdemand',
      warm: 2,
      pool: { high_watermark: HIGH, sandbox_fill_concurrency: 2, sandbox_idle_secs: 3600 },
      // The default (16) would answer part of a burst of 20 with 429.
      toml: `[limits]\nmax_concurrent_creates = ${BURST}\n`,
    });
    useSdk(server);
    sampler = (async () => {
      // Bounded: at most 20 minutes of samples.
      for (let i = 0; i < 12_000 && sampling; i++) {
        const m = await poolMetrics(server).catch(() => undefined);
        if (m) most = Math.max(most, m.ready + m.booting);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    await eventually(async () => (await poolMetrics(server)).ready === 2, 'the pool to prewarm 2', 600, 100);
  });
  afterAll(async () => {
    sampling = false;
    await sampler;
    await server?.shutdown();
  });

  /** `BURST` creates at once; each sandbox answers a command; all are killed. */
  async function burst(): Promise<void> {
    const results = await Promise.allSettled(
      Array.from({ length: BURST }, () => Sandbox.create({ timeoutMs: 120_000 })),
    );
    const made = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    try {
      expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
      const names = await Promise.all(
        made.map(async (s) => (await s.commands.run('hostname')).stdout.trim()),
      );
      expect(names).toEqual(made.map((s) => s.sandboxId));
    } finally {
      await Promise.all(made.map((s) => s.kill()));
    }
  }

  /** Waits until the pool holds its target (nothing booting) and returns its metrics. */
  async function refilled(): Promise<PoolMetrics> {
    let m = await poolMetrics(server);
    await eventually(
      async () => {
        m = await poolMetrics(server);
        return m.booting === 0 && m.ready === m.target;
      },
      'the pool to refill to its target',
      1200,
      100,
    );
    return m;
  }

  it('grows with the demand it sees, then serves a burst of 20 creates mostly from the pool', async () => {
    const start = await poolMetrics(server);
    expect(start.target).toBe(2);

    // Demand: two bursts. The first drains the 2 prewarmed sandboxes and grows the target; the second drains
    // what the pool then holds and grows it again.
    await burst();
    const afterFirst = await refilled();
    expect(afterFirst.target).toBeGreaterThan(2);
    expect(afterFirst.misses - start.misses).toBeGreaterThan(0);
    await burst();
    const warmed = await refilled();
    expect(warmed.target).toBeGreaterThanOrEqual(BURST);
    expect(warmed.target).toBeLessThanOrEqual(HIGH);
    // What the pool holds costs memory, and the node reports it.
    expect(warmed.memoryBytes).toBeGreaterThan(0);
    // Idle pool = every container of the node (nothing else runs).
    expect(hostObjects(server).runcContainers.filter((c) => c.startsWith('warm-'))).toHaveLength(
      warmed.ready,
    );

    await burst();
    const after = await poolMetrics(server);
    const hits = after.hits - warmed.hits;
    const misses = after.misses - warmed.misses;
    expect(hits + misses).toBe(BURST);
    expect(hits).toBeGreaterThanOrEqual(BURST - 2);
  });

  it('never holds more than high_watermark pre-started sandboxes of a template', async () => {
    await refilled();
    expect(most).toBeGreaterThan(2);
    expect(most).toBeLessThanOrEqual(HIGH);
  });

  it('leaves nothing on the host after the sandboxes are killed and the node stops', async () => {
    expect(await server.killAll()).toBe(0);
    sampling = false;
    await sampler;
    expect(await server.stop()).toBe(0);
    expect(hostObjects(server)).toEqual(NO_HOST_OBJECTS);
  });
});
