import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeStatus } from '@aenv/protocol';
import { SharedNodes, pausedRecord, quietLogger } from '../backend/testing/shared-nodes.js';
import { clusterView, UnheldRetention, type ClusterView } from './unheld-retention.js';

const node = (nodeId: string) => ({ nodeId });
const seen = (nodeId: string, status: NodeStatus) => ({ nodeId, snapshot: { status } });

describe('who lists its own sandboxes, and who sweeps those no node holds', () => {
  it('a discovered node lists its own unless its heartbeats stopped; the sweeper is the first up and not draining', () => {
    const view = clusterView(
      [node('n3'), node('n1'), node('n2'), node('n4'), node('n0')],
      [
        seen('n0', NodeStatus.UNHEALTHY),
        seen('n1', NodeStatus.LINGERING),
        seen('n2', NodeStatus.READY),
        seen('n3', NodeStatus.READY),
        // Heartbeats of a node no longer discovered count for nothing.
        seen('gone', NodeStatus.READY),
      ],
    );
    // n4 never sent a heartbeat: nothing says it is lost.
    expect([...view.listed].sort()).toEqual(['n1', 'n2', 'n3', 'n4']);
    expect(view.sweeper).toBe('n2');
    expect(clusterView([node('a')], [seen('a', NodeStatus.LINGERING)])).toEqual({
      listed: new Set(['a']),
      sweeper: undefined,
    });
    expect(clusterView([], [])).toEqual({ listed: new Set(), sweeper: undefined });
  });
});

describe('the paused retention of sandboxes no node holds', () => {
  let nodes: SharedNodes;
  beforeEach(async () => {
    nodes = await SharedNodes.create();
  });
  afterEach(async () => {
    await nodes.close();
  });
  const ago = (secs: number) => new Date(Date.now() - secs * 1000).toISOString();

  it('the sweeper kills those past their retention; a node up and holding its own is never touched', async () => {
    const lost = nodes.node('node-lost', { retentionSecs: 60 });
    const up = nodes.node('node-up', { retentionSecs: 60 });
    const sweeper = nodes.node('node-s');
    await nodes.pauseOn(lost, 'old', { pausedAt: ago(120) });
    await nodes.pauseOn(lost, 'young', { pausedAt: ago(10) });
    await nodes.pauseOn(up, 'held', { pausedAt: ago(120) });
    let view: ClusterView = { listed: new Set(['node-up', 'node-s']), sweeper: 'node-up' };
    const killed: string[] = [];
    const retention = new UnheldRetention({
      nodeId: 'node-s',
      repository: sweeper.repository,
      fallbackRetentionMs: 0,
      view: async () => view,
      onKilled: (p) => killed.push(`${p.sandbox.id} (${p.node})`),
      logger: quietLogger,
      intervalMs: 1000,
    });
    // Another node sweeps: this one does nothing.
    expect(await retention.sweep()).toEqual([]);
    view = { ...view, sweeper: 'node-s' };
    expect(await retention.sweep()).toEqual(['old']);
    expect(killed).toEqual(['old (node-lost)']);
    expect(await sweeper.repository.readClaim('old')).toMatchObject({ owner: 'node-s', state: 'killed' });
    expect(await sweeper.repository.list({ kind: 'paused', sandboxId: 'old' })).toEqual([]);
    // The young one stays, so does the one its node holds (past the retention too: that node applies it).
    for (const id of ['young', 'held'])
      expect(await sweeper.repository.list({ kind: 'paused', sandboxId: id, committed: true })).toHaveLength(
        1,
      );
    expect(await sweeper.repository.readClaim('held')).toMatchObject({ owner: 'node-up', state: 'paused' });
    // Once node-up is lost, its pause is held by no node: expired, it goes too.
    view = { listed: new Set(['node-s']), sweeper: 'node-s' };
    expect(await retention.sweep()).toEqual(['held']);
    expect(await retention.sweep()).toEqual([]);
  });

  it('a drain’s hand-over is swept while its node is up; 0 (recorded or not) keeps; a failing view sweeps nothing', async () => {
    const drained = nodes.node('node-d', { retentionSecs: 30 });
    const keeper = nodes.node('node-k', { retentionSecs: 0 });
    const legacy = nodes.node('node-l');
    await nodes.pauseOn(drained, 'handed', { pausedAt: ago(60) });
    await nodes.pauseOn(keeper, 'kept', { pausedAt: ago(3600) });
    await nodes.pauseOn(legacy, 'legacy', { pausedAt: ago(3600) });
    expect(await drained.sharing.handOver(pausedRecord('handed'))).toBe(true);
    const view: ClusterView = { listed: new Set(['node-d', 'node-s']), sweeper: 'node-s' };
    const make = (fallbackRetentionMs: number, v: () => Promise<ClusterView>) =>
      new UnheldRetention({
        nodeId: 'node-s',
        repository: drained.repository,
        fallbackRetentionMs,
        view: v,
        logger: quietLogger,
        intervalMs: 1000,
      });
    // The failing view first: nothing happens (the timer logs it and tries again).
    await expect(make(1, () => Promise.reject(new Error('scheduler down'))).sweep()).rejects.toThrow(
      'scheduler down',
    );
    // node-k recorded 0; node-l recorded nothing (this node's setting, 0, applies).
    expect(await make(0, async () => view).sweep()).toEqual(['handed']);
    const kept = { listed: new Set(['node-s']), sweeper: 'node-s' };
    expect(await make(0, async () => kept).sweep()).toEqual([]);
    // With a setting of its own, the sweeping node expires the one that recorded none.
    expect(await make(60_000, async () => kept).sweep()).toEqual(['legacy']);
  });
});
