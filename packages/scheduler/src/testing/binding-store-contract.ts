// The behaviour every BindingStore must have (docs/cluster.md#bindings), run against the in-memory store
// (memory-binding-store.test.ts) and against real Redis (redis-binding-store.int.test.ts).
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { BindingStore } from '../bindings/binding-store.js';

export interface StoreUnderTest {
  store: BindingStore;
  /** Lets `ms` pass for the store's clock (a fake clock, or real time for Redis). */
  advance(ms: number): Promise<void>;
  cleanup(): Promise<void>;
}

const A = { id: 'node-a', endpoint: 'http://10.0.0.1:8000' };
const B = { id: 'node-b', endpoint: 'http://10.0.0.2:8000' };

export function bindingStoreContract(
  name: string,
  ttlMs: number,
  open: (ttlMs: number) => Promise<StoreUnderTest>,
): void {
  describe(`${name} binding store contract`, () => {
    let t: StoreUnderTest;
    beforeEach(async () => {
      t = await open(ttlMs);
    });
    afterEach(async () => {
      await t.cleanup();
    });

    it('answers nothing for an unknown sandbox or a blank id', async () => {
      expect(await t.store.get('never-bound')).toBeUndefined();
      expect(await t.store.get('  ')).toBeUndefined();
    });

    it('records a binding, trims ids, and moves a sandbox recorded on another node', async () => {
      await t.store.record(' s1 ', A);
      expect(await t.store.get('s1')).toEqual(A);
      expect(await t.store.get(' s1')).toEqual(A);
      await t.store.record('s1', B);
      expect(await t.store.get('s1')).toEqual(B);
      // The old node's empty roster no longer owns it.
      await t.store.reconcileNode(A, []);
      expect(await t.store.get('s1')).toEqual(B);
      await t.store.record('', A);
      expect(await t.store.get('')).toBeUndefined();
    });

    it('makes a roster exactly the node’s bindings', async () => {
      await t.store.record('old', A);
      await t.store.record('elsewhere', B);
      await t.store.reconcileNode(A, ['r1', ' r2 ', 'r1', '', 'elsewhere']);
      expect(await t.store.get('old')).toBeUndefined();
      expect(await t.store.get('r1')).toEqual(A);
      expect(await t.store.get('r2')).toEqual(A);
      expect(await t.store.get('elsewhere')).toEqual(A);
      // B no longer lists "elsewhere": B's empty roster does not delete it.
      await t.store.reconcileNode(B, []);
      expect(await t.store.get('elsewhere')).toEqual(A);
      await t.store.reconcileNode(A, []);
      for (const id of ['r1', 'r2', 'elsewhere']) expect(await t.store.get(id)).toBeUndefined();
    });

    it('rebinds a sandbox that shows up in another node’s roster (it moved)', async () => {
      await t.store.reconcileNode(A, ['moving', 'staying']);
      await t.store.reconcileNode(B, ['moving']);
      expect(await t.store.get('moving')).toEqual(B);
      await t.store.reconcileNode(A, ['staying']);
      expect(await t.store.get('moving')).toEqual(B);
      expect(await t.store.get('staying')).toEqual(A);
    });

    it('lets a binding expire after binding_ttl unless a roster or a record refreshes it', async () => {
      await t.store.record('recorded', A);
      await t.store.reconcileNode(B, ['reported']);
      await t.advance(ttlMs * 0.6);
      await t.store.reconcileNode(B, ['reported']);
      await t.advance(ttlMs * 0.6);
      expect(await t.store.get('recorded')).toBeUndefined();
      expect(await t.store.get('reported')).toEqual(B);
      await t.advance(ttlMs * 0.6);
      expect(await t.store.get('reported')).toBeUndefined();
    });

    it('handles a large roster in one call', async () => {
      const ids = Array.from({ length: 2000 }, (_, i) => `bulk-${i}`);
      await t.store.reconcileNode(A, ids);
      expect(await t.store.get('bulk-0')).toEqual(A);
      expect(await t.store.get('bulk-1999')).toEqual(A);
      await t.store.reconcileNode(A, ids.slice(1000));
      expect(await t.store.get('bulk-999')).toBeUndefined();
      expect(await t.store.get('bulk-1000')).toEqual(A);
    });
  });
}
