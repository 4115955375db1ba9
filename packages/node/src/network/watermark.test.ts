import { describe, expect, it } from 'vitest';
import { RefillTarget, validateWatermarks } from './watermark.js';

describe('RefillTarget', () => {
  it('starts at the low watermark and doubles toward high while acquisitions drain the pool', () => {
    const t = new RefillTarget({ lowWatermark: 2, highWatermark: 64 });
    expect(t.value).toBe(2);
    t.onAcquire(1);
    expect(t.value).toBe(4);
    t.onAcquire(3); // still at or above low: no pressure
    expect(t.value).toBe(4);
    for (const expected of [8, 16, 32, 64, 64]) {
      t.onAcquire(0);
      expect(t.value).toBe(expected);
    }
  });

  it('grows from an empty low watermark and stays off when high is 0', () => {
    const zeroLow = new RefillTarget({ lowWatermark: 0, highWatermark: 4 });
    zeroLow.onAcquire(0);
    expect(zeroLow.value).toBe(0); // 0 ready is not below low=0
    const off = new RefillTarget({ lowWatermark: 0, highWatermark: 0 });
    off.onAcquire(0);
    expect(off.value).toBe(0);
    const one = new RefillTarget({ lowWatermark: 1, highWatermark: 3 });
    one.onAcquire(0);
    expect(one.value).toBe(2);
    one.onAcquire(0);
    expect(one.value).toBe(3);
  });

  it('counts in-flight creations against the deficit', () => {
    const t = new RefillTarget({ lowWatermark: 4, highWatermark: 8 });
    expect(t.deficit(1, 1)).toBe(2);
    expect(t.deficit(5, 0)).toBe(0);
  });

  it('validates the watermarks like the reference (low <= high)', () => {
    expect(() => validateWatermarks({ lowWatermark: 5, highWatermark: 2 })).toThrow(
      /low_watermark \(5\) must be <=/,
    );
    expect(() => validateWatermarks({ lowWatermark: -1, highWatermark: 2 })).toThrow(/non-negative integer/);
    expect(() => validateWatermarks({ lowWatermark: 1.5, highWatermark: 2 })).toThrow(/non-negative integer/);
  });
});
