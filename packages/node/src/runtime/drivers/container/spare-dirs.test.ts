import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SpareDirs, Trash } from './spare-dirs.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});
const log = { warn() {} };
const remove = (p: string) => rm(p, { recursive: true, force: true });

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'aenv-spare-'));
  dirs.push(d);
  return d;
}

describe('SpareDirs', () => {
  it('keeps `count` complete spares ready, hands them out, refills, and drops old ones at init', async () => {
    const dir = await tempDir();
    await mkdir(join(dir, '.spare-old'));
    await mkdir(join(dir, 'sandbox-1'));
    const made: string[] = [];
    const spares = new SpareDirs({
      dir,
      count: 2,
      make: async (p) => {
        made.push(p);
        await mkdir(join(p, 'upper'), { recursive: true });
      },
      remove,
      log,
    });
    await spares.init();
    await spares.idle();
    const names = (await readdir(dir)).sort();
    expect(names.filter((n) => n.startsWith('.spare-'))).toHaveLength(2);
    expect(names).not.toContain('.spare-old');
    expect(names).toContain('sandbox-1');
    const a = spares.take();
    const b = spares.take();
    expect(a && b && a !== b).toBeTruthy();
    expect(spares.take()).toBeNull();
    expect(await readdir(a as string)).toEqual(['upper']);
    spares.fill();
    await spares.idle();
    expect(made).toHaveLength(4);
    await spares.close();
    expect((await readdir(dir)).filter((n) => n.startsWith('.spare-'))).toHaveLength(2); // a, b still taken
  });

  it('stops filling after a failure instead of looping', async () => {
    const dir = await tempDir();
    let calls = 0;
    const spares = new SpareDirs({
      dir,
      count: 3,
      make: async () => {
        calls++;
        throw new Error('disk full');
      },
      remove,
      log,
    });
    await spares.init();
    await spares.idle();
    expect(calls).toBe(1);
    expect(spares.take()).toBeNull();
  });
});

describe('Trash', () => {
  it('frees the name at once, removes in the background, and clears crash leftovers at init', async () => {
    const dir = await tempDir();
    await mkdir(join(dir, '.trash-x-1'));
    await mkdir(join(dir, '.spare-tmp-2'));
    await mkdir(join(dir, 'sb1'));
    await writeFile(join(dir, 'sb1', 'f'), 'x');
    const trash = new Trash({ dir, remove, log });
    await trash.init();
    expect(await trash.discard(join(dir, 'sb1'))).toBe(true);
    expect(await readdir(dir)).not.toContain('sb1');
    expect(await trash.discard(join(dir, 'sb1'))).toBe(false);
    await trash.drain();
    expect(await readdir(dir)).toEqual([]);
  });
});
