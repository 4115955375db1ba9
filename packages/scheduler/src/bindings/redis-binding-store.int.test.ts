import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bindingStoreContract } from '../testing/binding-store-contract.js';
import { redisUrl } from '../testing/redis.js';
import { parseBindingValue, RedisBindingStore } from './redis-binding-store.js';

// Every run writes under its own key prefix, so parallel runs and other users of the test Redis never collide.
const runPrefix = `aenvtest:${randomUUID()}`;
const admin = new Redis(redisUrl());
afterAll(async () => {
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${runPrefix}:*`, 'COUNT', 1000);
    if (keys.length > 0) await admin.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  admin.disconnect();
});

let n = 0;
bindingStoreContract('Redis', 1000, async (ttlMs) => {
  const store = await RedisBindingStore.connect({
    address: redisUrl(),
    bindingTtlMs: ttlMs,
    keyPrefix: `${runPrefix}:${n++}:bindings`,
  });
  return { store, advance: (ms) => sleep(ms), cleanup: () => store.close() };
});

describe('Redis binding store layout (what a reference scheduler or gateway reads)', () => {
  let store: RedisBindingStore;
  const prefix = `${runPrefix}:layout:bindings`;
  beforeAll(async () => {
    store = await RedisBindingStore.connect({ address: redisUrl(), bindingTtlMs: 30_000, keyPrefix: prefix });
  });
  afterAll(() => store.close());

  it('uses the reference keys, JSON value, PX TTL and reverse-index set', async () => {
    await store.record('sbx-1', { id: 'node-a', endpoint: 'http://10.0.0.1:8000' });
    expect(await admin.get(`${prefix}:sandbox:sbx-1`)).toBe(
      '{"node":{"node_id":"node-a","endpoint":"http://10.0.0.1:8000"}}',
    );
    const ttl = await admin.pttl(`${prefix}:sandbox:sbx-1`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(30_000);
    expect(await admin.smembers(`${prefix}:node:node-a`)).toEqual(['sbx-1']);
    const indexTtl = await admin.pttl(`${prefix}:node:node-a`);
    expect(indexTtl).toBeGreaterThan(30_000);
    expect(indexTtl).toBeLessThanOrEqual(3_600_000);

    await store.reconcileNode({ id: 'node-b', endpoint: 'http://10.0.0.2:8000' }, ['sbx-1', 'sbx-2']);
    expect(await admin.smembers(`${prefix}:node:node-a`)).toEqual([]);
    expect((await admin.smembers(`${prefix}:node:node-b`)).sort()).toEqual(['sbx-1', 'sbx-2']);
    await store.reconcileNode({ id: 'node-b', endpoint: '' }, []);
    expect(
      await admin.exists(`${prefix}:node:node-b`, `${prefix}:sandbox:sbx-1`, `${prefix}:sandbox:sbx-2`),
    ).toBe(0);
  });

  it('reads bindings another writer stored, and treats malformed values as no binding', async () => {
    await admin.set(
      `${prefix}:sandbox:from-go`,
      '{"node":{"node_id":"n9","endpoint":" http://n9:8000 "}}',
      'PX',
      30_000,
    );
    expect(await store.get('from-go')).toEqual({ id: 'n9', endpoint: 'http://n9:8000' });
    for (const [key, raw] of [
      ['garbage', 'not json'],
      ['no-node', '{}'],
      ['no-endpoint', '{"node":{"node_id":"n9"}}'],
      ['wrong-type', '{"node":{"node_id":7,"endpoint":"http://x"}}'],
    ]) {
      await admin.set(`${prefix}:sandbox:${key}`, raw!, 'PX', 30_000);
      expect(await store.get(key!), key).toBeUndefined();
    }
    // The scripts survive such values too: reconcile over a malformed binding just overwrites it.
    await store.reconcileNode({ id: 'n1', endpoint: 'http://n1:8000' }, ['garbage']);
    expect(await store.get('garbage')).toEqual({ id: 'n1', endpoint: 'http://n1:8000' });
    expect(parseBindingValue(null)).toBeUndefined();
  });

  it('refuses to start without a reachable Redis, within the operation timeout', async () => {
    await expect(
      RedisBindingStore.connect({ address: '127.0.0.1:1', bindingTtlMs: 1000, operationTimeoutMs: 500 }),
    ).rejects.toThrow('cannot reach Redis at 127.0.0.1:1');
  });
});
