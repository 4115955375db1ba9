import { describe, expect, it } from 'vitest';
import { formatDuration, parseGoDuration } from './duration.js';

describe('parseGoDuration', () => {
  it.each([
    ['30s', 30_000],
    ['1m30s', 90_000],
    ['250ms', 250],
    ['1.5h', 5_400_000],
    ['2h45m', 9_900_000],
    ['.5s', 500],
    ['1500us', 1.5],
    ['1000000ns', 1],
    ['0', 0],
    [' 10s ', 10_000],
    ['-5s', -5000],
  ])('%s = %d ms', (text, ms) => {
    expect(parseGoDuration(text)).toBeCloseTo(ms, 9);
  });

  it.each(['', '30', 's', '30 s', '5d', '1h-5m', '3x', 'abc', '1..5s', '30sec'])('refuses %j', (text) => {
    expect(() => parseGoDuration(text)).toThrow(/duration|unit/);
  });

  it('formats whole units back', () => {
    expect([30_000, 90_000, 3_600_000, 250, 120_000].map(formatDuration)).toEqual([
      '30s',
      '90s',
      '1h',
      '250ms',
      '2m',
    ]);
  });
});
