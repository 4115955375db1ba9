import type { NodeRef } from '../registry/node-registry.js';
import { normalizeSandboxIds, type BindingStore } from './binding-store.js';

interface Binding {
  node: NodeRef;
  expiresAtMs: number;
}

/** Expired bindings are swept after this many writes, so ones nobody reads again do not pile up. */
const SWEEP_EVERY_WRITES = 4096;

/** The store of a scheduler without Redis: one process, nothing survives it. */
export class MemoryBindingStore implements BindingStore {
  readonly kind = 'memory';
  #bindings = new Map<string, Binding>();
  #byNode = new Map<string, Set<string>>();
  #writes = 0;

  constructor(
    private readonly bindingTtlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  async get(sandboxId: string): Promise<NodeRef | undefined> {
    const id = sandboxId.trim();
    const binding = this.#bindings.get(id);
    if (!binding) return undefined;
    if (binding.expiresAtMs <= this.now()) {
      this.#delete(id);
      return undefined;
    }
    return binding.node;
  }

  async record(sandboxId: string, node: NodeRef): Promise<void> {
    const id = sandboxId.trim();
    if (id === '') return;
    this.#upsert(id, node, this.now() + this.bindingTtlMs);
  }

  async reconcileNode(node: NodeRef, sandboxIds: readonly string[]): Promise<void> {
    const roster = new Set(normalizeSandboxIds(sandboxIds));
    const expiresAtMs = this.now() + this.bindingTtlMs;
    for (const id of [...(this.#byNode.get(node.id) ?? [])]) if (!roster.has(id)) this.#delete(id);
    for (const id of roster) this.#upsert(id, node, expiresAtMs);
  }

  async close(): Promise<void> {}

  #upsert(id: string, node: NodeRef, expiresAtMs: number): void {
    if (++this.#writes >= SWEEP_EVERY_WRITES) this.#sweep();
    const existing = this.#bindings.get(id);
    if (existing && existing.node.id !== node.id) this.#unindex(existing.node.id, id);
    let set = this.#byNode.get(node.id);
    if (!set) this.#byNode.set(node.id, (set = new Set()));
    set.add(id);
    this.#bindings.set(id, { node, expiresAtMs });
  }

  #sweep(): void {
    this.#writes = 0;
    const nowMs = this.now();
    for (const [id, binding] of this.#bindings) if (binding.expiresAtMs <= nowMs) this.#delete(id);
  }

  #delete(id: string): void {
    const binding = this.#bindings.get(id);
    if (!binding) return;
    this.#bindings.delete(id);
    this.#unindex(binding.node.id, id);
  }

  #unindex(nodeId: string, id: string): void {
    const set = this.#byNode.get(nodeId);
    if (!set) return;
    set.delete(id);
    if (set.size === 0) this.#byNode.delete(nodeId);
  }
}
