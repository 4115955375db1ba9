import { describe, expect, it } from 'vitest';
import { decodeDeliveriesCursor, eventsRoute, mergeStats } from './cluster-events.js';
import { route } from './routing.js';

const cursor = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

describe('the events routes across the cluster', () => {
  it('answers webhook writes, deliveries, stats and lifecycle events itself; list/get go to any node', () => {
    const r = (m: string, p: string) => route(m, p, { host: 'gw.local' }, []);
    expect(r('POST', '/events/webhooks')).toEqual({ kind: 'events', events: { op: 'webhook-write' } });
    expect(r('PATCH', '/events/webhooks/w1')).toEqual({ kind: 'events', events: { op: 'webhook-write' } });
    expect(r('DELETE', '/events/webhooks/w1')).toEqual({ kind: 'events', events: { op: 'webhook-write' } });
    expect(r('GET', '/events/webhooks/w1/deliveries?limit=2')).toEqual({
      kind: 'events',
      events: { op: 'deliveries', webhookId: 'w1' },
    });
    expect(r('GET', '/events/webhooks/w1/stats')).toEqual({
      kind: 'events',
      events: { op: 'stats', webhookId: 'w1' },
    });
    expect(r('GET', '/events/sandboxes/s1?limit=3')).toEqual({
      kind: 'events',
      events: { op: 'sandbox-events' },
    });
    expect(r('GET', '/events/sandboxes')).toEqual({ kind: 'events', events: { op: 'sandbox-events' } });
    expect(r('GET', '/events/webhooks')).toEqual({ kind: 'any' });
    expect(r('GET', '/events/webhooks/w1')).toEqual({ kind: 'any' });
    expect(eventsRoute('PUT', '/events/webhooks/w1')).toBeUndefined();
    expect(eventsRoute('GET', '/events/sandboxes/a/b')).toBeUndefined();
  });

  it('reads only its own deliveries cursor: per-node offsets', () => {
    expect(decodeDeliveriesCursor(null)).toEqual({});
    expect(decodeDeliveriesCursor(cursor({ a: 2, b: 0 }))).toEqual({ a: 2, b: 0 });
    for (const bad of [
      '%%%',
      cursor([1]),
      cursor({ a: -1 }),
      cursor({ a: 1.5 }),
      cursor({ a: '1' }),
      cursor(null),
      cursor({ [`${'x'.repeat(300)}`]: 1 }),
      Buffer.from('not json').toString('base64url'),
      'A'.repeat(9000),
    ])
      expect(() => decodeDeliveriesCursor(bad), bad.slice(0, 40)).toThrow(/invalid cursor/);
  });

  it('adds up stats: totals, extremes, the average weighted by attempts, buckets by hour', () => {
    const d = (minimum: number, average: number, maximum: number) => ({ minimum, average, maximum });
    const merged = mergeStats([
      {
        total: 3,
        failed: 1,
        durationMs: d(10, 20, 30),
        buckets: [{ timestamp: '2026-01-01T01:00:00.000Z', total: 3, failed: 1, durationMs: d(10, 20, 30) }],
      },
      {
        total: 1,
        failed: 0,
        durationMs: d(60, 60, 60),
        buckets: [{ timestamp: '2026-01-01T00:00:00.000Z', total: 1, failed: 0, durationMs: d(60, 60, 60) }],
      },
      { total: 0, failed: 0, durationMs: d(0, 0, 0), buckets: [] },
    ]);
    expect(merged).toEqual({
      total: 4,
      failed: 1,
      durationMs: d(10, 30, 60),
      buckets: [
        { timestamp: '2026-01-01T00:00:00.000Z', total: 1, failed: 0, durationMs: d(60, 60, 60) },
        { timestamp: '2026-01-01T01:00:00.000Z', total: 3, failed: 1, durationMs: d(10, 20, 30) },
      ],
    });
  });
});
