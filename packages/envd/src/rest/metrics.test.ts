import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { MetricsReader } from './metrics.js';

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

function fakeRoots(files: Record<string, string>) {
  dir = mkdtempSync('/tmp/aenv-metrics-');
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  return { cgroup: join(dir, 'cgroup'), proc: join(dir, 'proc') };
}

const MEMINFO =
  'MemTotal: 16777216 kB\nMemFree: 1000 kB\nMemAvailable: 8388608 kB\nBuffers: 1024 kB\nCached: 2048 kB\n';

describe('MetricsReader', () => {
  it('uses cgroup v2 limits inside a limited container', async () => {
    const r = fakeRoots({
      'cgroup/memory.max': String(512 * 1048576),
      'cgroup/memory.current': String(200 * 1048576),
      'cgroup/memory.stat': `anon 1\nfile ${50 * 1048576}\n`,
      'cgroup/cpu.max': '150000 100000',
      'cgroup/cpu.stat': 'usage_usec 1000\n',
      'proc/meminfo': MEMINFO,
    });
    const m = await new MetricsReader(r.cgroup, r.proc).read();
    expect(m).toMatchObject({
      mem_total: 512 * 1048576,
      mem_used: 150 * 1048576,
      mem_cache: 50 * 1048576,
      mem_total_mib: 512,
      mem_used_mib: 150,
    });
    expect(m.cpu_count).toBe(Math.min(2, availableParallelism()));
    expect(m.cpu_used_pct).toBe(0);
    expect(m.disk_total).toBeGreaterThan(0);
  });

  it('uses cgroup v1 files, and /proc when the cgroup is unlimited', async () => {
    const v1 = fakeRoots({
      'cgroup/memory/memory.limit_in_bytes': String(256 * 1048576),
      'cgroup/memory/memory.usage_in_bytes': String(100 * 1048576),
      'cgroup/memory/memory.stat': `cache ${10 * 1048576}\ntotal_cache ${20 * 1048576}\n`,
      'cgroup/cpu/cpu.cfs_quota_us': '-1',
      'cgroup/cpu/cpu.cfs_period_us': '100000',
      'cgroup/cpuacct/cpuacct.usage': '5000000',
      'proc/meminfo': MEMINFO,
    });
    expect(await new MetricsReader(v1.cgroup, v1.proc).read()).toMatchObject({
      mem_total: 256 * 1048576,
      mem_used: 80 * 1048576,
      mem_cache: 20 * 1048576,
    });
    rmSync(dir!, { recursive: true, force: true });
    const host = fakeRoots({
      'cgroup/memory.max': 'max',
      'cgroup/memory.current': '1',
      'proc/meminfo': MEMINFO,
      'proc/stat': 'cpu 1 2 3 4 5 6 7 8\n',
    });
    expect(await new MetricsReader(host.cgroup, host.proc).read()).toMatchObject({
      mem_total: 16 * 1073741824,
      mem_used: 8 * 1073741824,
      mem_cache: 3 * 1048576,
    });
  });
});
