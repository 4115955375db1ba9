import { bindingStoreContract } from '../testing/binding-store-contract.js';
import { MemoryBindingStore } from './memory-binding-store.js';

bindingStoreContract('in-memory', 30_000, async (ttlMs) => {
  let now = 1_000_000;
  return {
    store: new MemoryBindingStore(ttlMs, () => now),
    advance: async (ms) => {
      now += ms;
    },
    cleanup: async () => {},
  };
});
