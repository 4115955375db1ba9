import { SandboxEventType, type SchedulerClient } from '@aenv/protocol';
import type { LifecycleEvent } from '../orchestrator/orchestrator.js';

export type SandboxEventInit = NonNullable<
  Parameters<SchedulerClient['reportSandboxEvent']>[0]['events']
>[number];

export interface SandboxResources {
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
}

/**
 * The scheduler.v1 event of a lifecycle event, or undefined for those the contract has no type for. A fork
 * child's "created" is its FORK (one per child, the child's id and resources); the parent's own "forked" is
 * not reported. Every way a sandbox goes (kill, timeout, retention, lost at restart) is a DELETE.
 */
export function schedulerEvent(
  e: LifecycleEvent,
  resources: SandboxResources | undefined,
): SandboxEventInit | undefined {
  const type = eventType(e);
  if (type === undefined) return undefined;
  const MiB = 1024n * 1024n;
  return {
    sandboxId: e.sandboxId,
    eventType: type,
    requestedCpu: resources?.cpuCount ?? 0,
    requestedMemoryBytes: BigInt(resources?.memoryMB ?? 0) * MiB,
    requestedDiskBytes: BigInt(resources?.diskSizeMB ?? 0) * MiB,
  };
}

function eventType(e: LifecycleEvent): SandboxEventType | undefined {
  switch (e.event) {
    case 'created':
      return e.fields?.forkedFrom ? SandboxEventType.FORK : SandboxEventType.CREATE;
    case 'paused':
      return SandboxEventType.PAUSE;
    case 'resumed':
      return SandboxEventType.RESUME;
    case 'killed':
    case 'lost':
      return SandboxEventType.DELETE;
    default:
      return undefined;
  }
}

/**
 * Events waiting to be sent, at most `capacity`: a full queue drops its oldest event (counted), so a
 * scheduler outage costs memory bounded by the capacity and never blocks the lifecycle operation that
 * pushed. The next heartbeat's roster corrects what dropped events would have said.
 */
export class SandboxEventQueue {
  private items: SandboxEventInit[] = [];
  private droppedCount = 0;

  constructor(private readonly capacity: number) {}

  push(e: SandboxEventInit): void {
    this.items.push(e);
    if (this.items.length > this.capacity) {
      this.items.shift();
      this.droppedCount++;
    }
  }

  /** Removes and returns up to `max` of the oldest events. */
  take(max: number): SandboxEventInit[] {
    return this.items.splice(0, max);
  }

  /** Puts a batch that could not be sent back in front; what no longer fits is dropped (the oldest). */
  putBack(batch: SandboxEventInit[]): void {
    this.items = [...batch, ...this.items];
    const over = this.items.length - this.capacity;
    if (over > 0) {
      this.items.splice(0, over);
      this.droppedCount += over;
    }
  }

  get size(): number {
    return this.items.length;
  }

  /** Events dropped since the last call. */
  takeDropped(): number {
    const n = this.droppedCount;
    this.droppedCount = 0;
    return n;
  }
}
