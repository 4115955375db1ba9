import { Counter, Histogram, type Registry } from 'prom-client';
import type { CgroupUsage } from '../runtime/drivers/container/cgroups.js';
import { isRuntimeError } from '../runtime/driver.js';
import type { DiskUsage } from './sandbox-disk.js';

/** One sample of one sandbox (`SandboxMetric` of the E2B API). */
export interface SandboxMetricSample {
  timestampMs: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memCache: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}

const FIELDS = 8;

/**
 * The last `capacity` samples of one sandbox in one flat Float64Array (64 bytes a sample; a day at 5 s is
 * 1.1 MB), grown by doubling until it holds `capacity`, so a short-lived sandbox costs little.
 */
export class MetricRing {
  private data: Float64Array;
  private next = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    this.data = new Float64Array(Math.min(capacity, 64) * FIELDS);
  }

  get size(): number {
    return this.count;
  }

  private get slots(): number {
    return this.data.length / FIELDS;
  }

  push(s: SandboxMetricSample): void {
    if (this.count === this.slots && this.slots < this.capacity) {
      // Not wrapped yet (it wraps only once full): the samples are in order at the start.
      const grown = new Float64Array(Math.min(this.capacity, this.slots * 2) * FIELDS);
      grown.set(this.data);
      this.data = grown;
    }
    const o = this.next * FIELDS;
    this.data.set(
      [s.timestampMs, s.cpuCount, s.cpuUsedPct, s.memUsed, s.memCache, s.memTotal, s.diskUsed, s.diskTotal],
      o,
    );
    this.count = Math.min(this.count + 1, this.slots);
    this.next += 1;
    // Wrap only at full capacity; short of it, the next push grows the array first.
    if (this.next === this.slots && this.slots === this.capacity) this.next = 0;
  }

  private at(i: number): SandboxMetricSample {
    const o = ((this.next - this.count + i + this.slots) % this.slots) * FIELDS;
    const d = this.data;
    return {
      timestampMs: d[o]!,
      cpuCount: d[o + 1]!,
      cpuUsedPct: d[o + 2]!,
      memUsed: d[o + 3]!,
      memCache: d[o + 4]!,
      memTotal: d[o + 5]!,
      diskUsed: d[o + 6]!,
      diskTotal: d[o + 7]!,
    };
  }

  /** Samples with `startMs <= timestamp <= endMs`, oldest first. */
  range(startMs = -Infinity, endMs = Infinity): SandboxMetricSample[] {
    const out: SandboxMetricSample[] = [];
    for (let i = 0; i < this.count; i++) {
      const s = this.at(i);
      if (s.timestampMs >= startMs && s.timestampMs <= endMs) out.push(s);
    }
    return out;
  }

  latest(): SandboxMetricSample | undefined {
    return this.count ? this.at(this.count - 1) : undefined;
  }
}

/** A running sandbox to sample. */
export interface MetricsTarget {
  sandboxId: string;
  /** The runtime's id of its container (its cgroup's name; differs for a sandbox taken from the warm pool). */
  containerId: string;
  /** The sandbox's disk (a btrfs subvolume where quotas apply). */
  diskDir: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  /** When its container started (the first sample's CPU share is the average since then). */
  startedAtMs: number;
}

export interface SandboxMetricsSamplerOptions {
  intervalMs: number;
  /** Samples kept per sandbox. */
  maxSamples: number;
  /** The sandboxes running now. */
  targets: () => MetricsTarget[];
  /** Ids of the sandboxes the node still knows (running or paused); rings of the others are dropped. */
  known: () => ReadonlySet<string>;
  readUsage: (containerId: string) => Promise<CgroupUsage>;
  readDisk: (dir: string) => Promise<DiskUsage | undefined>;
  forgetDisk?: (dir: string) => void;
  registry?: Registry;
  now?: () => number;
  onError?: (sandboxId: string, err: unknown) => void;
}

interface CpuBaseline {
  containerId: string;
  atMs: number;
  usageNs: number;
}

const MiB = 1024 * 1024;

/**
 * Samples every running sandbox's CPU, memory (its cgroup) and disk (its quota group) every `intervalMs`, in one
 * pass over all of them, and keeps the samples for the sandbox's lifetime in a bounded ring
 * (`GET /sandboxes/{id}/metrics`). Samples live in memory: a restart of the node starts them afresh.
 */
export class SandboxMetricsSampler {
  private readonly rings = new Map<string, MetricRing>();
  private readonly baselines = new Map<string, CpuBaseline>();
  private readonly dirs = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private readonly now: () => number;
  private readonly passSeconds?: Histogram;
  private readonly passCpuSeconds?: Counter;

