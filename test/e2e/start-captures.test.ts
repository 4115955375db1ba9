import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import { readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  ENVD_PORT,
  containerIdOf,
  dirEntries,
  envdAddress,
  envdPids,
  eventually,
  hostObjects,
  metricsNow,
  proxyFetch,
  startServer,
  storeDir,
  strayHostObjects,
  useSdk,
  type TestServer,
  type TestServerOptions,
} from './harness.js';

/** `aenv_start_captures` and `aenv_start_capture_creates_total` of the node, summed over templates. */
async function startCaptureMetrics(server: TestServer) {
  const sum = await metricsNow(server);
  return {
    ready: sum(/^aenv_start_captures\{/),
    restored: sum(/^aenv_start_capture_creates_total\{.*result="restored"/),
    booted: sum(/^aenv_start_capture_creates_total\{.*result="booted"/),
  };
}

const capturesDir = (server: TestServer) => join(storeDir(server), 'start-captures');
/** Copies of a saved disk the runtime keeps ready (`.spare-copy-*` beside the sandbox dirs). */
const diskCopies = (server: TestServer) =>
  dirEntries(join(server.home, 'sandboxes')).filter((e) => e.startsWith('.spare-copy-'));
const seedContainers = (server: TestServer) =>
  hostObjects(server).runcContainers.filter((c) => c.startsWith('seed-'));
const timingOf = (headers: Headers) => headers.get('server-timing') ?? '';
const phaseNames = (timing: string) => timing.split(/,\s*/).map((p) => p.split(';')[0]);

/** Creates a `base` sandbox with the API and kills it: whether the node booted it (`runc run`). */
async function bootedOnCreate(server: TestServer): Promise<boolean> {
  const made = await server.api('POST', '/v2/sandboxes', { templateID: 'base', timeout: 60 });
  expect(made.status).toBe(201);
  expect((await server.api('DELETE', `/sandboxes/${made.body.sandboxID}`)).status).toBe(204);
  return phaseNames(timingOf(made.headers)).includes('rt-runc');
}

/** A node with start captures on, the SDK pointed at it, once the base template's is made (at startup). */
async function nodeWithStartCapture(opts: TestServerOptions): Promise<TestServer> {
  const server = await startServer({ ...opts, startCaptures: true });
  useSdk(server);
  await eventually(
    async () => (await startCaptureMetrics(server)).ready === 1,
    "the base template's start capture",
    600,
    100,
  );
  return server;
}

/** The SDK's create for a template whose start capture was made: a restore of it, not a boot. */
describe('start captures', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await nodeWithStartCapture({ name: 'startc' });
  });
  afterAll(async () => {
    if (!server) return;
    expect(await strayHostObjects(server)).toEqual([]);
    expect(await server.stop()).toBe(0);
    // Shutdown removes the captures and the copies of their disks (and no seed is left running).
    expect(dirEntries(capturesDir(server))).toEqual([]);
    expect(diskCopies(server)).toEqual([]);
    expect(seedContainers(server)).toEqual([]);
  });

  it('holds one checkpoint and disk of a seed that is gone, and two copies of the disk ready', async () => {
    const [seed, ...more] = dirEntries(capturesDir(server));
    expect(more).toEqual([]);
    expect(seed).toMatch(/^seed-/);
    expect(dirEntries(join(capturesDir(server), seed!)).sort()).toEqual(['disk', 'memory']);
    expect(seedContainers(server)).toEqual([]);
    await eventually(() => diskCopies(server).length === 2, 'two copies of the start capture disk');
    // A copy holds the seed's disk (its upper dir), nothing else of the seed's sandbox dir.
    const sandboxes = join(server.home, 'sandboxes');
    expect(dirEntries(join(sandboxes, diskCopies(server)[0]!))).toEqual(['upper']);
    // Like a spare dir, it belongs to the image range until a restore takes it: not to the seed's range, which
    // another sandbox may hold by now.
    const spare = dirEntries(sandboxes).find((e) => /^\.spare-[0-9a-f]+$/.test(e));
    expect(spare).toBeDefined();
    const imageGid = statSync(join(sandboxes, spare!)).gid;
    for (const c of diskCopies(server)) {
      const st = statSync(join(sandboxes, c));
      expect({ uid: st.uid, gid: st.gid, mode: st.mode & 0o777 }).toEqual({
        uid: 0,
        gid: imageGid,
        mode: 0o710,
      });
    }
  });

  it('restores it for a create: the sandbox is its own (name, env, token, uid range) and works', async () => {
    const before = await startCaptureMetrics(server);
    const copiesBefore = diskCopies(server);
    const made = await server.api('POST', '/v2/sandboxes', {
      templateID: 'base',
      timeout: 120,
      envVars: { FROM_CREATE: 'yes' },
      metadata: { m: '1' },
    });
    expect(made.status).toBe(201);
    const id = made.body.sandboxID as string;
    const token = made.body.envdAccessToken as string;
    const phases = phaseNames(timingOf(made.headers));
    // A restore (CRIU), not a boot (runc run) and no wait for a fresh envd to start.
    expect(phases).toContain('rt-criu');
    expect(phases).not.toContain('rt-runc');
    // It started on a ready copy of the disk; the copy is made again once the restore is done.
    expect(copiesBefore.filter((c) => !diskCopies(server).includes(c))).toHaveLength(1);
    await eventually(() => diskCopies(server).length === 2, 'the copies to be refilled');
    expect(await startCaptureMetrics(server)).toMatchObject({
      restored: before.restored + 1,
      booted: before.booted,
      ready: 1,
    });

    const sbx = await Sandbox.connect(id);
    const r = await sbx.commands.run(
      'hostname; cat /etc/hostname; grep -c "$(hostname)" /etc/hosts; echo $FROM_CREATE; id -un',
    );
    expect(r.stdout.split('\n')).toEqual([id, id, '1', 'yes', 'user', '']);
    // envd holds this sandbox's /init, not the seed's.
    const [pid] = envdPids(id);
    const state = JSON.parse(readFileSync(`/proc/${pid}/root/run/agentenv/envd.json`, 'utf8'));
    expect(state).toMatchObject({ sandboxId: id, accessToken: token, envVars: { FROM_CREATE: 'yes' } });
    // The restored envd enforces this sandbox's token (the seed had none).
    const list = (headers: Record<string, string>) =>
      proxyFetch(server, id, ENVD_PORT, '/process.Process/List', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: '{}',
      });
    expect((await list({})).status).toBe(401);
    expect((await list({ 'x-access-token': 'f'.repeat(64) })).status).toBe(401);
    expect((await list({ 'x-access-token': token })).status).toBe(200);

    // Two sandboxes from one capture are apart: their own uid ranges, files and processes.
    const other = await Sandbox.create({ timeoutMs: 120_000 });
    await sbx.files.write('/home/user/mine.txt', 'one');
    expect(await other.files.exists('/home/user/mine.txt')).toBe(false);
    const uidMap = (sandboxId: string) =>
      readFileSync(`/proc/${envdPids(sandboxId)[0]}/uid_map`, 'utf8')
        .trim()
        .split(/\s+/)[1];
    expect(uidMap(id)).not.toBe(uidMap(other.sandboxId));
    expect((await other.commands.run('hostname')).stdout.trim()).toBe(other.sandboxId);
    // Both envds booted (as the seed) with one init key, which root in either can read: once the node's /init
    // gave each its own, the seed's opens neither (docs/security.md).
    const bootKey = (sandboxId: string) =>
      /(?:^|\0)AENV_ENVD_INIT_KEY=([^\0]+)/.exec(
        readFileSync(`/proc/${envdPids(sandboxId)[0]}/environ`, 'utf8'),
      )?.[1];
    expect(bootKey(id)).toMatch(/^[0-9a-f]{64}$/);
    expect(bootKey(other.sandboxId)).toBe(bootKey(id));
    const direct = await fetch(`http://${envdAddress(server, id)}:${ENVD_PORT}/init`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-aenv-init-key': bootKey(id)!,
        'x-access-token': token,
      },
      body: JSON.stringify({ envVars: { PWNED: 'yes' } }),
    });
    expect(direct.status).toBe(401);
    expect((await sbx.commands.run('echo -n "[$PWNED]"')).stdout).toBe('[]');
    await other.kill();

    // Pause with memory and resume; then kill.
    const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 });
    await sbx.pause();
    const resumed = await Sandbox.connect(id);
    expect((await resumed.commands.list()).map((p) => p.pid)).toContain(bg.pid);
    expect(await resumed.files.read('/home/user/mine.txt')).toBe('one');
    await resumed.kill();
    expect(hostObjects(server).runcContainers).not.toContain(id);
  });

  it('a restart drops the captures and makes them again', async () => {
    const [old] = dirEntries(capturesDir(server));
    expect(old).toBeDefined();
    const oldCopies = diskCopies(server);
    expect(oldCopies).toHaveLength(2);
    await server.crash();
    server = await server.restart();
    useSdk(server);
    await eventually(
      async () => (await startCaptureMetrics(server)).ready === 1,
      "the base template's start capture after a restart",
      600,
      100,
    );
    const now = dirEntries(capturesDir(server));
    expect(now).toHaveLength(1);
    expect(now).not.toContain(old);
    expect(diskCopies(server).filter((c) => oldCopies.includes(c))).toEqual([]);
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    expect((await sbx.commands.run('echo ok')).stdout).toBe('ok\n');
    expect((await startCaptureMetrics(server)).restored).toBe(1);
    await sbx.kill();
  });

  it('a capture whose restore fails is dropped: that create boots on its disk, later ones boot', async () => {
    const [seed] = dirEntries(capturesDir(server));
    // Damaged on the host (a full disk, an operator): CRIU cannot read the checkpoint.
    rmSync(join(capturesDir(server), seed!, 'memory', 'inventory.img'));
    const before = await startCaptureMetrics(server);
    const sbx = await Sandbox.create({ timeoutMs: 120_000, envs: { AFTER: 'boot' } });
    expect((await sbx.commands.run('echo $AFTER; hostname')).stdout).toBe(`boot\n${sbx.sandboxId}\n`);
    expect(await startCaptureMetrics(server)).toMatchObject({
      ready: 0,
      booted: before.booted + 1,
      restored: before.restored,
    });
    await eventually(() => dirEntries(capturesDir(server)).length === 0, 'the dropped capture to be removed');
    expect(diskCopies(server)).toEqual([]);
    expect(await bootedOnCreate(server)).toBe(true);
    await sbx.kill();
  });
});

