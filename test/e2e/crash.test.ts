// Restart and crash safety of paused and running sandboxes with a real server: graceful shutdown pauses everything,
// a pause interrupted by a crash (AENV_FAULT_CRASH_AT) ends fully paused or still running, `kill -9` of the server
// keeps paused sandboxes and re-adopts running ones, and nothing is left on the host that belongs to no sandbox.
import { afterEach, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  counterPasses,
  eventually,
  hostObjects,
  readWorkload,
  startServer,
  startWorkload,
  strayHostObjects,
  useSdk,
  workloadFetch,
  type TestServer,
  type Workload,
} from './harness.js';

const CRASH_POINTS = ['pause:frozen', 'pause:captured', 'pause:synced', 'pause:recorded'] as const;

describe('restart and crash safety', () => {
  let server: TestServer | undefined;
  let port: number | undefined;

  /** (Re)starts the one node of this file on the same state dir and port; `env` only for this run. */
  const start = async (env?: Record<string, string>): Promise<TestServer> => {
    server = await startServer({ name: 'crash', ...(env ? { env } : {}) }, port);
    port = server.port;
    useSdk(server);
    return server;
  };
  const node = () => {
    if (!server) throw new Error('no server');
    return server;
  };
  const info = async (id: string) => (await node().api('GET', `/sandboxes/${id}`)).body;

  const expectWorkloadKept = async (sbx: Sandbox, w: Workload, counterBefore: number) => {
    const view = await readWorkload(sbx, w);
    expect(view).toMatchObject({ counterAlive: true, serverAlive: true, file: w.file });
    expect(view.counter).toBeGreaterThanOrEqual(counterBefore);
    await counterPasses(sbx, w, view.counter);
    expect(await workloadFetch(node(), sbx.sandboxId, '/secret')).toEqual({ status: 200, body: w.secret });
  };

  /** Kills the node's sandboxes, checks nothing is left of them, and stops it gracefully. */
  const stopClean = async () => {
    const s = node();
    server = undefined;
    await s.killAll();
    expect(await strayHostObjects(s)).toEqual([]);
    expect(await s.stop()).toBe(0);
  };

  afterEach(async () => {
    if (!server) return;
    // A test that failed with its server down (crashed) leaves a restart to clean up after it.
    const alive = await fetch(`${server.url}/health`).then(
      () => true,
      () => false,
    );
    if (!alive) await start();
    await stopClean();
  });

  it('graceful shutdown pauses every running sandbox; after a restart they are paused and resume with their processes', async () => {
    await start();
    const a = await Sandbox.create({ timeoutMs: 600_000, envs: { WHO: 'a' } });
    const b = await Sandbox.create({ timeoutMs: 600_000, envs: { WHO: 'b' } });
    const wa = await startWorkload(node(), a);
    const wb = await startWorkload(node(), b);
    const ca = (await readWorkload(a, wa)).counter;
    const cb = (await readWorkload(b, wb)).counter;

    const s = node();
    server = undefined;
    expect(await s.stop()).toBe(0);
    // Their memory is on disk now, and a resident pause does not survive a restart: nothing of them should stay
    // frozen on the host (processes, memory, cgroups, slots) while the node is down. (Soft: the resume below is
    // checked either way.)
    const down = hostObjects(s);
    expect
      .soft({ runc: down.runcContainers, cgroups: down.cgroups.length, netns: down.netnsFiles })
      .toEqual({ runc: [], cgroups: 0, netns: [] });

    await start();
    const paused = await node().api('GET', '/v2/sandboxes?state=paused');
    expect((paused.body as { sandboxID: string }[]).map((x) => x.sandboxID).sort()).toEqual(
      [a.sandboxId, b.sandboxId].sort(),
    );
    for (const [sbx, w, c, who] of [
      [a, wa, ca, 'a'],
      [b, wb, cb, 'b'],
    ] as const) {
      expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
      const resumed = await Sandbox.connect(sbx.sandboxId);
      await expectWorkloadKept(resumed, w, c);
      expect((await resumed.commands.run('echo $WHO')).stdout).toBe(`${who}\n`);
    }
  });

  for (const point of CRASH_POINTS) {
    it(`a crash at ${point} leaves the sandbox fully paused or running, never half`, async () => {
      await start({ AENV_FAULT_CRASH_AT: point });
      const sbx = await Sandbox.create({ timeoutMs: 600_000 });
      const w = await startWorkload(node(), sbx);
      const counterBefore = (await readWorkload(sbx, w)).counter;

      // The server kills itself during this pause: no answer comes back.
      const answer = await node()
        .api('POST', `/sandboxes/${sbx.sandboxId}/pause`)
        .then((r) => `answered ${r.status}`)
        .catch(() => 'no answer');
      expect(answer).toBe('no answer');
      await node().crash(); // (already dead: this only waits for the exit)
      expect(node().logs()).not.toMatch(/"msg":"sandbox paused"/);

      await start();
      const after = await node().api('GET', `/sandboxes/${sbx.sandboxId}`);
      expect(after.status).toBe(200);
      expect(['running', 'paused']).toContain(after.body.state);
      console.log(`crash at ${point}: the sandbox came back ${after.body.state}`);
      if (after.body.state === 'paused') {
        expect(after.body.pauseKind).toBe('memory');
        await Sandbox.connect(sbx.sandboxId);
      }
      expect(await strayHostObjects(node())).toEqual([]);
      await expectWorkloadKept(sbx, w, counterBefore);

      // Nothing half-done is left in its way: it pauses and resumes normally again.
      const again = (await readWorkload(sbx, w)).counter;
      expect(await sbx.pause()).toBe(true);
      expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
      await sbx.connect();
      await expectWorkloadKept(sbx, w, again);
    });
  }

  it('a crash at resume:recorded (the resume stored, its restore not run) leaves the sandbox paused or running, never lost', async () => {
    await start();
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    const w = await startWorkload(node(), sbx);
    const counterBefore = (await readWorkload(sbx, w)).counter;
    expect(await sbx.pause()).toBe(true);
    await node().stop();
    // Restarted, the pause is no longer resident: the resume is a restore from the pause's artifacts.
    await start({ AENV_FAULT_CRASH_AT: 'resume:recorded' });
    const answer = await node()
      .api('POST', `/sandboxes/${sbx.sandboxId}/connect`, { timeout: 600 })
      .then((r) => `answered ${r.status}`)
      .catch(() => 'no answer');
    expect(answer).toBe('no answer');
    await node().crash();

    await start();
    const after = await node().api('GET', `/sandboxes/${sbx.sandboxId}`);
    expect(after.status).toBe(200);
    expect(after.body).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    expect(await strayHostObjects(node())).toEqual([]);
    const resumed = await Sandbox.connect(sbx.sandboxId);
    await expectWorkloadKept(resumed, w, counterBefore);
  });

  it('kill -9 of the server: the paused sandbox resumes, the running one is re-adopted, a killed one leaves nothing', async () => {
    await start();
    const running = await Sandbox.create({ timeoutMs: 600_000 });
    const paused = await Sandbox.create({ timeoutMs: 600_000 });
    const killed = await Sandbox.create({ timeoutMs: 600_000 });
    const wr = await startWorkload(node(), running);
    const wp = await startWorkload(node(), paused);
    const cp = (await readWorkload(paused, wp)).counter;
    expect(await paused.pause()).toBe(true);
    expect(await killed.kill()).toBe(true);
    const cr = (await readWorkload(running, wr)).counter;

    await node().crash();
    // The running sandbox does not depend on the server process: it is still on the host.
    expect(hostObjects(node()).runcContainers).toContain(running.sandboxId);

    await start();
    const listed = (await node().api('GET', '/v2/sandboxes')).body as { sandboxID: string; state: string }[];
    expect(Object.fromEntries(listed.map((s) => [s.sandboxID, s.state]))).toEqual({
      [running.sandboxId]: 'running',
      [paused.sandboxId]: 'paused',
    });
    expect(await strayHostObjects(node())).toEqual([]);
    expect((await node().api('GET', `/sandboxes/${killed.sandboxId}`)).status).toBe(404);

    // Re-adopted: same processes, still counting (they ran on while the server was down), reachable via the proxy.
    await expectWorkloadKept(running, wr, cr);
    expect((await running.commands.run('hostname')).stdout.trim()).toBe(running.sandboxId);
    await Sandbox.connect(paused.sandboxId);
    await expectWorkloadKept(paused, wp, cp);

    // Both can be paused and resumed again, and killed without leftovers.
    for (const [sbx, w] of [
      [running, wr],
      [paused, wp],
    ] as const) {
      const c = (await readWorkload(sbx, w)).counter;
      await sbx.pause();
      await sbx.connect();
      await expectWorkloadKept(sbx, w, c);
    }
  });

  it('kill -9 right after a pause (frozen in memory) and again after its resume', async () => {
    await start();
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    const w = await startWorkload(node(), sbx);
    let c = (await readWorkload(sbx, w)).counter;
    expect(await sbx.pause()).toBe(true);
    // Resident: still frozen on the host when the server dies.
    expect(hostObjects(node()).runcContainers).toContain(sbx.sandboxId);
    await node().crash();
    await start();
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'paused', pauseKind: 'memory' });
    expect(await strayHostObjects(node())).toEqual([]);
    await sbx.connect();
    await expectWorkloadKept(sbx, w, c);

    c = (await readWorkload(sbx, w)).counter;
    await node().crash();
    await start();
    expect(await info(sbx.sandboxId)).toMatchObject({ state: 'running' });
    expect(await strayHostObjects(node())).toEqual([]);
    await expectWorkloadKept(sbx, w, c);
  });
  it('kill -9 during a fork and during a named snapshot leaves no half-made sandbox, capture or name', async () => {
    await start();
    const src = await Sandbox.create({ timeoutMs: 600_000 });
    const w = await startWorkload(node(), src);
    /** Crashes the server once `src` is in the middle of the operation `request` started. */
    const crashDuring = async (request: Promise<unknown>) => {
      const settled = request.catch(() => undefined);
      // Forking and snapshotting show as "paused" (as in the reference's API) until they end.
      await eventually(
        async () => (await info(src.sandboxId)).state === 'paused',
        'the operation to start',
        500,
        10,
      );
      await node().crash();
      await settled;
      await start();
    };

    let c = (await readWorkload(src, w)).counter;
    await crashDuring(node().api('POST', `/sandboxes/${src.sandboxId}/fork`, { count: 2, timeout: 120 }));
    expect(await info(src.sandboxId)).toMatchObject({ state: 'running' });
    expect(await strayHostObjects(node())).toEqual([]);
    await expectWorkloadKept(src, w, c);
    // A child that was complete before the crash is a whole sandbox; none is half made.
    const listed = (await node().api('GET', '/v2/sandboxes')).body as { sandboxID: string; state: string }[];
    for (const s of listed.filter((x) => x.sandboxID !== src.sandboxId)) {
      console.log(`fork child ${s.sandboxID} survived the crash (${s.state})`);
      const child = await Sandbox.connect(s.sandboxID);
      expect((await child.commands.run('hostname')).stdout.trim()).toBe(s.sandboxID);
    }

    const name = `crash-${Math.random().toString(36).slice(2, 10)}`;
    c = (await readWorkload(src, w)).counter;
    await crashDuring(node().api('POST', `/sandboxes/${src.sandboxId}/snapshots`, { name }));
    expect(await info(src.sandboxId)).toMatchObject({ state: 'running' });
    expect(await strayHostObjects(node())).toEqual([]);
    await expectWorkloadKept(src, w, c);
    const snaps = (await node().api('GET', `/snapshots?sandboxID=${src.sandboxId}`)).body as {
      snapshotID: string;
    }[];
    if (snaps.length > 0) console.log('the snapshot was complete before the crash');
    else {
      // Interrupted: invisible, and its name is free again.
      expect((await node().api('GET', `/snapshots/${name}`)).status).toBe(404);
      const again = await node().api('POST', `/sandboxes/${src.sandboxId}/snapshots`, { name });
      expect(again.body).toMatchObject({ names: [name] });
      expect(again.status).toBe(201);
    }
    const launched = await Sandbox.create(name, { timeoutMs: 120_000 });
    expect((await readWorkload(launched, w)).counterAlive).toBe(true);
    await launched.kill();
    expect((await node().api('DELETE', `/templates/${name}`)).status).toBe(204);
  });
});
