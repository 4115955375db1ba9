import { describe, expect, it } from 'vitest';
import { EventQueue, KEEPALIVE, keepaliveIntervalMs } from './event-queue.js';

describe('EventQueue', () => {
  it('delivers items in order, then ends when closed', async () => {
    const q = new EventQueue<number>();
    q.push(1);
    q.push(2);
    setTimeout(() => {
      q.push(3);
      q.close();
    }, 10);
    const got: unknown[] = [];
    for await (const x of q.drain(new AbortController().signal, 60_000)) got.push(x);
    expect(got).toEqual([1, 2, 3]);
  });

  it('yields keepalives while idle and stops with the abort reason', async () => {
    const q = new EventQueue<number>();
    const abort = new AbortController();
    const got: unknown[] = [];
    const err = await (async () => {
      for await (const x of q.drain(abort.signal, 5)) {
        got.push(x);
        if (got.length === 2) abort.abort(new Error('stop'));
      }
    })().catch((e: unknown) => e);
    expect(got).toEqual([KEEPALIVE, KEEPALIVE]);
    expect(String(err)).toContain('stop');
  });

  it('tracks buffered bytes and reports draining', async () => {
    const q = new EventQueue<string>(10);
    let drained = 0;
    q.onDrain = () => drained++;
    q.push('a', 50);
    q.push('b', 5);
    expect(q.bufferedBytes).toBe(55);
    q.close();
    for await (const _ of q.drain(new AbortController().signal, 1000)) void _;
    expect(q.bufferedBytes).toBe(0);
    expect(drained).toBeGreaterThan(0);
  });

  it('reads the keepalive header in seconds', () => {
    expect(keepaliveIntervalMs('50')).toBe(50_000);
    expect(keepaliveIntervalMs(null)).toBe(90_000);
    expect(keepaliveIntervalMs('nonsense')).toBe(90_000);
    expect(keepaliveIntervalMs('0.1')).toBe(1000);
  });
});
