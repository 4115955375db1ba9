// Lifecycle answers carry their phases as `Server-Timing` (docs/benchmarks.md#phases): what a create, pause,
// resume, fork and kill spent in each step, from a real node.
import { describe, expect, it } from 'vitest';
import { parseServerTiming } from '../../packages/node/src/util/phases.js';
import { describeNode } from './fixture.js';

/** Phases measured inside another phase (docs/benchmarks.md#phases): their time is already in their parent's. */
// Parts of another phase (docs/benchmarks.md#phases): policy-nft of the step that applied the policy, the name-*
// of a rename, the container driver's rt-* of runtime (or checkpoint).
const SUB_PHASES = new Set([
  'policy-nft',
  'name-files',
  'name-uts',
  'rt-disk',
  'rt-userns',
  'rt-mount',
  'rt-runc',
  'rt-criu',
  'rt-detach',
  'restore-wait',
]);

describe('Server-Timing on lifecycle answers', () => {
  const { server } = describeNode({ name: 'timing' });

  const phasesOf = (headers: Headers) => {
    const h = headers.get('server-timing');
    expect(h, 'a Server-Timing header').toBeTruthy();
    const list = parseServerTiming(h!);
    expect(list.at(-1)!.name).toBe('total');
    return list;
  };
  const names = (headers: Headers) => phasesOf(headers).map((p) => p.name);

  it('names the steps of a create, pause, resume, fork and kill; their sum stays within the total', async () => {
    const created = await server.api('POST', '/sandboxes', { templateID: 'base', timeout: 120 });
    expect(created.status).toBe(201);
    const id = (created.body as { sandboxID: string }).sandboxID;
    const createPhases = phasesOf(created.headers);
    expect(createPhases.map((p) => p.name)).toEqual(
      expect.arrayContaining([
        'slot',
        'image-lease',
        'uid-range',
        'spec',
        'runtime',
        'rt-mount',
        'rt-runc',
        'policy',
        'envd-healthy',
        'envd-init',
        'total',
      ]),
    );
    // A cold create's steps run one after another; `policy-nft` is part of the step that applied the policy
    // (docs/benchmarks.md#phases), not time of its own.
    const total = createPhases.at(-1)!.ms;
    const steps = createPhases
      .slice(0, -1)
      .filter((p) => !SUB_PHASES.has(p.name))
      .reduce((n, p) => n + p.ms, 0);
    expect(steps).toBeLessThanOrEqual(total + 1);

    const paused = await server.api('POST', `/sandboxes/${id}/pause`);
    expect(paused.status).toBe(204);
    expect(names(paused.headers)).toEqual(
      expect.arrayContaining(['lock-wait', 'freeze', 'checkpoint', 'rt-criu', 'sync']),
    );

    const resumed = await server.api('POST', `/sandboxes/${id}/connect`, { timeout: 120 });
    expect(resumed.status).toBeLessThan(300);
    // Still resident right after the pause: a thaw.
    expect(names(resumed.headers)).toContain('thaw');

    const forked = await server.api('POST', `/sandboxes/${id}/fork`, { count: 2 });
    expect(forked.status).toBeLessThan(300);
    const forkPhases = phasesOf(forked.headers);
    expect(forkPhases.find((p) => p.name === 'checkpoint')?.runs).toBe(1);
    expect(forkPhases.find((p) => p.name === 'runtime')?.runs).toBe(2);
    // One dump, then one restore per child.
    expect(forkPhases.find((p) => p.name === 'rt-criu')?.runs).toBe(3);
    // Each child's restore took its turn ([limits].max_concurrent_restores), then left the host's mount table.
    expect(forkPhases.find((p) => p.name === 'restore-wait')?.runs).toBe(2);
    expect(forkPhases.find((p) => p.name === 'rt-detach')?.runs).toBe(2);

    const killed = await server.api('DELETE', `/sandboxes/${id}`);
    expect(killed.status).toBe(204);
    expect(names(killed.headers)).toEqual(expect.arrayContaining(['destroy', 'discard']));
    // The slot is torn down after the answer (docs/benchmarks.md#phases).
    expect(names(killed.headers)).not.toContain('slot');
  });

  it('answers a refused create with the steps it ran (the template lookup) and its total, and a list with none', async () => {
    const missing = await server.api('POST', '/sandboxes', { templateID: 'no-such-template' });
    expect(missing.status).toBe(404);
    expect(names(missing.headers)).toEqual(['template', 'total']);
    const listed = await server.api('GET', '/v2/sandboxes');
    expect(listed.headers.get('server-timing')).toBeNull();
  });
});
