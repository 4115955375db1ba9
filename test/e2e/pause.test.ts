// Pause and resume through the real e2b SDK against a real server with the default resident grace: a paused
// sandbox stays frozen in memory, so these resumes are thaws (pause-disk.test.ts covers the restore from disk).
// Also filesystem-only pauses, timeouts that pause or kill, and auto-resume through the proxy.
import { describe, expect, it } from 'vitest';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Sandbox, SandboxNotFoundError } from 'e2b';
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

describe('pause and resume (resident) through the e2b SDK', () => {
  const { server, track, trackId } = describeNode({ name: 'pause' });
  const info = async (id: string) => (await server.api('GET', `/sandboxes/${id}`)).body;
  /** The envd token header of a sandbox (the SDK's are all secured; the proxy checks it before anything). */
  const envdToken = async (id: string) => ({
    'x-access-token': (await info(id)).envdAccessToken as string,
  });
  const nodeCounters = async () => {
    const nodes = await server.api('GET', '/nodes');
    expect(nodes.status).toBe(200);
    return nodes.body[0];
  };
  /** Waits for a pause that something else started (a timeout) to complete: `pauseKind` appears once it is durable. */
  const waitPaused = (id: string) =>
    eventually(async () => (await info(id)).pauseKind !== undefined, `${id} to be paused`, 150, 100);
  const listIds = async (query: string) =>
    ((await server.api('GET', `/v2/sandboxes${query}`)).body as { sandboxID: string }[]).map(
      (s) => s.sandboxID,
    );

  /** Everything the workload had before the pause is there after the resume, and its processes run on. */
  const expectWorkloadKept = async (sbx: Sandbox, w: Workload, counterBefore: number) => {
    const view = await readWorkload(sbx, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
    // Not restarted: the count goes on from where it was (a restarted loop would begin at 1).
    expect(view.counter).toBeGreaterThanOrEqual(counterBefore);
    await counterPasses(sbx, w, view.counter);
    expect(await workloadFetch(server, sbx.sandboxId, '/secret')).toEqual({ status: 200, body: w.secret });
    expect(await workloadFetch(server, sbx.sandboxId, '/index.txt')).toEqual({ status: 200, body: w.file });
    // The envd that started the background commands is the same one: it still lists them.
    const pids = (await sbx.commands.list()).map((p) => p.pid);
    expect(pids).toEqual(expect.arrayContaining([w.counterPid, w.serverPid]));
  };

  it('keeps files, env, the background process and its listening socket across betaPause and connect', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000, envs: { FROM_CREATE: 'kept-env' } }));
    const w = await startWorkload(server, sbx);
    const before = await nodeCounters();
    expect(before).toMatchObject({ sandboxCount: 1, sandboxPausedCount: 0 });
    expect(before.metrics).toMatchObject({ pausedAllocatedCPU: 0, pausedAllocatedMemoryBytes: 0 });

    const counterBefore = (await readWorkload(sbx, w)).counter;
    expect(await sbx.betaPause()).toBe(true);

    const paused = await info(sbx.sandboxId);
    expect(paused).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    // Resident: the frozen container is still on the host.
    expect(hostObjects(server).runcContainers).toContain(sbx.sandboxId);
    expect(await listIds('?state=paused')).toEqual([sbx.sandboxId]);
    expect(await listIds('?state=running')).toEqual([]);
    const sdkListed = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
    expect(sdkListed.map((s) => [s.sandboxId, s.state])).toEqual([[sbx.sandboxId, 'paused']]);
    const during = await nodeCounters();
    expect(during).toMatchObject({ sandboxCount: 0, sandboxPausedCount: 1, sandboxStartingCount: 0 });
    expect(during.metrics).toMatchObject({
      pausedAllocatedCPU: paused.cpuCount,
      pausedAllocatedMemoryBytes: paused.memoryMB * 1024 * 1024,
      allocatedCPU: 0,
    });
    // Without autoResume the data plane does not wake it up.
    expect((await workloadFetch(server, sbx.sandboxId, '/secret')).status).toBe(410);

    const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 });
    expect(resumed.sandboxId).toBe(sbx.sandboxId);
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'running', startedAt: paused.startedAt });
    expect((await resumed.commands.run('echo "$FROM_CREATE"; hostname')).stdout).toBe(
      `kept-env\n${sbx.sandboxId}\n`,
    );
    await expectWorkloadKept(resumed, w, counterBefore);
    // The old handle works again too (same id and tokens).
    expect(await sbx.isRunning()).toBe(true);
    expect(await nodeCounters()).toMatchObject({ sandboxCount: 1, sandboxPausedCount: 0 });
  });

  // Paused here and resumed by the last test of the file, after the other tests gave the 30 s grace time to pass.
  let lingering: { sbx: Sandbox; w: Workload; counter: number } | undefined;
  it('a paused sandbox stays frozen in memory during the grace (checked again at the end of the file)', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    const w = await startWorkload(server, sbx);
    const counter = (await readWorkload(sbx, w)).counter;
    await sbx.pause();
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    expect(hostObjects(server).runcContainers).toContain(sbx.sandboxId);
    const dir = join(storeDir(server), 'paused', sbx.sandboxId);
    expect(existsSync(join(dir, 'complete'))).toBe(true);
    // Its images are a btrfs subvolume of their own (committed alone: docs/runtime.md#durable-pause), and the
    // snapshot that committed them is gone.
    expect(statSync(join(dir, 'memory')).ino).toBe(256);
    expect(readdirSync(dir).sort()).toEqual(['complete', 'disk', 'memory']);
    lingering = { sbx, w, counter };
  });

  it('pauses again with the static Sandbox.pause, and the counter keeps going over several cycles', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    const w = await startWorkload(server, sbx);
    for (let cycle = 0; cycle < 3; cycle++) {
      const counterBefore = (await readWorkload(sbx, w)).counter;
      expect(await Sandbox.pause(sbx.sandboxId)).toBe(true);
      expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
      await sbx.connect();
      await expectWorkloadKept(sbx, w, counterBefore);
    }
  });

  it('is idempotent on a paused sandbox; other operations on it answer 409/400; gone ones 404', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    const id = sbx.sandboxId;
    expect((await server.api('POST', `/sandboxes/${id}/pause`)).status).toBe(204);
    // A second pause changes nothing: 204 (docs/differences.md), and the sandbox stays paused with its memory.
    expect((await server.api('POST', `/sandboxes/${id}/pause`, {})).status).toBe(204);
    expect(await info(id)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    // The SDK sees a 204 as "paused" and does not throw.
    await expect(Sandbox.pause(id)).resolves.toBeTypeOf('boolean');
    expect(await info(id)).toMatchObject({ state: 'paused', pauseKind: 'memory' });

    const fork = await server.api('POST', `/sandboxes/${id}/fork`, { count: 1 });
    expect(fork.status).toBe(409);
    expect(fork.body).toEqual({ code: 409, message: 'sandbox cannot be forked from paused state' });
    const net = await server.api('PUT', `/sandboxes/${id}/network`, {});
    expect(net.status).toBe(409);
    const snap = await server.api('POST', `/sandboxes/${id}/snapshots`, {});
    expect(snap.status).toBe(400);
    expect(snap.body.message).toMatch(/cannot be snapshotted from paused state/);
    const timeout = await server.api('POST', `/sandboxes/${id}/timeout`, { timeout: 60 });
    expect(timeout.body.code).toBe(400);

    // Two connects at once: one resumes it (201), the other finds it running (200).
    const both = await Promise.all([
      server.api('POST', `/v2/sandboxes/${id}/connect`, { timeout: 120 }),
      server.api('POST', `/v2/sandboxes/${id}/connect`, { timeout: 120 }),
    ]);
    expect(both.map((r) => r.status).sort()).toEqual([200, 201]);
    // Two pauses at once: both succeed, one pause happens.
    const pauses = await Promise.all([
      server.api('POST', `/sandboxes/${id}/pause`),
      server.api('POST', `/sandboxes/${id}/pause`),
    ]);
    expect(pauses.map((r) => r.status)).toEqual([204, 204]);
    expect(await info(id)).toMatchObject({ state: 'paused', pauseKind: 'memory' });

    // The deprecated /resume resumes it (201), and answers 201 on a running one too.
    const resumed = await server.api('POST', `/sandboxes/${id}/resume`, { timeout: 120 });
    expect(resumed.status).toBe(201);
    expect(resumed.body.sandboxID).toBe(id);
    expect((await server.api('POST', `/sandboxes/${id}/resume`, { timeout: 120 })).status).toBe(201);
    // Connect on a running sandbox is a keep-alive: 200.
    expect((await server.api('POST', `/v2/sandboxes/${id}/connect`, { timeout: 60 })).status).toBe(200);

    // Pause while a fork of it is in progress: 409 (the fork holds it in the forking state).
    let conflict: number | undefined;
    for (let attempt = 0; attempt < 3 && conflict === undefined; attempt++) {
      const forking = server.api('POST', `/sandboxes/${id}/fork`, { count: 1, timeout: 60 });
      await eventually(async () => (await info(id)).state === 'paused', 'the fork to start', 400, 10).catch(
        () => {},
      );
      const p = await server.api('POST', `/sandboxes/${id}/pause`);
      const forked = await forking;
      expect(forked.status).toBe(201);
      for (const child of forked.body as { sandbox?: { sandboxID: string } }[]) {
        if (child.sandbox) trackId(child.sandbox.sandboxID);
      }
      if (p.status === 409) conflict = p.status;
      else {
        // The fork had already finished: the pause went through; resume and try again.
        expect(p.status).toBe(204);
        await sbx.connect();
      }
    }
    expect(conflict).toBe(409);
    expect(await info(id)).toMatchObject({ state: 'running' });

    await sbx.kill();
    expect((await server.api('POST', `/sandboxes/${id}/pause`)).status).toBe(404);
    await expect(Sandbox.pause(id)).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(Sandbox.connect(id)).rejects.toBeInstanceOf(SandboxNotFoundError);
  });

  it('a filesystem-only pause keeps files and env but restarts the processes', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000, envs: { FROM_CREATE: 'kept-env' } }));
    const w = await startWorkload(server, sbx);
    await sbx.files.write('notes/kept.txt', 'on disk');
    expect(await sbx.pause({ keepMemory: false })).toBe(true);
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'filesystem' });
    // Nothing stays frozen in memory for a filesystem-only pause (released right after the pause answers).
    await eventually(
      () => !hostObjects(server).runcContainers.includes(sbx.sandboxId),
      'the frozen container to be released',
    );

    await sbx.connect();
    expect(await sbx.files.read('notes/kept.txt')).toBe('on disk');
    expect((await sbx.commands.run('echo "$FROM_CREATE"; hostname')).stdout).toBe(
      `kept-env\n${sbx.sandboxId}\n`,
    );
    const view = await readWorkload(sbx, w);
    expect(view.file).toBe(w.file);
    expect(view.counterAlive).toBe(false);
    expect(view.serverAlive).toBe(false);
    expect((await sbx.commands.run('ps -eo args')).stdout).not.toMatch(/wl\/counter|wl\/server\.py/);
    expect((await workloadFetch(server, sbx.sandboxId, '/secret')).status).toBe(502);
    // The counter stopped for good: its file no longer changes.
    const last = view.counter;
    await new Promise((r) => setTimeout(r, 600));
    expect((await readWorkload(sbx, w)).counter).toBe(last);
  });

  it('a workload CRIU refuses falls back to a filesystem-only pause and says so; the disk is kept', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    const w = await startWorkload(server, sbx);
    await sbx.files.write('notes/kept.txt', 'on disk');
    // A deleted file still held open that is larger than CRIU's ghost-limit (64 MiB) cannot be checkpointed.
    const ghost = await sbx.commands.run(
      `exec python3 -c "import os,time; f=open('ghost','wb'); f.write(b'x'*(80<<20)); f.flush(); os.unlink('ghost'); open('ghost-ready','w').close(); time.sleep(3600)"`,
      { background: true },
    );
    await ghost.disconnect();
    await eventually(() => sbx.files.exists('ghost-ready'), 'the ghost file holder to start');

    expect(await sbx.pause()).toBe(true);
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'filesystem' });
    expect(server.logs()).toMatch(/memory checkpoint failed; pausing with the filesystem only/);
    // docs/differences.md: "pauseKind: filesystem ... the processes restart on resume" — so nothing is kept frozen.
    await eventually(
      () => !hostObjects(server).runcContainers.includes(sbx.sandboxId),
      'the frozen container of a filesystem-only pause to be released',
    );

    await sbx.connect();
    expect(await sbx.files.read('notes/kept.txt')).toBe('on disk');
    expect(await readWorkload(sbx, w)).toMatchObject({
      counterAlive: false,
      serverAlive: false,
      file: w.file,
    });
    expect((await sbx.commands.run('ps -eo args')).stdout).not.toMatch(/ghost/);
  });

  it('connect with onResume reboot boots the saved disk of a memory pause', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 300_000 }));
    const w = await startWorkload(server, sbx);
    await sbx.pause();
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    const rebooted = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' });
    const view = await readWorkload(rebooted, w);
    expect(view).toMatchObject({ counterAlive: false, serverAlive: false, file: w.file });
    expect(view.counter).toBeGreaterThanOrEqual(3);
    // Started again, the server holds a new secret.
    const again = await startWorkload(server, rebooted);
    expect(again.secret).not.toBe(w.secret);
  });

  it('onTimeout pause: paused at expiry, never expires while paused, connect resumes it', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 8_000, lifecycle: { onTimeout: 'pause' } }));
    const w = await startWorkload(server, sbx);
    const counterBefore = (await readWorkload(sbx, w)).counter;
    expect(await info(sbx.sandboxId)).toMatchObject({ lifecycle: { onTimeout: 'pause', autoResume: false } });
    await waitPaused(sbx.sandboxId);
    expect((await info(sbx.sandboxId)).pauseKind).toBe('memory');
    // Well past its expiry it is still there, paused.
    await new Promise((r) => setTimeout(r, 5_000));
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused' });
    expect(await listIds('?state=paused')).toContain(sbx.sandboxId);

    const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 });
    const end = Date.parse((await info(sbx.sandboxId)).endAt);
    expect(end).toBeGreaterThan(Date.now() + 60_000);
    await expectWorkloadKept(resumed, w, counterBefore);
  });

  it('onTimeout pause with keepMemory false pauses filesystem-only at expiry', async () => {
    const sbx = track(
      await Sandbox.create({
        timeoutMs: 3_000,
        lifecycle: { onTimeout: { action: 'pause', keepMemory: false } },
      }),
    );
    await sbx.files.write('kept.txt', 'yes');
    await waitPaused(sbx.sandboxId);
    expect((await info(sbx.sandboxId)).pauseKind).toBe('filesystem');
    await sbx.connect();
    expect(await sbx.files.read('kept.txt')).toBe('yes');
  });

  it('onTimeout kill and autoPause false remove the sandbox at expiry', async () => {
    const killed = track(await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'kill' } }));
    const raw = await server.api('POST', '/sandboxes', { templateID: 'base', timeout: 2, autoPause: false });
    expect(raw.status).toBe(201);
    trackId(raw.body.sandboxID);
    expect(await info(raw.body.sandboxID)).toMatchObject({ lifecycle: { onTimeout: 'kill' } });
    for (const id of [killed.sandboxId, raw.body.sandboxID as string]) {
      await eventually(
        async () => (await server.api('GET', `/sandboxes/${id}`)).status === 404,
        'the timeout to kill it',
        150,
        100,
      );
    }
    expect(hostObjects(server).runcContainers).not.toContain(killed.sandboxId);
  });

  it('auto-resume: a data-plane request through the proxy resumes a paused sandbox that enables it', async () => {
    const sbx = track(
      await Sandbox.create({ timeoutMs: 60_000, lifecycle: { onTimeout: 'pause', autoResume: true } }),
    );
    const w = await startWorkload(server, sbx);
    expect(await info(sbx.sandboxId)).toMatchObject({ lifecycle: { onTimeout: 'pause', autoResume: true } });

    let counterBefore = (await readWorkload(sbx, w)).counter;
    await sbx.pause();
    expect((await info(sbx.sandboxId)).state).toBe('paused');
    // envd's /health through the proxy wakes it.
    const health = await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/health', {
      headers: await envdToken(sbx.sandboxId),
    });
    expect(health.status).toBe(204);
    const resumed = await info(sbx.sandboxId);
    expect(resumed.state).toBe('running');
    // Resumed with at least auto_resume_min_sandbox_timeout_secs (300 s).
    expect(Date.parse(resumed.endAt)).toBeGreaterThan(Date.now() + 250_000);
    await expectWorkloadKept(sbx, w, counterBefore);

    // Requests to the workload's own port do it as well (several at once: one resume), reaching the same process.
    counterBefore = (await readWorkload(sbx, w)).counter;
    await sbx.pause();
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => workloadFetch(server, sbx.sandboxId, '/secret')),
    );
    expect(answers).toEqual(Array.from({ length: 5 }, () => ({ status: 200, body: w.secret })));
    expect((await info(sbx.sandboxId)).state).toBe('running');
    await expectWorkloadKept(sbx, w, counterBefore);
  });

  it('after the grace the paused memory is released, and connect restores it from disk', async (ctx) => {
    if (!lingering) return ctx.skip(); // (run alone: the sandbox paused by the grace test is needed)
    const { sbx, w, counter } = lingering;
    lingering = undefined;
    trackId(sbx.sandboxId);
    // resident_pause_grace_secs defaults to 30; the paused sandbox is looked at every second.
    await eventually(
      () => !hostObjects(server).runcContainers.includes(sbx.sandboxId),
      'the paused sandbox to release its memory',
      450,
      100,
    );
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    expect(hostObjects(server).cgroups.filter((c) => c.endsWith(`/${sbx.sandboxId}`))).toEqual([]);
    expect(existsSync(join(storeDir(server), 'paused', sbx.sandboxId, 'complete'))).toBe(true);
    await sbx.connect();
    await expectWorkloadKept(sbx, w, counter);
  });

  it('without autoResume a data-plane request to a paused sandbox answers 410 and leaves it paused', async () => {
    const sbx = track(await Sandbox.create({ timeoutMs: 60_000, lifecycle: { onTimeout: 'pause' } }));
    await sbx.pause();
    // envd's /health is the SDK's isRunning() probe: E2B answers 502 for a paused sandbox, which reads false.
    const headers = await envdToken(sbx.sandboxId);
    const health = await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/health', { headers });
    expect(health.status).toBe(502);
    expect(await sbx.isRunning()).toBe(false);
    const files = await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/files?path=/etc/hostname', {
      headers,
    });
    expect(files.status).toBe(410);
    expect(await files.text()).toBe('sandbox is not proxyable in its current state');
    expect((await proxyFetch(server, sbx.sandboxId, 8000, '/', { prefix: true })).status).toBe(410);
    expect((await info(sbx.sandboxId)).state).toBe('paused');
  });
});
