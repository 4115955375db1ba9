import type { SandboxEvent } from '@aenv/protocol';

export interface LoggedSandboxEvent {
  receivedAtMs: number;
  clusterId: string;
  serviceInstanceId: string;
  event: SandboxEvent;
}

/**
 * The last `perNode` sandbox lifecycle events each node reported (ReportSandboxEvent), newest last.
 * Nothing acts on them yet; they are kept for the lifecycle-events work (docs/cluster.md#sandbox-events).
 */
export class SandboxEventLog {
  #byNode = new Map<string, LoggedSandboxEvent[]>();

  constructor(
    private readonly perNode: number,
    private readonly maxNodes: number,
    private readonly now: () => number = Date.now,
  ) {}

  append(
    nodeId: string,
    clusterId: string,
    serviceInstanceId: string,
    events: readonly SandboxEvent[],
  ): void {
    if (events.length === 0) return;
    let list = this.#byNode.get(nodeId);
    if (!list) {
      // Ids come from callers; bound how many distinct ones are kept.
      if (this.#byNode.size >= this.maxNodes) {
        const oldest = this.#byNode.keys().next();
        if (!oldest.done) this.#byNode.delete(oldest.value);
      }
      this.#byNode.set(nodeId, (list = []));
    }
    const receivedAtMs = this.now();
    for (const event of events.slice(-this.perNode))
      list.push({ receivedAtMs, clusterId, serviceInstanceId, event });
    if (list.length > this.perNode) list.splice(0, list.length - this.perNode);
  }

  recent(nodeId: string): readonly LoggedSandboxEvent[] {
    return this.#byNode.get(nodeId) ?? [];
  }

  forgetNode(nodeId: string): void {
    this.#byNode.delete(nodeId);
  }
}
