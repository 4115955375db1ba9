import { describe, expect, it } from 'vitest';
import { allOrFirstError } from './settle.js';

describe('allOrFirstError', () => {
  it('resolves once every step has', async () => {
    const done: number[] = [];
    const step = (n: number) => Promise.resolve().then(() => void done.push(n));
    await allOrFirstError([step(1), step(2)]);
    expect(done.sort()).toEqual([1, 2]);
  });

  it('fails only after the steps still running have ended, with the first error given', async () => {
    let release!: () => void;
    let slowEnded = false;
    const slow = new Promise<void>((r) => (release = r)).then(() => void (slowEnded = true));
    const outcome = allOrFirstError([
      slow,
      Promise.reject(new Error('first')),
      Promise.reject(new Error('second')),
    ]).then(
      () => 'resolved',
      (e: Error) => (slowEnded ? e.message : 'failed while a step still ran'),
    );
    // Let the rejections be seen before the slow step ends.
    await new Promise((r) => setImmediate(r));
    release();
    expect(await outcome).toBe('first');
  });
});
