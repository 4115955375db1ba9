import { describe, expect, it } from 'vitest';
import { NftWriter } from './nft-writer.js';

/** Stands in for `nft -f -`: records scripts; a script containing "BAD" fails like a rejected transaction. */
function recorder() {
  const calls: string[] = [];
  let release: () => void = () => {};
  let gate: Promise<void> = Promise.resolve();
  return {
    calls,
    hold() {
      gate = new Promise((r) => (release = r));
    },
    open: () => release(),
    runner: async (script: string) => {
      calls.push(script);
      await gate;
      if (script.includes('BAD')) throw new Error('transaction rejected');
    },
  };
}

describe('NftWriter', () => {
  it('batches changes queued while nft runs into one transaction', async () => {
    const r = recorder();
    const w = new NftWriter(r.runner);
    r.hold();
    const first = w.apply('a');
    const queued = [w.apply('b'), w.apply('c\n')];
    r.open();
    await Promise.all([first, ...queued]);
    expect(r.calls).toEqual(['a\n', 'b\nc\n']);
    expect(w.invocations).toBe(2);
  });

  it('retries a failed batch change by change so only the bad change fails', async () => {
    const r = recorder();
    const w = new NftWriter(r.runner);
    r.hold();
    const first = w.apply('a');
    const good = w.apply('b');
    const bad = w.apply('BAD');
    const good2 = w.apply('c');
    r.open();
    await first;
    await expect(good).resolves.toBeUndefined();
    await expect(bad).rejects.toThrow('transaction rejected');
    await expect(good2).resolves.toBeUndefined();
    expect(r.calls).toEqual(['a\n', 'b\nBAD\nc\n', 'b\n', 'BAD\n', 'c\n']);
  });

  it('runs exclusive work alone, between batches', async () => {
    const r = recorder();
    const w = new NftWriter(r.runner);
    const order: string[] = [];
    r.hold();
    const a = w.apply('a').then(() => order.push('a'));
    const ex = w.exclusive(async () => {
      order.push('exclusive-start');
      await w.applyNow('inside');
      order.push('exclusive-end');
      return 42;
    });
    const b = w.apply('b').then(() => order.push('b'));
    r.open();
    expect(await ex).toBe(42);
    await Promise.all([a, b]);
    expect(order).toEqual(['a', 'exclusive-start', 'exclusive-end', 'b']);
    expect(r.calls).toEqual(['a\n', 'inside', 'b\n']);
  });

  it('keeps going after an exclusive task throws', async () => {
    const r = recorder();
    const w = new NftWriter(r.runner);
    await expect(w.exclusive(async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await w.apply('x');
    await w.idle();
    expect(r.calls).toEqual(['x\n']);
  });
});
