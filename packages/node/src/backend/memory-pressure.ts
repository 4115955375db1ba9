import { readFileSync } from 'node:fs';

/** Share of RAM the kernel reports as available (MemAvailable / MemTotal), 0..1. */
export function availableMemoryRatio(meminfo = '/proc/meminfo'): number {
  const text = readFileSync(meminfo, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0);
  const total = kb('MemTotal');
  return total > 0 ? kb('MemAvailable') / total : 1;
}
