import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { SandboxEventSchema, SandboxEventType } from '@aenv/protocol';
import { SandboxEventLog } from './sandbox-event-log.js';

const event = (sandboxId: string) =>
  create(SandboxEventSchema, { sandboxId, eventType: SandboxEventType.CREATE });

describe('SandboxEventLog', () => {
  it('keeps the last N events per node, newest last', () => {
    const log = new SandboxEventLog(3, 10, () => 42);
    log.append('a', 'c1', 'i1', [event('s1'), event('s2')]);
    log.append('a', 'c1', 'i1', [event('s3'), event('s4')]);
    expect(log.recent('a').map((e) => e.event.sandboxId)).toEqual(['s2', 's3', 's4']);
    expect(log.recent('a')[0]).toMatchObject({ receivedAtMs: 42, clusterId: 'c1', serviceInstanceId: 'i1' });
    log.append('a', 'c1', 'i1', ['x1', 'x2', 'x3', 'x4', 'x5'].map(event));
    expect(log.recent('a').map((e) => e.event.sandboxId)).toEqual(['x3', 'x4', 'x5']);
    expect(log.recent('b')).toEqual([]);
  });

  it('keeps events of a bounded number of nodes', () => {
    const log = new SandboxEventLog(5, 2);
    for (const node of ['a', 'b', 'c']) log.append(node, '', '', [event(node)]);
    expect([log.recent('a').length, log.recent('b').length, log.recent('c').length]).toEqual([0, 1, 1]);
    log.forgetNode('b');
    expect(log.recent('b')).toEqual([]);
  });
});
