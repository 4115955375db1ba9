import { describe, expect, it } from 'vitest';
import { Backoff } from './backoff.js';

describe('scheduler backoff', () => {
  it('starts at the interval, doubles, stops at the cap and starts over after a success', () => {
    const b = new Backoff(5000, 15_000, () => 1);
    expect([b.fail(), b.fail(), b.fail(), b.fail()]).toEqual([5000, 10_000, 15_000, 15_000]);
    expect(b.failing).toBe(4);
    b.succeed();
    expect(b.failing).toBe(0);
    expect(b.fail()).toBe(5000);
  });

  it('spreads the delay into the upper half, never below 1 ms', () => {
    expect(new Backoff(1000, 8000, () => 0).fail()).toBe(500);
    expect(new Backoff(1000, 8000, () => 0.5).fail()).toBe(750);
    expect(new Backoff(1, 1, () => 0).fail()).toBe(1);
    // A jitter source out of range is clamped.
    expect(new Backoff(1000, 8000, () => 7).fail()).toBe(1000);
  });

  it('does not overflow after very many failures', () => {
    const b = new Backoff(1000, 15_000, () => 1);
    for (let i = 0; i < 2000; i++) b.fail();
    expect(b.fail()).toBe(15_000);
  });
});
