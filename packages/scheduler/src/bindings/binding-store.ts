import type { NodeRef } from '../registry/node-registry.js';

/**
 * sandbox id → node, each binding living `binding_ttl` from its last write (docs/cluster.md#bindings).
 * Implementations: in memory (one scheduler, lost on restart, rebuilt from the next heartbeats) and Redis
 * (the reference's key layout; survives a scheduler restart, readable by a query-only scheduler).
 */
export interface BindingStore {
  readonly kind: 'memory' | 'redis';
  /** The live binding, or undefined (never bound, expired, or moved away and deleted). */
  get(sandboxId: string): Promise<NodeRef | undefined>;
  /** Binds the sandbox to the node for binding_ttl from now, moving it off any other node. */
  record(sandboxId: string, node: NodeRef): Promise<void>;
  /**
   * Makes `sandboxIds` exactly the node's bindings: each is (re)bound to it with a fresh TTL, its other
   * bindings are deleted; an empty roster deletes them all.
   */
  reconcileNode(node: NodeRef, sandboxIds: readonly string[]): Promise<void>;
  close(): Promise<void>;
}

/** Trimmed, non-empty, de-duplicated ids, in first-seen order. */
export function normalizeSandboxIds(ids: readonly string[]): string[] {
  const seen = new Set<string>();
  for (const raw of ids) {
    const id = raw.trim();
    if (id !== '') seen.add(id);
  }
  return [...seen];
}
