import { describe, expect, it } from 'vitest';
import {
  MetricRing,
  SandboxMetricsSampler,
  type MetricsTarget,
  type SandboxMetricSample,
} from './sandbox-metrics.js';
import type { CgroupUsage } from '../runtime/drivers/container/cgroups.js';
import { RuntimeError } from '../runtime/driver.js';

const sample = (t: number): SandboxMetricSample => ({
  timestampMs: t,
  cpuCount: 2,
  cpuUsedPct: t / 10,
  memUsed: t * 2,
  memCache: t * 3,
  memTotal: t * 4,
  diskUsed: t * 5,
  diskTotal: t * 6,
});

describe('MetricRing', () => {
  it('keeps every sample in order while it grows, then the last `capacity` ones', () => {
    const ring = new MetricRing(200);
    for (let t = 1; t <= 150; t++) ring.push(sample(t));
    expect(ring.size).toBe(150);
    expect(ring.range().map((s) => s.timestampMs)).toEqual(Array.from({ length: 150 }, (_, i) => i + 1));
    for (let t = 151; t <= 450; t++) ring.push(sample(t));
    expect(ring.size).toBe(200);
    const all = ring.range();
    expect(all[0]).toEqual(sample(251));
    expect(all.at(-1)).toEqual(sample(450));
    expect(ring.latest()).toEqual(sample(450));
  });

  it('filters by time, both ends inclusive', () => {
    const ring = new MetricRing(3);
    for (const t of [10, 20, 30, 40]) ring.push(sample(t));
    expect(ring.range(20, 30).map((s) => s.timestampMs)).toEqual([20, 30]);
    expect(ring.range(31).map((s) => s.timestampMs)).toEqual([40]);
    expect(ring.range(0, 19)).toEqual([]);
    expect(new MetricRing(5).latest()).toBeUndefined();
  });
});

describe('SandboxMetricsSampler', () => {
  const target = (over: Partial<MetricsTarget> = {}): MetricsTarget => ({
    sandboxId: 'sb1',
    containerId: 'sb1',
    diskDir: '/x/sb1',
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 1024,
    startedAtMs: 0,
    ...over,
  });

  function setup(targets: MetricsTarget[]) {
    let now = 10_000;
    const usage = new Map<string, CgroupUsage>();
    const known = new Set(targets.map((t) => t.sandboxId));
    const forgotten: string[] = [];
    const sampler = new SandboxMetricsSampler({
      intervalMs: 1000,
      maxSamples: 10,
      targets: () => targets,
      known: () => known,
      readUsage: async (id) => {
        const u = usage.get(id);
        if (!u) throw new RuntimeError('NotFound', `sandbox ${id} has no cgroup`);
        return u;
      },
      readDisk: async () => ({ usedBytes: 7 * 1024 * 1024, limitBytes: 1024 * 1024 * 1024 }),
      forgetDisk: (dir) => forgotten.push(dir),
      now: () => now,
    });
    return { sampler, usage, known, forgotten, advance: (ms: number) => (now += ms) };
  }

  it('computes CPU share per core between passes, memory without page cache, and disk from the quota', async () => {
    const { sampler, usage, advance } = setup([target()]);
    // 10 s since start, 5 s of CPU on 2 cores = 25 %.
    usage.set('sb1', {
      cpuUsageNs: 5e9,
      memoryUsageBytes: 300,
      memoryCacheBytes: 100,
      memoryLimitBytes: 512 * 1024 * 1024,
    });
    await sampler.sampleOnce();
    advance(1000);
    // 1 s later, 2 s more CPU on 2 cores = 100 %.
    usage.set('sb1', {
      cpuUsageNs: 7e9,
      memoryUsageBytes: 400,
      memoryCacheBytes: 50,
      memoryLimitBytes: Infinity,
    });
    await sampler.sampleOnce();
    const [a, b] = sampler.samples('sb1')!;
    expect(a).toMatchObject({ cpuUsedPct: 25, memUsed: 200, memCache: 100, memTotal: 512 * 1024 * 1024 });
    expect(a!.diskUsed).toBe(7 * 1024 * 1024);
    expect(a!.diskTotal).toBe(1024 * 1024 * 1024);
    // An unlimited cgroup reports the sandbox's memoryMB as the total.
    expect(b).toMatchObject({
      cpuUsedPct: 100,
      memUsed: 350,
      memTotal: 512 * 1024 * 1024,
      timestampMs: 11_000,
    });
    expect(sampler.latest('sb1')).toEqual(b);
  });

  it('skips sandboxes without a cgroup and drops the samples of sandboxes the node forgot', async () => {
    const { sampler, usage, known, forgotten } = setup([
      target(),
      target({ sandboxId: 'sb2', containerId: 'warm-2', diskDir: '/x/warm-2' }),
    ]);
    usage.set('sb1', { cpuUsageNs: 0, memoryUsageBytes: 1, memoryCacheBytes: 0, memoryLimitBytes: 1 });
    usage.set('warm-2', { cpuUsageNs: 0, memoryUsageBytes: 2, memoryCacheBytes: 0, memoryLimitBytes: 2 });
    await sampler.sampleOnce();
    expect(sampler.samples('sb2')?.[0]?.memUsed).toBe(2);
    usage.delete('sb1');
    await sampler.sampleOnce();
    expect(sampler.samples('sb1')).toHaveLength(1);
    known.delete('sb2');
    await sampler.sampleOnce();
    expect(sampler.samples('sb2')).toBeUndefined();
    expect(forgotten).toEqual(['/x/warm-2']);
  });

  it('starts the CPU count afresh when the cgroup is new (a resume restores into a new one)', async () => {
    const { sampler, usage, advance } = setup([target()]);
    usage.set('sb1', { cpuUsageNs: 8e9, memoryUsageBytes: 0, memoryCacheBytes: 0, memoryLimitBytes: 1 });
    await sampler.sampleOnce();
    advance(2000);
    usage.set('sb1', { cpuUsageNs: 2e9, memoryUsageBytes: 0, memoryCacheBytes: 0, memoryLimitBytes: 1 });
    await sampler.sampleOnce();
    // 2 s of CPU over the 2 s since the last sample, on 2 cores.
    expect(sampler.latest('sb1')!.cpuUsedPct).toBe(50);
  });
});
