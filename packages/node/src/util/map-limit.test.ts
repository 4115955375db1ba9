import { describe, expect, it } from 'vitest';
import { mapLimit } from './map-limit.js';

describe('mapLimit', () => {
  it('never has more than `limit` calls in flight and visits every item once', async () => {
    let inFlight = 0;
    let most = 0;
    const seen: number[] = [];
    await mapLimit([...Array(20).keys()], 3, async (item) => {
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, 1));
      seen.push(item);
      inFlight--;
    });
    expect(most).toBe(3);
    expect(seen.sort((a, b) => a - b)).toEqual([...Array(20).keys()]);
  });

  it('throws the first failure and starts nothing after it', async () => {
    const started: number[] = [];
    const run = mapLimit([0, 1, 2, 3, 4, 5], 2, async (item) => {
      started.push(item);
      if (item === 1) throw new Error('one failed');
      await new Promise((r) => setTimeout(r, 5));
    });
    await expect(run).rejects.toThrow('one failed');
    expect(started).toEqual([0, 1]);
  });
});
