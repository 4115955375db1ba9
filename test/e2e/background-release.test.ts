// What a pause and a kill leave to the background (docs/benchmarks.md, "Where the time goes"): the release of a
// paused sandbox's memory and the teardown of a killed sandbox's network slot. The node holds both back
// (`AENV_FAULT_RELEASE_DELAY_MS`, `AENV_FAULT_TEARDOWN_DELAY_MS`), so "the answer came first" and a crash in
// between are deterministic, not a matter of timing.
import { describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { NO_HOST_OBJECTS, eventually, hostObjects, strayHostObjects } from './harness.js';
import { describeNode } from './fixture.js';

const RELEASED = 'released the memory of a paused sandbox';

describe('work a pause or a kill leaves to the background', () => {
  const { server, track } = describeNode({
    name: 'bgrel',
    toml: '[orchestrator]\nresident_pause_grace_secs = 0',
    env: { AENV_FAULT_RELEASE_DELAY_MS: '8000', AENV_FAULT_TEARDOWN_DELAY_MS: '8000' },
  });
  const releasedLines = (id: string) =>
    server
      .logs()
      .split('\n')
      .filter((l) => l.includes(RELEASED) && l.includes(id));
  const slotChains = () => new Set(hostObjects(server).slotChains);
  const netnsOf = (chain: string) => `${server.prefix}-ns-${chain.slice('slot'.length)}`;

  /** A sandbox with a file and a background process (its PID survives only a memory restore). */
  const withState = async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    await sbx.files.write('kept.txt', 'before the pause');
    const sleeper = await sbx.commands.run('sleep 3600', { background: true });
    await sleeper.disconnect();
    return { sbx, pid: sleeper.pid };
  };
  const expectKept = async (id: string, pid: number) => {
    const resumed = await Sandbox.connect(id, { timeoutMs: 300_000 });
    expect(await resumed.files.read('kept.txt')).toBe('before the pause');
    expect((await resumed.commands.list()).map((p) => p.pid)).toContain(pid);
    expect((await resumed.commands.run('echo ok; hostname; cat /etc/hostname')).stdout).toBe(
      `ok\n${id}\n${id}\n`,
    );
  };

  it('a resume right after the pause is not held behind the release of the paused memory', async () => {
    const { sbx, pid } = await withState();
    const id = sbx.sandboxId;
    expect((await server.api('POST', `/sandboxes/${id}/pause`)).status).toBe(204);
    const resumed = await server.api('POST', `/sandboxes/${id}/connect`, { timeout: 300 });
    expect(resumed.status).toBe(201);
    // The release was still held back when the resume answered: the resume did not wait for it.
    expect(releasedLines(id)).toEqual([]);
    expect(resumed.headers.get('server-timing') ?? '').not.toContain('release-memory');
    // The restore runs beside the old container, which is still there until its release.
    expect(hostObjects(server).runcContainers).toEqual(expect.arrayContaining([id, `${id}-r1`]));
    await expectKept(id, pid);
    await eventually(() => releasedLines(id).length === 1, 'the release of the paused memory');
    expect(hostObjects(server).runcContainers).not.toContain(id);

    // Paused and resumed again: the old container (`-r1`) is released as the first was, the new one is the id's.
    expect((await server.api('POST', `/sandboxes/${id}/pause`)).status).toBe(204);
    expect((await server.api('POST', `/sandboxes/${id}/connect`, { timeout: 300 })).status).toBe(201);
    expect(releasedLines(id)).toHaveLength(1);
    await expectKept(id, pid);
    await eventually(() => releasedLines(id).length === 2, 'the second release');
    expect(hostObjects(server).runcContainers.filter((c) => c.startsWith(id))).toEqual([id]);
  });

  it('a crash while the release is pending loses nothing: paused, or resumed beside it', async () => {
    const paused = await withState();
    const resumed = await withState();
    for (const { sbx } of [paused, resumed])
      expect((await server.api('POST', `/sandboxes/${sbx.sandboxId}/pause`)).status).toBe(204);
    expect(
      (await server.api('POST', `/sandboxes/${resumed.sbx.sandboxId}/connect`, { timeout: 300 })).status,
    ).toBe(201);
    expect(releasedLines(paused.sbx.sandboxId)).toEqual([]);
    await server.crash();
    await server.restart();
    expect((await server.api('GET', `/sandboxes/${paused.sbx.sandboxId}`)).body).toMatchObject({
      state: 'paused',
    });
    expect((await server.api('GET', `/sandboxes/${resumed.sbx.sandboxId}`)).body).toMatchObject({
      state: 'running',
    });
    // The restart removed the old containers; both sandboxes have their memory.
    expect(hostObjects(server).runcContainers).toEqual([`${resumed.sbx.sandboxId}-r1`]);
    await expectKept(resumed.sbx.sandboxId, resumed.pid);
    await expectKept(paused.sbx.sandboxId, paused.pid);
    expect(await strayHostObjects(server)).toEqual([]);
  });

  it('a kill answers before its slot is torn down; the slot is not handed out again before it is clean', async () => {
    const before = slotChains();
    const first = await Sandbox.create({ timeoutMs: 300_000 });
    const [chain] = [...slotChains()].filter((c) => !before.has(c));
    expect(chain).toBeDefined();
    expect((await server.api('DELETE', `/sandboxes/${first.sandboxId}`)).status).toBe(204);
    expect((await server.api('GET', `/sandboxes/${first.sandboxId}`)).status).toBe(404);
    expect(hostObjects(server).runcContainers).not.toContain(first.sandboxId);
    // Its netns is still there, being torn down in the background, and the next sandbox gets another slot.
    expect(hostObjects(server).netnsFiles).toContain(netnsOf(chain!));
    const second = track(await Sandbox.create({ timeoutMs: 300_000 }));
    expect([...slotChains()].filter((c) => !before.has(c) && c !== chain)).toHaveLength(1);
    await eventually(
      () => !hostObjects(server).netnsFiles.includes(netnsOf(chain!)),
      'the killed sandbox slot to be torn down',
    );
    expect((await second.commands.run('echo ok')).stdout).toBe('ok\n');
  });

  it('a stop right after kills waits for their teardowns; a crash in the middle of one is cleaned at restart', async () => {
    const killed = await Promise.all([1, 2].map(() => Sandbox.create({ timeoutMs: 300_000 })));
    for (const s of killed)
      expect((await server.api('DELETE', `/sandboxes/${s.sandboxId}`)).status).toBe(204);
    expect(await server.stop()).toBe(0);
    expect(hostObjects(server)).toEqual(NO_HOST_OBJECTS);
    await server.restart();

    const crashed = await Sandbox.create({ timeoutMs: 300_000 });
    expect((await server.api('DELETE', `/sandboxes/${crashed.sandboxId}`)).status).toBe(204);
    expect(hostObjects(server).netnsFiles.length).toBeGreaterThan(0);
    await server.crash();
    await server.restart();
    expect(await strayHostObjects(server)).toEqual([]);
    const again = track(await Sandbox.create({ timeoutMs: 300_000 }));
    expect((await again.commands.run('echo ok')).stdout).toBe('ok\n');
  });
});
