// Lifecycle answers carry their phases as `Server-Timing` (docs/benchmarks.md#phases): what a create, pause,
// resume, fork and kill spent in each step, from a real node.
import { describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
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
  'rt-writeback',
  'rt-commit',
  'restore-wait',
]);

describe('Server-Timing on lifecycle answers', () => {
  const { server, track } = describeNode({ name: 'timing' });

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
        'limits',
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
    // The images are committed on their own (a subvolume of the node's btrfs volume), so `sync` only writes
    // the commit marker.
    expect(names(paused.headers)).toEqual(
      expect.arrayContaining(['lock-wait', 'freeze', 'checkpoint', 'rt-criu', 'rt-commit', 'sync']),
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

  it("a pause of a sandbox holding 96 MB writes its images back during the dump; an idle one's does not", async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 120_000 }));
    const idle = await server.api('POST', `/sandboxes/${sbx.sandboxId}/pause`);
    expect(idle.status).toBe(204);
    expect(names(idle.headers)).not.toContain('rt-writeback');
    const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 });
    const hold = `import time; b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096]); open('/tmp/held', 'w').write('1'); time.sleep(600)`;
    await resumed.commands.run(`python3 -c "${hold}"`, { background: true, timeoutMs: 0 });
    await expect
      .poll(async () => resumed.files.exists('/tmp/held'), { timeout: 30_000, interval: 100 })
      .toBe(true);
    const held = await server.api('POST', `/sandboxes/${sbx.sandboxId}/pause`);
    expect(held.status).toBe(204);
    const phases = phasesOf(held.headers);
    expect(phases.map((p) => p.name)).toEqual(expect.arrayContaining(['rt-criu', 'rt-writeback', 'sync']));
    // Part of the checkpoint step, not time of its own.
    const at = (n: string) => phases.find((p) => p.name === n)!.ms;
    expect(at('rt-criu') + at('rt-writeback')).toBeLessThanOrEqual(at('checkpoint') + 1);
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 });
    // The process holding the memory came through the pause.
    expect((await again.commands.run('pgrep -x python3')).stdout.trim()).toMatch(/^\d+$/);
  });

  it('answers a refused create with the steps it ran (the template lookup) and its total, and a list with none', async () => {
    const missing = await server.api('POST', '/sandboxes', { templateID: 'no-such-template' });
    expect(missing.status).toBe(404);
    expect(names(missing.headers)).toEqual(['template', 'total']);
    const listed = await server.api('GET', '/v2/sandboxes');
    expect(listed.headers.get('server-timing')).toBeNull();
  });
});
