import { readFileSync, statfsSync } from 'node:fs';
import { availableParallelism } from 'node:os';

export interface EnvdMetrics {
  ts: number;
  cpu_count: number;
  cpu_used_pct: number;
  mem_total: number;
  mem_used: number;
  mem_cache: number;
  mem_total_mib: number;
  mem_used_mib: number;
  disk_used: number;
  disk_total: number;
}

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
}

function keyValues(text: string | undefined, sep = /\s+/): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of (text ?? '').split('\n')) {
    const [k, v] = line.trim().split(sep);
    if (k && v !== undefined) out.set(k.replace(/:$/, ''), Number(v));
  }
  return out;
}

interface CpuSample {
  atMs: number;
  /** CPU time used so far, in microseconds (cgroup or whole machine). */
  usedUs: number;
}

/**
 * GET /metrics (E2B envd shape). Inside a container whose cgroup has limits, memory and CPU count come
 * from the cgroup (v2 or v1); otherwise from /proc. Disk is statfs of "/".
 */
export class MetricsReader {
  private last: CpuSample | undefined;

  constructor(
    private readonly cgroupRoot = '/sys/fs/cgroup',
    private readonly procRoot = '/proc',
  ) {}

  async read(): Promise<EnvdMetrics> {
    const cpuCount = this.cpuCount();
    const now = this.cpuSample();
    let prev = this.last;
    if (!prev || now.atMs - prev.atMs > 60_000 || now.atMs - prev.atMs < 50) {
      prev = now;
      await new Promise((r) => setTimeout(r, 100));
    }
    const cur = prev === now ? this.cpuSample() : now;
    this.last = cur;
    const wallUs = (cur.atMs - prev.atMs) * 1000;
    const pct =
      wallUs > 0 ? Math.min(100, Math.max(0, ((cur.usedUs - prev.usedUs) / (wallUs * cpuCount)) * 100)) : 0;

    const mem = this.memory();
    const fs = statfsSync('/');
    const diskTotal = Number(fs.blocks) * Number(fs.bsize);
    const diskUsed = (Number(fs.blocks) - Number(fs.bfree)) * Number(fs.bsize);
    return {
      ts: Math.floor(Date.now() / 1000),
      cpu_count: cpuCount,
      cpu_used_pct: Math.round(pct * 100) / 100,
      mem_total: mem.total,
      mem_used: mem.used,
      mem_cache: mem.cache,
      mem_total_mib: Math.floor(mem.total / 1048576),
      mem_used_mib: Math.floor(mem.used / 1048576),
      disk_used: diskUsed,
      disk_total: diskTotal,
    };
  }

  private cpuCount(): number {
    const host = availableParallelism();
    const v2 = read(`${this.cgroupRoot}/cpu.max`);
    let quota = NaN;
    let period = NaN;
    if (v2) {
      const [q, p] = v2.split(/\s+/);
      quota = q === 'max' ? NaN : Number(q);
      period = Number(p);
    } else {
      quota = Number(read(`${this.cgroupRoot}/cpu/cpu.cfs_quota_us`));
      period = Number(read(`${this.cgroupRoot}/cpu/cpu.cfs_period_us`));
    }
    if (quota > 0 && period > 0) return Math.max(1, Math.min(host, Math.ceil(quota / period)));
    return host;
  }

  private cpuSample(): CpuSample {
    const atMs = performance.now();
    const v2 = keyValues(read(`${this.cgroupRoot}/cpu.stat`)).get('usage_usec');
    if (v2 !== undefined && !Number.isNaN(v2)) return { atMs, usedUs: v2 };
    const v1 = Number(read(`${this.cgroupRoot}/cpuacct/cpuacct.usage`));
    if (v1 > 0) return { atMs, usedUs: v1 / 1000 };
    const cpu = (read(`${this.procRoot}/stat`) ?? '').split('\n')[0]?.split(/\s+/).slice(1).map(Number) ?? [];
    const busyTicks = cpu.reduce((a, b, i) => (i === 3 || i === 4 ? a : a + (b || 0)), 0);
    return { atMs, usedUs: (busyTicks * 1_000_000) / 100 };
  }

  private memory(): { total: number; used: number; cache: number } {
    const info = keyValues(read(`${this.procRoot}/meminfo`));
    const hostTotal = (info.get('MemTotal') ?? 0) * 1024;
    const v2Max = read(`${this.cgroupRoot}/memory.max`);
    const v2Cur = read(`${this.cgroupRoot}/memory.current`);
    let limit = NaN;
    let usage = NaN;
    let cache = NaN;
    if (v2Cur !== undefined) {
      limit = v2Max === 'max' ? NaN : Number(v2Max);
      usage = Number(v2Cur);
      cache = keyValues(read(`${this.cgroupRoot}/memory.stat`)).get('file') ?? 0;
    } else {
      limit = Number(read(`${this.cgroupRoot}/memory/memory.limit_in_bytes`));
      usage = Number(read(`${this.cgroupRoot}/memory/memory.usage_in_bytes`));
      const stat = keyValues(read(`${this.cgroupRoot}/memory/memory.stat`));
      cache = stat.get('total_cache') ?? stat.get('cache') ?? 0;
    }
    if (limit > 0 && limit < hostTotal && usage >= 0) {
      return { total: limit, used: Math.max(0, usage - cache), cache };
    }
    const available = (info.get('MemAvailable') ?? info.get('MemFree') ?? 0) * 1024;
    const hostCache = ((info.get('Cached') ?? 0) + (info.get('Buffers') ?? 0)) * 1024;
    return { total: hostTotal, used: Math.max(0, hostTotal - available), cache: hostCache };
  }
}
