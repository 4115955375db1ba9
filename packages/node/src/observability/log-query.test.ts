import { describe, expect, it } from 'vitest';
import {
  LogQueryError,
  mergeLines,
  parseLogQueryV1,
  parseLogQueryV2,
  shapeV1,
  shapeV2,
} from './log-query.js';
import type { SandboxLogLine } from './sandbox-log-store.js';

const line = (
  t: number,
  level: SandboxLogLine['level'],
  message: string,
  logger = 'lifecycle',
): SandboxLogLine => ({
  timestampMs: t,
  level,
  logger,
  message,
  fields: { event: 'x' },
});

const lines = [
  line(1000, 'info', 'created'),
  line(2000, 'debug', 'envd detail', 'envd'),
  line(3000, 'error', 'pause failed'),
  line(4000, 'info', 'resumed'),
];

describe('log queries', () => {
  it('v1: lines from `start` (ms), at most `limit`, each also as a JSON line with level and logger', () => {
    const out = shapeV1(lines, parseLogQueryV1({ start: '2000', limit: '2' }));
    expect(out.logs.map((l) => l.timestamp)).toEqual([
      '1970-01-01T00:00:02.000Z',
      '1970-01-01T00:00:03.000Z',
    ]);
    expect(JSON.parse(out.logs[0]!.line)).toEqual({
      event: 'x',
      level: 'debug',
      logger: 'envd',
      message: 'envd detail',
    });
    expect(out.logEntries[1]).toEqual({
      timestamp: '1970-01-01T00:00:03.000Z',
      level: 'error',
      message: 'pause failed',
      fields: { event: 'x', logger: 'lifecycle' },
    });
    expect(shapeV1(lines, parseLogQueryV1({})).logs).toHaveLength(4);
  });

  it('v2: forward from the cursor, backward (newest first) up to it, minimum level, substring search', () => {
    const msgs = (q: Record<string, string>) => shapeV2(lines, parseLogQueryV2(q)).logs.map((l) => l.message);
    expect(msgs({})).toEqual(['created', 'envd detail', 'pause failed', 'resumed']);
    expect(msgs({ cursor: '2500' })).toEqual(['pause failed', 'resumed']);
    expect(msgs({ cursor: '3000', direction: 'backward' })).toEqual([
      'pause failed',
      'envd detail',
      'created',
    ]);
    expect(msgs({ direction: 'backward', limit: '1' })).toEqual(['resumed']);
    expect(msgs({ level: 'info' })).toEqual(['created', 'pause failed', 'resumed']);
    expect(msgs({ level: 'error' })).toEqual(['pause failed']);
    expect(msgs({ search: 'sume' })).toEqual(['resumed']);
    expect(msgs({ search: 'RESUMED' })).toEqual([]);
  });

  it('refuses malformed values with a message naming the parameter', () => {
    for (const [q, re] of [
      [{ start: '-1' }, /invalid start/],
      [{ start: '1e3' }, /invalid start/],
      [{ limit: '1001' }, /invalid limit/],
      [{ start: ['1', '2'] }, /invalid start/],
      [{ start: '9'.repeat(400) }, /invalid start/],
    ] as const) {
      expect(() => parseLogQueryV1(q as Record<string, unknown>)).toThrow(re);
    }
    for (const [q, re] of [
      [{ direction: 'sideways' }, /invalid direction/],
      [{ level: 'fatal' }, /invalid level/],
      [{ cursor: 'now' }, /invalid cursor/],
      [{ search: 'x'.repeat(257) }, /invalid search/],
      [{ search: ['a', 'b'] }, /invalid search/],
    ] as const) {
      expect(() => parseLogQueryV2(q as Record<string, unknown>)).toThrow(LogQueryError);
      expect(() => parseLogQueryV2(q as Record<string, unknown>)).toThrow(re);
    }
  });

  it('merges sources in time order, keeping the order of equal times', () => {
    const a = [line(1, 'info', 'a1'), line(3, 'info', 'a3')];
    const b = [line(1, 'info', 'b1'), line(2, 'info', 'b2')];
    expect(mergeLines(a, b).map((l) => l.message)).toEqual(['a1', 'b1', 'b2', 'a3']);
  });
});