/** `aenv_warm_pool_fills_total` by source, and the pool's hits, summed over templates. */
async function warmPoolFills(server: TestServer) {
  const sum = await metricsNow(server);
  return {
    restored: sum(/^aenv_warm_pool_fills_total\{.*source="start_capture"/),
    booted: sum(/^aenv_warm_pool_fills_total\{.*source="boot"/),
    hits: sum(/^aenv_warm_pool_creates_total\{.*result="hit"/),
    ready: sum(/^aenv_warm_pool_sandboxes\{.*state="ready"/),
  };
}

/** The pid of the envd of sandbox `id` (which may run in a pre-started container, `warm-…`). */
const envdPidOf = (server: TestServer, id: string) => envdPids(containerIdOf(server, id))[0];

/** The id envd was started with: a restored start capture's envd is the seed's (`seed-…`), a booted one its own. */
const envdBootId = (server: TestServer, id: string) =>
  /(?:^|\0)E2B_SANDBOX_ID=([^\0]+)/.exec(readFileSync(`/proc/${envdPidOf(server, id)}/environ`, 'utf8'))?.[1];

describe('a warm pool with a start capture', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await nodeWithStartCapture({ name: 'startcw', warm: 1 });
  });
  afterAll(async () => {
    if (!server) return;
    expect(await server.stop()).toBe(0);
    // Shutdown removes the pre-started sandboxes and the capture; nothing of the restores is left.
    expect(hostObjects(server).runcContainers).toEqual([]);
    expect(dirEntries(capturesDir(server))).toEqual([]);
    expect(diskCopies(server)).toEqual([]);
  });

  it('is refilled by restoring it; a sandbox handed out from it is its own and works', async () => {
    const made: Sandbox[] = [];
    let fromCapture: Sandbox | undefined;
    // The pool's first sandboxes may have booted before the capture was made: take until one was restored.
    for (let i = 0; i < 6 && !fromCapture; i++) {
      await eventually(
        async () => (await warmPoolFills(server)).ready >= 1,
        'a ready pool sandbox',
        300,
        100,
      );
      const before = await warmPoolFills(server);
      const sbx = await Sandbox.create({ timeoutMs: 120_000, envs: { FROM_POOL: String(i) } });
      made.push(sbx);
      expect((await warmPoolFills(server)).hits).toBe(before.hits + 1);
      if (envdBootId(server, sbx.sandboxId)?.startsWith('seed-')) fromCapture = sbx;
    }
    expect(fromCapture).toBeDefined();
    const sbx = fromCapture!;
    const fills = await warmPoolFills(server);
    expect(fills.restored).toBeGreaterThan(0);
    // No restore of it fell back to a boot, and the capture is still there.
    expect(await startCaptureMetrics(server)).toMatchObject({ ready: 1 });

    const i = made.indexOf(sbx);
    const r = await sbx.commands.run('hostname; cat /etc/hostname; echo $FROM_POOL; id -un');
    expect(r.stdout.split('\n')).toEqual([sbx.sandboxId, sbx.sandboxId, String(i), 'user', '']);
    const pid = envdPidOf(server, sbx.sandboxId);
    expect(pid).toBeDefined();
    const state = JSON.parse(readFileSync(`/proc/${pid}/root/run/agentenv/envd.json`, 'utf8'));
    expect(state).toMatchObject({ sandboxId: sbx.sandboxId, envVars: { FROM_POOL: String(i) } });
    expect(state.accessToken).toMatch(/./); // a secure sandbox (the SDK's default): /init needs the token too
    // Neither the seed's boot key nor the pool sandbox's own key opens /init any more: the hand-out set this
    // sandbox's.
    const bootKey = /(?:^|\0)AENV_ENVD_INIT_KEY=([^\0]+)/.exec(
      readFileSync(`/proc/${pid}/environ`, 'utf8'),
    )?.[1];
    expect(bootKey).toMatch(/^[0-9a-f]{64}$/);
    const direct = await fetch(`http://${envdAddress(server, sbx.sandboxId)}:${ENVD_PORT}/init`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-aenv-init-key': bootKey!,
        'x-access-token': String(state.accessToken),
      },
      body: JSON.stringify({ envVars: { PWNED: 'yes' } }),
    });
    expect(direct.status).toBe(401);
    expect((await sbx.commands.run('echo -n "[$PWNED]"')).stdout).toBe('[]');
    // Its files are its own.
    await sbx.files.write('/home/user/mine.txt', 'pool');
    const other = made.find((m) => m !== sbx);
    if (other) expect(await other.files.exists('/home/user/mine.txt')).toBe(false);
    for (const m of made) await m.kill();
  });
});

