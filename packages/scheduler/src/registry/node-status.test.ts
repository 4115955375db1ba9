import { describe, expect, it } from 'vitest';
import { NodeStatus } from '@aenv/protocol';
import { deriveNodeStatus, nodeStatusLabel, type StatusInputs } from './node-status.js';

const base: StatusInputs = {
  reported: NodeStatus.READY,
  lastSeenMs: 1000,
  nowMs: 1000 + 5000,
  reportTtlMs: 30_000,
  discovered: true,
  lingering: false,
};

describe('node status derivation', () => {
  it.each<[string, Partial<StatusInputs>, NodeStatus]>([
    ['active + fresh heartbeat → what it reports (READY)', {}, NodeStatus.READY],
    [
      'active + fresh heartbeat reporting UNSPECIFIED → CONNECTING',
      { reported: NodeStatus.UNSPECIFIED },
      NodeStatus.CONNECTING,
    ],
    ['active + heartbeat exactly report_ttl old → still fresh', { nowMs: 1000 + 30_000 }, NodeStatus.READY],
    ['active + heartbeat older than report_ttl → UNHEALTHY', { nowMs: 1000 + 30_001 }, NodeStatus.UNHEALTHY],
    ['lingering + fresh heartbeat → LINGERING', { lingering: true }, NodeStatus.LINGERING],
    ['lingering + stale heartbeat → UNHEALTHY', { lingering: true, nowMs: 100_000 }, NodeStatus.UNHEALTHY],
    ['no longer discovered + fresh heartbeat → CONNECTING', { discovered: false }, NodeStatus.CONNECTING],
    [
      'no longer discovered + stale heartbeat → UNHEALTHY',
      { discovered: false, nowMs: 100_000 },
      NodeStatus.UNHEALTHY,
    ],
    [
      'never heard from (last seen 0) → not UNHEALTHY',
      { lastSeenMs: 0, nowMs: 10_000_000, reported: NodeStatus.UNSPECIFIED },
      NodeStatus.CONNECTING,
    ],
    [
      'node reporting LINGERING itself (draining) keeps it',
      { reported: NodeStatus.LINGERING },
      NodeStatus.LINGERING,
    ],
  ])('%s', (_name, change, expected) => {
    expect(deriveNodeStatus({ ...base, ...change })).toBe(expected);
  });

  it('labels statuses for metrics', () => {
    expect([0, 1, 2, 3, 4].map((s) => nodeStatusLabel(s as NodeStatus))).toEqual([
      'unspecified',
      'ready',
      'connecting',
      'unhealthy',
      'lingering',
    ]);
  });
});
