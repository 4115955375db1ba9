import { cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DiskCopies } from './disk-copies.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});
const remove = (p: string) => rm(p, { recursive: true, force: true });

async function setup(opts: { failMake?: () => boolean } = {}) {
  const dir = await mkdtemp(join(tmpdir(), 'aenv-copies-'));
  dirs.push(dir);
  const source = join(dir, 'source');
  await mkdir(join(source, 'upper'), { recursive: true });
  await writeFile(join(source, 'upper', 'f'), 'seed');
  const warnings: string[] = [];
  let makes = 0;
  const copies = new DiskCopies({
    dir,
    make: async (src, path) => {
      makes++;
      if (opts.failMake?.()) throw new Error('no space');
      await cp(src, path, { recursive: true });
    },
    remove,
    log: { warn: (_o: unknown, msg?: string) => void warnings.push(String(msg)) },
  });
  const ready = async () => (await readdir(dir)).filter((n) => n.startsWith('.spare-copy-')).sort();
  const settle = async () => {
    for (let i = 0; i < 50 && (await readdir(dir)).some((n) => n.startsWith('.spare-tmp-')); i++)
      await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 30));
  };
  return { dir, source, copies, ready, settle, warnings, makes: () => makes };
}

describe('DiskCopies', () => {
  it('keeps `count` copies of a source ready, hands one out, and refills only when told', async () => {
    const h = await setup();
    h.copies.keep(h.source, 2);
    await h.settle();
    expect(await h.ready()).toHaveLength(2);
    const copy = h.copies.take(h.source)!;
    expect(await readFile(join(copy, 'upper', 'f'), 'utf8')).toBe('seed');
    await rm(copy, { recursive: true });
    await h.settle();
    // Not refilled while the restore that took it runs (a copy's commit would slow it down).
    expect(await h.ready()).toHaveLength(1);
    h.copies.refill(h.source);
    await h.settle();
    expect(await h.ready()).toHaveLength(2);
    expect(h.copies.take(join(h.dir, 'other'))).toBeNull();
  });

  it('drop removes the ready copies and keeps none after; close drops every source', async () => {
    const h = await setup();
    h.copies.keep(h.source, 2);
    await h.copies.drop(h.source);
    await h.settle();
    expect(await h.ready()).toEqual([]);
    expect(h.copies.take(h.source)).toBeNull();
    h.copies.refill(h.source);
    await h.settle();
    expect(await h.ready()).toEqual([]);
    h.copies.keep(h.source, 1);
    await h.settle();
    expect(await h.ready()).toHaveLength(1);
    await h.copies.close();
    expect(await h.ready()).toEqual([]);
    h.copies.keep(h.source, 1);
    await h.settle();
    expect(await h.ready()).toEqual([]);
  });

  it('stops on a failed copy, leaving no half-made one, and says so', async () => {
    const h = await setup({ failMake: () => true });
    h.copies.keep(h.source, 2);
    await h.settle();
    expect(await readdir(h.dir)).toEqual(['source']);
    expect(h.makes()).toBe(1);
    expect(h.warnings).toEqual(['cannot prepare a copy of a saved disk']);
    expect(h.copies.take(h.source)).toBeNull();
  });
});
