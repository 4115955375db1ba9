import { describe, expect, it } from 'vitest';
import { StartCaptures, type StartCapture } from './start-captures.js';

/** A `make` the test settles by hand, and a record of what was discarded. */
function harness(maxTemplates = 4) {
  const pending: { spec: string; resolve: (c: StartCapture<string>) => void; reject: (e: Error) => void }[] =
    [];
  const discarded: string[] = [];
  const errors: string[] = [];
  const caps = new StartCaptures<string, string>({
    maxTemplates,
    make: (spec) => new Promise((resolve, reject) => pending.push({ spec, resolve, reject })),
    discard: async (c) => {
      discarded.push(c.dir);
    },
    onError: (key) => errors.push(key),
  });
  const made = (spec: string): StartCapture<string> => ({
    seedId: `seed-${spec}`,
    state: spec,
    dir: `/d/${spec}`,
  });
  const settle = async () => {
    for (let i = 0; i < 5; i++) await Promise.resolve();
  };
  return { caps, pending, discarded, errors, made, settle };
}

const restoreOk = (c: StartCapture<string>) => Promise.resolve({ result: c.seedId, usable: true });

describe('StartCaptures', () => {
  it('makes one capture per key, however often it is wanted, and serves it once made', async () => {
    const h = harness();
    h.caps.want('a', 'A');
    h.caps.want('a', 'A');
    expect(h.pending).toHaveLength(1);
    expect(await h.caps.use('a', restoreOk)).toBeUndefined();
    h.pending[0]!.resolve(h.made('A'));
    await h.settle();
    expect(await h.caps.use('a', restoreOk)).toBe('seed-A');
    expect(await h.caps.use('a', restoreOk)).toBe('seed-A');
    expect(h.caps.readyKeys()).toEqual(['a']);
    h.caps.want('a', 'A');
    expect(h.pending).toHaveLength(1);
  });

  it('does not try a key again whose capture could not be made', async () => {
    const h = harness();
    h.caps.want('a', 'A');
    h.pending[0]!.reject(new Error('no criu'));
    await h.settle();
    expect(h.errors).toEqual(['a']);
    h.caps.want('a', 'A');
    expect(h.pending).toHaveLength(1);
    expect(await h.caps.use('a', restoreOk)).toBeUndefined();
  });

  it('holds at most maxTemplates captures', () => {
    const h = harness(2);
    for (const k of ['a', 'b', 'c']) h.caps.want(k, k.toUpperCase());
    expect(h.pending.map((p) => p.spec)).toEqual(['A', 'B']);
  });

  it('drops a capture whose restore did not bring its memory back, once no restore reads it', async () => {
    const h = harness();
    h.caps.want('a', 'A');
    h.pending[0]!.resolve(h.made('A'));
    await h.settle();
    let finishSecond!: () => void;
    const second = h.caps.use('a', async (c) => {
      await new Promise<void>((r) => (finishSecond = r));
      return { result: c.seedId, usable: true };
    });
    expect(await h.caps.use('a', async () => ({ result: 'booted', usable: false }))).toBe('booted');
    // Another restore still reads it: not removed yet, but not handed to anyone else.
    expect(h.discarded).toEqual([]);
    expect(await h.caps.use('a', restoreOk)).toBeUndefined();
    expect(h.caps.readyKeys()).toEqual([]);
    finishSecond();
    expect(await second).toBe('seed-A');
    await h.settle();
    expect(h.discarded).toEqual(['/d/A']);
    h.caps.want('a', 'A');
    expect(h.pending).toHaveLength(1);
  });

  it('keeps a capture when a restore throws (the cause need not be the capture)', async () => {
    const h = harness();
    h.caps.want('a', 'A');
    h.pending[0]!.resolve(h.made('A'));
    await h.settle();
    await expect(h.caps.use('a', () => Promise.reject(new Error('no slot')))).rejects.toThrow('no slot');
    expect(await h.caps.use('a', restoreOk)).toBe('seed-A');
    expect(h.discarded).toEqual([]);
  });

  it('close waits for captures being made and removes every capture; nothing is made after it', async () => {
    const h = harness();
    h.caps.want('a', 'A');
    h.caps.want('b', 'B');
    h.pending[0]!.resolve(h.made('A'));
    await h.settle();
    const closed = h.caps.close();
    h.pending[1]!.resolve(h.made('B'));
    await closed;
    expect(h.discarded.sort()).toEqual(['/d/A', '/d/B']);
    h.caps.want('c', 'C');
    expect(h.pending).toHaveLength(2);
    expect(await h.caps.use('a', restoreOk)).toBeUndefined();
  });
});
