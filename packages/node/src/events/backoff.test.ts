import { describe, expect, it } from 'vitest';
import { retryDelayMs } from './backoff.js';

const p = { initialMs: 1000, maxMs: 30_000 };

describe('retryDelayMs', () => {
  it('doubles per failure between half and all of initial·2^(n-1)', () => {
    for (const [n, full] of [
      [1, 1000],
      [2, 2000],
      [3, 4000],
      [5, 16_000],
    ] as const) {
      expect(retryDelayMs(n, p, () => 0)).toBe(full / 2);
      expect(retryDelayMs(n, p, () => 1)).toBe(full);
      const d = retryDelayMs(n, p);
      expect(d).toBeGreaterThanOrEqual(full / 2);
      expect(d).toBeLessThanOrEqual(full);
    }
  });

  it('is capped at maxMs, also for absurd failure counts', () => {
    expect(retryDelayMs(6, p, () => 1)).toBe(30_000);
    expect(retryDelayMs(10_000, p, () => 1)).toBe(30_000);
    expect(retryDelayMs(10_000, p, () => 0)).toBe(15_000);
  });

  it('treats 0 or negative failures as the first', () => {
    expect(retryDelayMs(0, p, () => 1)).toBe(1000);
    expect(retryDelayMs(-3, p, () => 1)).toBe(1000);
  });
});
