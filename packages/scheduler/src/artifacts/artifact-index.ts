// Which nodes hold which P2P artifact (docs/cluster.md#p2p-artifact-index): in memory, bounded to
// `artifact_store_capacity` keys, least recently recorded or looked-up key evicted first.

function indexKey(clusterId: string, backend: string, key: string): string | undefined {
  const c = clusterId.trim();
  const b = backend.trim();
  const k = key.trim();
  if (c === '' || b === '' || k === '') return undefined;
  // JSON keeps the three parts apart whatever characters they hold.
  return JSON.stringify([c, b, k]);
}

export class ArtifactIndex {
  /** Map iteration order = recency order (oldest first). */
  #holders = new Map<string, Set<string>>();
  #byNode = new Map<string, Set<string>>();

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.#holders.size;
  }

  record(clusterId: string, backend: string, key: string, nodeId: string): void {
    const k = indexKey(clusterId, backend, key);
    const node = nodeId.trim();
    if (!k || node === '') return;
    const holders = this.#holders.get(k) ?? new Set<string>();
    this.#holders.delete(k);
    holders.add(node);
    this.#holders.set(k, holders);
    let keys = this.#byNode.get(node);
    if (!keys) this.#byNode.set(node, (keys = new Set()));
    keys.add(k);
    while (this.#holders.size > this.capacity) this.#evictOldest();
  }

  forget(clusterId: string, backend: string, key: string, nodeId: string): void {
    const k = indexKey(clusterId, backend, key);
    const node = nodeId.trim();
    if (!k || node === '') return;
    this.#drop(k, node);
  }

  /** Every holder of the key, oldest record first; marks the key used. */
  lookup(clusterId: string, backend: string, key: string): string[] {
    const k = indexKey(clusterId, backend, key);
    if (!k) return [];
    const holders = this.#holders.get(k);
    if (!holders) return [];
    this.#holders.delete(k);
    this.#holders.set(k, holders);
    return [...holders];
  }

  forgetNode(nodeId: string): void {
    const node = nodeId.trim();
    for (const k of [...(this.#byNode.get(node) ?? [])]) this.#drop(k, node);
    this.#byNode.delete(node);
  }

  #drop(k: string, node: string): void {
    const holders = this.#holders.get(k);
    if (holders) {
      holders.delete(node);
      if (holders.size === 0) this.#holders.delete(k);
    }
    const keys = this.#byNode.get(node);
    if (keys) {
      keys.delete(k);
      if (keys.size === 0) this.#byNode.delete(node);
    }
  }

  #evictOldest(): void {
    const oldest = this.#holders.keys().next();
    if (oldest.done) return;
    for (const node of this.#holders.get(oldest.value) ?? []) {
      const keys = this.#byNode.get(node);
      keys?.delete(oldest.value);
      if (keys?.size === 0) this.#byNode.delete(node);
    }
    this.#holders.delete(oldest.value);
  }
}
