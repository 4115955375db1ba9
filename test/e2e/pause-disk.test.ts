// Pause and resume from disk: a server with `resident_pause_grace_secs = 0` releases a paused sandbox's memory at
// once, so every resume is a CRIU restore into a fresh slot (pause.test.ts covers the resident thaw).
import { describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  ENVD_PORT,
  counterPasses,
  eventually,
  hostObjects,
  proxyFetch,
  readWorkload,
  startWorkload,
  storeDir,
  workloadFetch,
  type Workload,
} from './harness.js';
import { describeNode } from './fixture.js';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

describe('pause and resume from disk (no resident grace)', () => {
  const { server, track, trackId } = describeNode({
    name: 'pdisk',
    toml: '[orchestrator]\nresident_pause_grace_secs = 0',
  });
  const info = async (id: string) => (await server.api('GET', `/sandboxes/${id}`)).body;

  const expectWorkloadKept = async (sbx: Sandbox, w: Workload, counterBefore: number) => {
    const view = await readWorkload(sbx, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
    expect(view.counter).toBeGreaterThanOrEqual(counterBefore);
    await counterPasses(sbx, w, view.counter);
    expect(await workloadFetch(server, sbx.sandboxId, '/secret')).toEqual({ status: 200, body: w.secret });
    expect(await workloadFetch(server, sbx.sandboxId, '/index.txt')).toEqual({ status: 200, body: w.file });
    expect((await sbx.commands.list()).map((p) => p.pid)).toEqual(
      expect.arrayContaining([w.counterPid, w.serverPid]),
    );
  };

  /**
   * While paused from disk, nothing of the sandbox runs on the host: no container, cgroup, sandbox dir. The
   * pause answers once it is durable; the frozen container is released right after, in the background.
   */
  const expectReleased = async (id: string) => {
    expect(existsSync(join(storeDir(server), 'paused', id, 'complete'))).toBe(true);
    await eventually(() => {
      const o = hostObjects(server);
      return (
        !o.runcContainers.includes(id) &&
        !o.cgroups.some((c) => c.endsWith(`/${id}`)) &&
        !o.mounts.some((m) => m.includes(id))
      );
    }, `the memory of ${id} to be released`);
  };

  it('restores files, env, the background process (same PID) and its listening socket', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000, envs: { FROM_CREATE: 'kept-env' } }));
    const w = await startWorkload(server, sbx);
    await sbx.files.write('notes/a.txt', 'written before the pause');
    const counterBefore = (await readWorkload(sbx, w)).counter;

    expect(await sbx.betaPause()).toBe(true);
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    await expectReleased(sbx.sandboxId);
    expect((await workloadFetch(server, sbx.sandboxId, '/secret')).status).toBe(410);

    const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 });
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'running' });
    // Under its own id, or as <id>-rN when the released container's slot teardown was still finishing (by design:
    // a resume never waits for a release, docs/benchmarks.md "Resume and kill without the background work").
    expect(
      hostObjects(server).runcContainers.filter(
        (c) => c === sbx.sandboxId || c.startsWith(`${sbx.sandboxId}-r`),
      ),
    ).toHaveLength(1);
    // The artifacts are consumed by the resume.
    expect(existsSync(join(storeDir(server), 'paused', sbx.sandboxId))).toBe(false);
    expect(await resumed.files.read('notes/a.txt')).toBe('written before the pause');
    expect((await resumed.commands.run('echo "$FROM_CREATE"; hostname')).stdout).toBe(
      `kept-env\n${sbx.sandboxId}\n`,
    );
    await expectWorkloadKept(resumed, w, counterBefore);
    // Files written after the resume land on the restored disk.
    await resumed.files.write('notes/b.txt', 'after');
    expect((await resumed.commands.run('cat notes/a.txt notes/b.txt')).stdout).toBe(
      'written before the pauseafter',
    );
  });

  it('restores a restored sandbox again: three pause/connect cycles, the count goes on', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    const w = await startWorkload(server, sbx);
    for (let cycle = 0; cycle < 3; cycle++) {
      await sbx.files.write(`cycles/${cycle}`, String(cycle));
      const counterBefore = (await readWorkload(sbx, w)).counter;
      expect(await Sandbox.pause(sbx.sandboxId)).toBe(true);
      await expectReleased(sbx.sandboxId);
      await sbx.connect();
      await expectWorkloadKept(sbx, w, counterBefore);
    }
    expect((await sbx.commands.run('cat cycles/0 cycles/1 cycles/2')).stdout).toBe('012');
  });

  it('a secure sandbox keeps its envd token across the restore (connect and deprecated /resume)', async () => {
    const raw = await server.api('POST', '/sandboxes', { templateID: 'base', secure: true, timeout: 300 });
    expect(raw.status).toBe(201);
    const id = raw.body.sandboxID as string;
    trackId(id);
    const token = raw.body.envdAccessToken as string;
    expect(token).toMatch(/.+/);
    const sbx = await Sandbox.connect(id);
    const w = await startWorkload(server, sbx);
    const authed = (t: string) =>
      proxyFetch(server, id, ENVD_PORT, '/files?path=/home/user/wl/www/index.txt', {
        headers: { 'X-Access-Token': t },
      });
    expect((await authed(token)).status).toBe(200);
    expect((await authed('wrong')).status).toBe(401);

    expect((await server.api('POST', `/sandboxes/${id}/pause`)).status).toBe(204);
    await expectReleased(id);
    const connected = await server.api('POST', `/sandboxes/${id}/connect`, { timeout: 300 });
    expect(connected.status).toBe(201);
    expect(connected.body).toMatchObject({ sandboxID: id, envdAccessToken: token });
    const file = await authed(token);
    expect(file.status).toBe(200);
    expect(await file.text()).toBe(w.file);
    expect((await authed('wrong')).status).toBe(401);
    await expectWorkloadKept(sbx, w, 0);

    expect((await server.api('POST', `/sandboxes/${id}/pause`)).status).toBe(204);
    const resumed = await server.api('POST', `/sandboxes/${id}/resume`, { timeout: 300 });
    expect(resumed.status).toBe(201);
    expect(resumed.body).toMatchObject({ sandboxID: id, envdAccessToken: token });
    expect((await authed(token)).status).toBe(200);
    await expectWorkloadKept(sbx, w, 0);
  });

  it('a filesystem-only pause and a reboot connect both boot the saved disk', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    const w = await startWorkload(server, sbx);
    await sbx.pause({ keepMemory: false });
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'filesystem' });
    await expectReleased(sbx.sandboxId);
    await sbx.connect();
    expect(await readWorkload(sbx, w)).toMatchObject({
      counterAlive: false,
      serverAlive: false,
      file: w.file,
    });

    const again = await startWorkload(server, sbx);
    await sbx.pause();
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' });
    expect(await readWorkload(sbx, again)).toMatchObject({
      counterAlive: false,
      serverAlive: false,
      file: again.file,
    });
  });
  it('auto-resume through the proxy restores a released sandbox from disk', async () => {
    const sbx = track(
      await Sandbox.create({ timeoutMs: 300_000, lifecycle: { onTimeout: 'pause', autoResume: true } }),
    );
    const w = await startWorkload(server, sbx);
    const counterBefore = (await readWorkload(sbx, w)).counter;
    await sbx.pause();
    await expectReleased(sbx.sandboxId);
    const answers = await Promise.all(
      Array.from({ length: 3 }, () => workloadFetch(server, sbx.sandboxId, '/secret')),
    );
    expect(answers).toEqual(Array.from({ length: 3 }, () => ({ status: 200, body: w.secret })));
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'running' });
    await expectWorkloadKept(sbx, w, counterBefore);
  });
});
