import { describe, expect, it } from 'vitest';
import { KeyedMutex, LockTimeoutError } from './keyed-mutex.js';

describe('KeyedMutex', () => {
  it('serialises work on one key in arrival order', async () => {
    const m = new KeyedMutex();
    const order: string[] = [];
    let releaseFirst!: () => void;
    const first = m.run(
      'a',
      1000,
      () => new Promise<void>((r) => (releaseFirst = () => (order.push('1'), r()))),
    );
    const second = m.run('a', 1000, async () => void order.push('2'));
    const third = m.run('a', 1000, async () => void order.push('3'));
    await new Promise((r) => setTimeout(r, 10));
    expect(order).toEqual([]);
    releaseFirst();
    await Promise.all([first, second, third]);
    expect(order).toEqual(['1', '2', '3']);
    expect(m.isLocked('a')).toBe(false);
  });

  it('does not block other keys', async () => {
    const m = new KeyedMutex();
    let release!: () => void;
    const held = m.run('a', 1000, () => new Promise<void>((r) => (release = r)));
    await expect(m.run('b', 100, async () => 'b')).resolves.toBe('b');
    release();
    await held;
  });

  it('times out a waiter and keeps the queue consistent', async () => {
    const m = new KeyedMutex();
    let release!: () => void;
    const held = m.run('a', 1000, () => new Promise<void>((r) => (release = r)));
    await expect(m.run('a', 20, async () => 'late')).rejects.toBeInstanceOf(LockTimeoutError);
    release();
    await held;
    await expect(m.run('a', 20, async () => 'next')).resolves.toBe('next');
  });

  it('releases the lock when the work throws', async () => {
    const m = new KeyedMutex();
    await expect(m.run('a', 100, async () => Promise.reject(new Error('x')))).rejects.toThrow('x');
    expect(m.isLocked('a')).toBe(false);
  });
});

describe('KeyedMutex.serialize (no timeout)', () => {
  it('runs one task per key at a time and different keys concurrently', async () => {
    const lock = new KeyedMutex();
    const events: string[] = [];
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const a1 = lock.serialize('a', async () => {
      events.push('a1 start');
      await gate;
      events.push('a1 end');
    });
    const a2 = lock.serialize('a', async () => {
      events.push('a2');
    });
    const b = lock.serialize('b', async () => {
      events.push('b');
    });
    await b;
    expect(events).toEqual(['a1 start', 'b']);
    release();
    await Promise.all([a1, a2]);
    expect(events).toEqual(['a1 start', 'b', 'a1 end', 'a2']);
    await expect(lock.serialize('a', async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await expect(lock.serialize('a', async () => 7)).resolves.toBe(7);
  });
});
