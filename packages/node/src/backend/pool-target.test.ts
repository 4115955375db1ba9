import { describe, expect, it } from 'vitest';
import { PoolTarget } from './pool-target.js';

const QUIET = 60_000;

/** `n` creates at time `now` against a pool holding `ready` sandboxes (taken one by one, never refilled). */
function burst(t: PoolTarget, n: number, ready: number, now = 0): void {
  for (let i = 0; i < n; i++) {
    const hit = ready > 0;
    if (hit) ready--;
    t.onCreate(hit, ready, now);
  }
}

describe('warm pool target', () => {
  it('starts at the low watermark and stays there while the pool keeps up', () => {
    const t = new PoolTarget({ low: 2, high: 64, quietMs: QUIET }, 0);
    expect(t.value).toBe(2);
    // One create at a time, each leaving a sandbox behind: never drained.
    for (let i = 0; i < 10; i++) t.onCreate(true, 1, i);
    expect(t.value).toBe(2);
  });

  it('doubles while creates drain the pool, proportionally to the demand it saw', () => {
    const t = new PoolTarget({ low: 2, high: 64, quietMs: QUIET }, 0);
    // 20 creates against 2 ready: 2 → 4 (after 2), → 8 (after 4 more), → 16 (after 8 more); 6 left over.
    burst(t, 20, 2);
    expect(t.value).toBe(16);
    // The next burst drains the 16 and doubles once more.
    burst(t, 20, 16);
    expect(t.value).toBe(32);
    // A burst the pool fully serves, with sandboxes left: no growth.
    burst(t, 20, 32);
    expect(t.value).toBe(32);
  });

  it('never grows beyond the high watermark', () => {
    const t = new PoolTarget({ low: 2, high: 12, quietMs: QUIET }, 0);
    for (let i = 0; i < 5; i++) burst(t, 100, 0);
    expect(t.value).toBe(12);
    const fixed = new PoolTarget({ low: 3, high: 3, quietMs: QUIET }, 0);
    burst(fixed, 50, 0);
    expect(fixed.value).toBe(3);
  });

  it('halves back toward the low watermark after each quiet period, not before', () => {
    const t = new PoolTarget({ low: 2, high: 64, quietMs: QUIET }, 0);
    burst(t, 20, 2, 1000);
    expect(t.value).toBe(16);
    expect(t.decay(1000 + QUIET - 1)).toBe(false);
    expect(t.value).toBe(16);
    expect(t.decay(1000 + QUIET)).toBe(true);
    expect(t.value).toBe(8);
    // The next halving needs another quiet period.
    expect(t.decay(1000 + QUIET + 1)).toBe(false);
    expect(t.decay(1000 + 2 * QUIET)).toBe(true);
    expect(t.value).toBe(4);
    // A create restarts the quiet period.
    t.onCreate(true, 3, 1000 + 2 * QUIET + 5);
    expect(t.decay(1000 + 3 * QUIET)).toBe(false);
    expect(t.decay(1000 + 3 * QUIET + 5)).toBe(true);
    expect(t.value).toBe(2);
    // Never below the low watermark.
    expect(t.decay(1000 + 10 * QUIET)).toBe(false);
    expect(t.value).toBe(2);
  });

  it('refuses watermarks out of order', () => {
    expect(() => new PoolTarget({ low: 5, high: 2, quietMs: QUIET }, 0)).toThrow(/low \(5\) <= high \(2\)/);
    expect(() => new PoolTarget({ low: -1, high: 2, quietMs: QUIET }, 0)).toThrow(/0 <= low/);
  });
});
