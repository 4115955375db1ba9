import { describe, expect, it } from 'vitest';
import { openStateDb } from '../state/db.js';
import { SandboxEventStore, sandboxEventMigrations, type SandboxEvent } from './sandbox-events.js';
import type { LifecycleEvent } from '../orchestrator/orchestrator.js';

const ev = (
  sandboxId: string,
  event: LifecycleEvent['event'],
  fields?: Record<string, string>,
): LifecycleEvent => ({
  sandboxId,
  event,
  level: 'info',
  message: event,
  templateId: 'tpl',
  instanceId: 'inst',
  ...(fields ? { fields } : {}),
});

const all = { offset: 0, limit: 100, orderAsc: true, types: [] };

describe('SandboxEventStore', () => {
  it('stores the API events in E2B shape, newest first by default, filtered by sandbox and type', () => {
    let now = Date.parse('2030-01-01T00:00:00Z');
    const seen: SandboxEvent[] = [];
    const store = new SandboxEventStore(openStateDb(':memory:', sandboxEventMigrations), {
      teamId: 'team',
      now: () => now,
      onEvent: (e) => seen.push(e),
    });
    now += 1000;
    store.onLifecycle(ev('a', 'created'));
    now += 1000;
    store.onLifecycle(ev('a', 'restored')); // not an API event
    now += 1000;
    store.onLifecycle(ev('a', 'paused', { kind: 'memory', cause: 'timeout', reason: 'ignored' }));
    now += 1000;
    store.onLifecycle(ev('b', 'created', { forkedFrom: 'a' }));
    now += 1000;
    store.onLifecycle(ev('a', 'forked', { fork: 'b' }));
    now += 1000;
    store.onLifecycle(ev('a', 'resumed', { kind: 'memory' }));
    now += 1000;
    store.onLifecycle(ev('a', 'snapshotted', { snapshotID: 's' }));
    now += 1000;
    store.onLifecycle(ev('a', 'killed', { cause: 'timeout' }));
    now += 1000;
    store.onLifecycle(ev('b', 'lost'));
    expect(seen).toHaveLength(8);
    const a = store.list({ ...all, sandboxId: 'a' });
    expect(a.map((e) => [e.type, e.eventData])).toEqual([
      ['sandbox.lifecycle.created', null],
      ['sandbox.lifecycle.paused', { kind: 'memory', cause: 'timeout' }],
      ['sandbox.lifecycle.updated', { fork: 'b' }],
      ['sandbox.lifecycle.resumed', { kind: 'memory' }],
      ['sandbox.lifecycle.checkpointed', { snapshotID: 's' }],
      ['sandbox.lifecycle.killed', { cause: 'timeout' }],
    ]);
    expect(a[0]).toEqual({
      version: 'v1',
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      type: 'sandbox.lifecycle.created',
      eventData: null,
      sandboxBuildId: 'tpl',
      sandboxExecutionId: 'inst',
      sandboxId: 'a',
      sandboxTeamId: 'team',
      sandboxTemplateId: 'tpl',
      timestamp: '2030-01-01T00:00:01.000Z',
    });
    expect(store.list({ ...all, sandboxId: 'b' }).map((e) => e.eventData)).toEqual([
      { forkedFrom: 'a' },
      { cause: 'lost' },
    ]);
    const newest = store.list({ offset: 1, limit: 2, orderAsc: false, types: [] });
    expect(newest.map((e) => e.type)).toEqual(['sandbox.lifecycle.killed', 'sandbox.lifecycle.checkpointed']);
    const kills = store.list({ ...all, types: ['sandbox.lifecycle.killed', 'sandbox.lifecycle.created'] });
    expect(kills.map((e) => `${e.sandboxId}:${e.type}`)).toEqual([
      'a:sandbox.lifecycle.created',
      'b:sandbox.lifecycle.created',
      'a:sandbox.lifecycle.killed',
      'b:sandbox.lifecycle.killed',
    ]);
  });

  it('keeps events for the retention and at most the cap', () => {
    let now = 0;
    const db = openStateDb(':memory:', sandboxEventMigrations);
    const store = new SandboxEventStore(db, {
      teamId: 't',
      now: () => now,
      retentionMs: 10_000,
      maxEvents: 3,
    });
    for (let i = 0; i < 5; i++) {
      now += 1000;
      store.onLifecycle(ev(`s${i}`, 'created'));
    }
    store.prune();
    expect(store.list(all).map((e) => e.sandboxId)).toEqual(['s2', 's3', 's4']);
    now += 8500; // s2 (at 3 s) is now past the 10 s retention, s3 (at 4 s) is not
    expect(store.list(all).map((e) => e.sandboxId)).toEqual(['s3', 's4']);
    store.prune();
    expect((db.prepare('SELECT COUNT(*) AS n FROM sandbox_events').get() as { n: number }).n).toBe(2);
  });
});
