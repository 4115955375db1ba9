import { readFile, statfs } from 'node:fs/promises';
import { cpus } from 'node:os';

export interface DiskMetric {
  mountPoint: string;
  device: string;
  filesystemType: string;
  usedBytes: number;
  totalBytes: number;
}

export interface HostMetrics {
  cpuPercent: number;
  cpuCount: number;
  memoryUsedBytes: number;
  memoryTotalBytes: number;
  disks: DiskMetric[];
}

interface CpuSample {
  idle: number;
  total: number;
  at: number;
}

async function readCpuSample(): Promise<CpuSample> {
  const text = await readFile('/proc/stat', 'utf8');
  const line = text.split('\n', 1)[0]!;
  const fields = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is already in user/nice)
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  return { idle, total, at: Date.now() };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Host CPU, memory and disk usage for the /nodes API. CPU% is the busy share between two /proc/stat samples:
 * the previous request's sample when it is recent enough, otherwise two samples ~100 ms apart.
 */
export class HostMetricsSampler {
  private last: CpuSample | undefined;

  async sample(): Promise<HostMetrics> {
    const [cpuPercent, memory, disks] = await Promise.all([this.cpuPercent(), readMemory(), readDisks()]);
    return { cpuPercent, cpuCount: cpus().length, ...memory, disks };
  }

  private async cpuPercent(): Promise<number> {
    let prev = this.last;
    if (!prev || Date.now() - prev.at > 60_000) {
      prev = await readCpuSample();
      await sleep(100);
    }
    let cur = await readCpuSample();
    if (cur.total === prev.total) {
      await sleep(100);
      cur = await readCpuSample();
    }
    this.last = cur;
    const total = cur.total - prev.total;
    if (total <= 0) return 0;
    return Math.max(0, Math.min(100, (100 * (total - (cur.idle - prev.idle))) / total));
  }
}

async function readMemory(): Promise<{ memoryUsedBytes: number; memoryTotalBytes: number }> {
  const text = await readFile('/proc/meminfo', 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0) * 1024;
  const total = kb('MemTotal');
  return { memoryTotalBytes: total, memoryUsedBytes: total - kb('MemAvailable') };
}

async function readDisks(): Promise<DiskMetric[]> {
  const text = await readFile('/proc/self/mounts', 'utf8');
  const seen = new Set<string>();
  const disks: DiskMetric[] = [];
  for (const line of text.split('\n')) {
    const [device, mountPoint, fsType] = line.split(' ');
    if (!device || !mountPoint || !fsType || !device.startsWith('/dev/') || device.startsWith('/dev/loop'))
      continue;
    if (seen.has(device)) continue;
    seen.add(device);
    const mp = mountPoint.replace(/\\040/g, ' ');
    try {
      const s = await statfs(mp);
      disks.push({
        mountPoint: mp,
        device,
        filesystemType: fsType,
        totalBytes: s.blocks * s.bsize,
        usedBytes: (s.blocks - s.bfree) * s.bsize,
      });
    } catch {
      // mount point not reachable from here; skip
    }
  }
  return disks;
}
