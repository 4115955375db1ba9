import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Cgroups, readCgroupUsage } from './cgroups.js';

describe('readCgroupUsage', () => {
  let root: string;
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  const files = (dir: string, content: Record<string, string>) => {
    mkdirSync(dir, { recursive: true });
    for (const [name, text] of Object.entries(content)) writeFileSync(join(dir, name), text);
  };

  it('reads cgroup v2 files', async () => {
    root = mkdtempSync(join(tmpdir(), 'aenv-cg-'));
    files(join(root, 'aenv', 'sb1'), {
      'cpu.stat': 'usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n',
      'memory.current': '4096\n',
      'memory.max': 'max\n',
      'memory.stat': 'anon 1000\nfile 2048\n',
    });
    const cg = new Cgroups({ mode: 'v2', v1: new Map(), unified: root }, 'aenv');
    expect(await readCgroupUsage(cg, 'sb1')).toEqual({
      cpuUsageNs: 1_500_000,
      memoryUsageBytes: 4096,
      memoryCacheBytes: 2048,
      memoryLimitBytes: Infinity,
    });
    await expect(readCgroupUsage(cg, 'gone')).rejects.toMatchObject({ reason: 'NotFound' });
  });

  it('reads cgroup v1 (and hybrid) hierarchies', async () => {
    root = mkdtempSync(join(tmpdir(), 'aenv-cg-'));
    files(join(root, 'memory', 'aenv', 'sb1'), {
      'memory.usage_in_bytes': '8192\n',
      'memory.limit_in_bytes': '536870912\n',
      'memory.stat': 'cache 10\nrss 20\ntotal_cache 4096\ntotal_rss 20\n',
    });
    files(join(root, 'cpuacct', 'aenv', 'sb1'), { 'cpuacct.usage': '123456789\n' });
    const v1 = new Map([
      ['memory', join(root, 'memory')],
      ['cpuacct', join(root, 'cpuacct')],
    ]);
    const cg = new Cgroups({ mode: 'hybrid', v1, unified: join(root, 'unified') }, 'aenv');
    expect(await readCgroupUsage(cg, 'sb1')).toEqual({
      cpuUsageNs: 123456789,
      memoryUsageBytes: 8192,
      memoryCacheBytes: 4096,
      memoryLimitBytes: 536870912,
    });
  });
});