describe('a start capture that never restores', () => {
  let server: TestServer;
  beforeAll(async () => {
    // Every probe restore of a fresh capture is made to fail (as for a checkpoint taken with a file open).
    server = await startServer({
      name: 'startcf',
      startCaptures: true,
      env: { AENV_FAULT_FAIL_AFTER: 'start-capture-probe' },
    });
    useSdk(server);
  });
  afterAll(async () => {
    if (server) expect(await server.stop()).toBe(0);
  });

  it('is made again twice, then given up: creates boot, and nothing of the attempts is left', async () => {
    await eventually(
      () => server.logs().includes('no start capture of this template on this node'),
      'the node to give up on the capture',
      600,
      100,
    );
    expect(server.logs().split('a start capture did not restore: making it again').length - 1).toBe(2);
    expect((await startCaptureMetrics(server)).ready).toBe(0);
    expect(dirEntries(capturesDir(server))).toEqual([]);
    expect(diskCopies(server)).toEqual([]);
    expect(seedContainers(server)).toEqual([]);
    expect(await bootedOnCreate(server)).toBe(true);
    expect(await strayHostObjects(server)).toEqual([]);
  });
});

describe('start captures off', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startServer({ name: 'startc0', startCaptures: false });
    useSdk(server);
  });
  afterAll(async () => {
    if (server) expect(await server.stop()).toBe(0);
  });

  it('boots every create and captures nothing', async () => {
    for (let i = 0; i < 2; i++) {
      expect(await bootedOnCreate(server)).toBe(true);
    }
    expect(dirEntries(capturesDir(server))).toEqual([]);
    expect(await (await fetch(`${server.url}/metrics`)).text()).not.toMatch(/^aenv_start_captures/m);
  });
});
