import { describe, expect, it } from 'vitest';
import { SandboxEventType } from '@aenv/protocol';
import type { LifecycleEvent } from '../orchestrator/orchestrator.js';
import { SandboxEventQueue, schedulerEvent } from './sandbox-events.js';

const ev = (event: LifecycleEvent['event'], fields?: Record<string, string>): LifecycleEvent => ({
  sandboxId: 'sbx1',
  event,
  level: 'info',
  message: '',
  ...(fields ? { fields } : {}),
});
const res = { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 };

describe('scheduler sandbox events', () => {
  it('maps lifecycle events to the contract types with the requested resources in bytes', () => {
    expect(schedulerEvent(ev('created'), res)).toEqual({
      sandboxId: 'sbx1',
      eventType: SandboxEventType.CREATE,
      requestedCpu: 2,
      requestedMemoryBytes: 512n * 1024n * 1024n,
      requestedDiskBytes: 1024n * 1024n * 1024n,
    });
    const type = (e: LifecycleEvent) => schedulerEvent(e, res)?.eventType;
    expect(type(ev('created', { forkedFrom: 'parent' }))).toBe(SandboxEventType.FORK);
    expect(type(ev('paused'))).toBe(SandboxEventType.PAUSE);
    expect(type(ev('resumed'))).toBe(SandboxEventType.RESUME);
    expect(type(ev('killed'))).toBe(SandboxEventType.DELETE);
    expect(type(ev('lost'))).toBe(SandboxEventType.DELETE);
    // The parent's side of a fork, and events that change nothing the scheduler counts, are not reported.
    for (const e of ['forked', 'timeout', 'snapshotted', 'restored', 'pause_failed', 'expired'] as const)
      expect(schedulerEvent(ev(e), res)).toBeUndefined();
  });

  it('reports zero resources for a sandbox it knows nothing of', () => {
    expect(schedulerEvent(ev('killed'), undefined)).toMatchObject({
      requestedCpu: 0,
      requestedMemoryBytes: 0n,
      requestedDiskBytes: 0n,
    });
  });

  it('keeps at most its capacity, dropping (and counting) the oldest', () => {
    const q = new SandboxEventQueue(3);
    const e = (id: string) => ({ sandboxId: id, eventType: SandboxEventType.CREATE });
    for (const id of ['a', 'b', 'c', 'd', 'e']) q.push(e(id));
    expect(q.size).toBe(3);
    expect(q.takeDropped()).toBe(2);
    expect(q.takeDropped()).toBe(0);
    const batch = q.take(2);
    expect(batch.map((x) => x.sandboxId)).toEqual(['c', 'd']);
    q.push(e('f'));
    q.push(e('g'));
    // A batch that failed goes back in front; what no longer fits is the oldest.
    q.putBack(batch);
    expect(q.takeDropped()).toBe(2);
    expect(q.take(10).map((x) => x.sandboxId)).toEqual(['e', 'f', 'g']);
    q.push(e('h'));
    q.putBack([e('x')]);
    expect(q.take(10).map((x) => x.sandboxId)).toEqual(['x', 'h']);
  });
});
