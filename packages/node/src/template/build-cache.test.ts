import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BuildCache, cacheKeys } from './build-cache.js';
import type { BuildState } from './build-state.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
/** A saved disk's files, as a driver lays them out (any layout works: the cache only asks). */
const filesOf = (disk: string) => join(disk, 'files');
const quiet = { info() {}, warn() {}, error() {}, debug() {}, child: () => quiet } as never;

async function cache(maxEntries = 10): Promise<BuildCache> {
  const dir = mkdtempSync(join(tmpdir(), 'bcache-'));
  dirs.push(dir);
  const c = new BuildCache({
    dir,
    removeDisk: (p) => rm(p, { recursive: true, force: true }),
    diskFilesDir: filesOf,
    maxEntries,
    maxAgeMs: 86400_000,
    logger: quiet,
  });
  await c.init();
  return c;
}

const state = (user: string): BuildState => ({
  env: { A: '1' },
  user,
  exposedPorts: [],
  volumes: [],
  labels: {},
});
/** Stands in for RuntimeDriver.captureDisk: a saved disk with one file. */
const disk = (content: string) => async (dest: string) => {
  mkdirSync(filesOf(dest), { recursive: true });
  writeFileSync(join(filesOf(dest), 'f'), content);
};

describe('template build cache', () => {
  it('chains keys over the base and each step', () => {
    const a = cacheKeys('image:sha256:1', ['s1', 's2']);
    const b = cacheKeys('image:sha256:1', ['s1', 'sX']);
    const c = cacheKeys('image:sha256:2', ['s1', 's2']);
    expect(a).toHaveLength(3);
    expect(a[1]).toBe(b[1]);
    expect(a[2]).not.toBe(b[2]);
    expect(c[1]).not.toBe(a[1]);
    for (const k of a) expect(k).toMatch(/^[0-9a-f]{64}$/);
  });

  it('finds the longest saved prefix within the limit', async () => {
    const c = await cache();
    const keys = cacheKeys('base', ['s1', 's2', 's3']);
    expect(await c.longestPrefix(keys, 3)).toBeUndefined();
    await c.save(keys[1]!, 1, state('a'), disk('one'));
    await c.save(keys[3]!, 3, state('c'), disk('three'));
    expect(await c.longestPrefix(keys, 3)).toMatchObject({ steps: 3, state: { user: 'c' } });
    expect(await c.longestPrefix(keys, 2)).toMatchObject({ steps: 1, state: { user: 'a' } });
    expect(await c.longestPrefix(keys, 0)).toBeUndefined();
    const hit = (await c.longestPrefix(keys, 3))!;
    expect(existsSync(join(filesOf(hit.dir), 'f'))).toBe(true);
  });

  it('drops half-made entries at startup and evicts the least recently used', async () => {
    const c = await cache(2);
    const keys = cacheKeys('base', ['a', 'b', 'c']);
    await c.save(keys[1]!, 1, state('1'), disk('1'));
    await c.save(keys[2]!, 2, state('2'), disk('2'));
    await c.save(keys[3]!, 3, state('3'), disk('3'));
    const dir = c['opts'].dir as string;
    const old = new Date(Date.now() - 3600_000);
    utimesSync(join(dir, `${keys[2]}.json`), old, old);
    expect(await c.evict()).toBe(1);
    expect(await c.get(keys[2]!)).toBeUndefined();
    expect(await c.get(keys[1]!)).toBeDefined();
    mkdirSync(filesOf(join(dir, 'tmp-crashed')), { recursive: true });
    mkdirSync(filesOf(join(dir, 'f'.repeat(64))), { recursive: true });
    await c.init();
    expect(readdirSync(dir).sort()).toEqual([keys[1], `${keys[1]}.json`, keys[3], `${keys[3]}.json`].sort());
    const failing = c.save(keys[2]!, 2, state('x'), async () => {
      throw new Error('snapshot failed');
    });
    await expect(failing).rejects.toThrow('snapshot failed');
    expect(await c.get(keys[2]!)).toBeUndefined();
  });
});