  constructor(private readonly opts: SandboxMetricsSamplerOptions) {
    this.now = opts.now ?? Date.now;
    if (opts.registry) {
      this.passSeconds = new Histogram({
        name: 'aenv_sandbox_metrics_pass_seconds',
        help: 'Wall time of one sampling pass over every running sandbox',
        buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
        registers: [opts.registry],
      });
      this.passCpuSeconds = new Counter({
        name: 'aenv_sandbox_metrics_cpu_seconds_total',
        help: 'CPU time of the server process spent in sampling passes (includes work running concurrently)',
        registers: [opts.registry],
      });
    }
  }

  start(): void {
    const tick = () => {
      this.running = this.sampleOnce().finally(() => {
        this.running = undefined;
        if (!this.stopped) {
          this.timer = setTimeout(tick, this.opts.intervalMs);
          this.timer.unref();
        }
      });
    };
    this.timer = setTimeout(tick, 0);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /** One pass: a sample of every running sandbox; rings of sandboxes the node no longer knows are dropped. */
  async sampleOnce(): Promise<void> {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const targets = this.opts.targets();
    await Promise.all(targets.map((t) => this.sample(t)));
    const known = this.opts.known();
    for (const id of this.rings.keys()) if (!known.has(id)) this.forget(id);
    const cpu = process.cpuUsage(cpu0);
    this.passSeconds?.observe((performance.now() - t0) / 1000);
    this.passCpuSeconds?.inc((cpu.user + cpu.system) / 1e6);
  }

  private async sample(t: MetricsTarget): Promise<void> {
    let usage: CgroupUsage;
    let disk: DiskUsage | undefined;
    try {
      [usage, disk] = await Promise.all([this.opts.readUsage(t.containerId), this.opts.readDisk(t.diskDir)]);
    } catch (err) {
      // Gone or paused between the listing and the read: no sample this time.
      if (!isRuntimeError(err, 'NotFound')) this.opts.onError?.(t.sandboxId, err);
      return;
    }
    const nowMs = this.now();
    const prev = this.baselines.get(t.sandboxId);
    const base =
      prev && prev.containerId === t.containerId && prev.usageNs <= usage.cpuUsageNs
        ? prev
        : // A new cgroup (first sample, or restored after a pause): CPU used since it was made.
          { containerId: t.containerId, atMs: Math.min(prev?.atMs ?? t.startedAtMs, nowMs), usageNs: 0 };
    this.baselines.set(t.sandboxId, { containerId: t.containerId, atMs: nowMs, usageNs: usage.cpuUsageNs });
    const wallNs = (nowMs - base.atMs) * 1e6;
    const pct = wallNs > 0 ? ((usage.cpuUsageNs - base.usageNs) / (wallNs * t.cpuCount)) * 100 : 0;
    const memTotal = Number.isFinite(usage.memoryLimitBytes) ? usage.memoryLimitBytes : t.memoryMB * MiB;
    let ring = this.rings.get(t.sandboxId);
    if (!ring) {
      ring = new MetricRing(this.opts.maxSamples);
      this.rings.set(t.sandboxId, ring);
    }
    const lastDir = this.dirs.get(t.sandboxId);
    if (lastDir !== undefined && lastDir !== t.diskDir) this.opts.forgetDisk?.(lastDir);
    this.dirs.set(t.sandboxId, t.diskDir);
    ring.push({
      timestampMs: nowMs,
      cpuCount: t.cpuCount,
      cpuUsedPct: Math.round(Math.min(100, Math.max(0, pct)) * 100) / 100,
      memUsed: Math.max(0, usage.memoryUsageBytes - usage.memoryCacheBytes),
      memCache: usage.memoryCacheBytes,
      memTotal,
      diskUsed: disk?.usedBytes ?? 0,
      diskTotal: disk?.limitBytes ?? t.diskSizeMB * MiB,
    });
  }

  /** Samples of the sandbox in `[startMs, endMs]`, oldest first; undefined when it has none. */
  samples(sandboxId: string, startMs?: number, endMs?: number): SandboxMetricSample[] | undefined {
    return this.rings.get(sandboxId)?.range(startMs, endMs);
  }

  latest(sandboxId: string): SandboxMetricSample | undefined {
    return this.rings.get(sandboxId)?.latest();
  }

  forget(sandboxId: string): void {
    this.rings.delete(sandboxId);
    this.baselines.delete(sandboxId);
    const dir = this.dirs.get(sandboxId);
    if (dir !== undefined) this.opts.forgetDisk?.(dir);
    this.dirs.delete(sandboxId);
  }
}
