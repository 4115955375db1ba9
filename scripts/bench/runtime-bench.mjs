#!/usr/bin/env node
// Container runtime benchmark (root). Next to each ContainerDriver operation it times the raw runc/CRIU
// work the operation stands on, in the same run, with the same OCI config, rootfs and CRIU:
//   create   driver.create() until the sandbox's first process runs   vs  mkdir + overlay/sysfs mount + `runc run -d`
//   destroy  driver.destroy()                                          vs  `runc delete -f` + umount + rm
//   checkpoint (stop) / restore in place / checkpoint --leave-running / fork (restore under a new id and netns)
//                                                                      vs  the same `runc checkpoint|restore` calls
// "First process runs" = the sandbox's init has written into a FIFO the benchmark waits on.
// Traffic: none (each sandbox gets an empty netns with only lo). Everything made is removed at the end.
//
//   node scripts/bench/runtime-bench.mjs [--n 20] [--cr-n 10] [--spares 2] [--only-create] [--json]
//   AENV_CRIU_PATH=/path/to/criu  (default /var/lib/aenv/deps/criu/current/bin/criu; CRIU >= 4.2)

import { spawn } from 'node:child_process';
import { constants, openSync } from 'node:fs';
import { Socket } from 'node:net';
import {
  access,
  chmod,
  chown,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  rmdir,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { clearTimeout, setTimeout } from 'node:timers';
import { setTimeout as sleep } from 'node:timers/promises';
import { register } from 'tsx/esm/api';

register();
const { ContainerDriver } =
  await import('../../packages/node/src/runtime/drivers/container/container-driver.ts');
const fx = await import('../../packages/node/src/runtime/drivers/container/test-fixtures.ts');
const { buildOciConfig, DEFAULT_CAPABILITIES } =
  await import('../../packages/node/src/runtime/drivers/container/oci-config.ts');
const { loadSeccompProfile } = await import('../../packages/node/src/runtime/drivers/container/seccomp.ts');
const { overlayOptions } = await import('../../packages/node/src/runtime/drivers/container/mounts.ts');

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) || dflt : dflt;
};
const N = opt('--n', 20);
const CR_N = opt('--cr-n', 10);
const asJson = args.includes('--json');
const CRIU = process.env.AENV_CRIU_PATH ?? '/var/lib/aenv/deps/criu/current/bin/criu';
const UID = 100000;

if (process.getuid?.() !== 0) {
  console.error('runtime-bench needs root');
  process.exit(2);
}

// `detached`: a command whose children outlive it (runc run/restore) must not hold a pipe of ours.
function sh(
  cmd,
  argv,
  /** @type {{ env?: NodeJS.ProcessEnv, allowFail?: boolean, detached?: boolean }} */ {
    env,
    allowFail = false,
    detached = false,
  } = {},
) {
  return new Promise(
    /** @param {(v?: unknown) => void} resolve */ (resolve, reject) => {
      const child = spawn(cmd, argv, {
        stdio: ['ignore', 'ignore', detached ? 'ignore' : 'pipe'],
        env: env ?? process.env,
      });
      let err = '';
      child.stderr?.on('data', (b) => (err += b));
      child.on('error', reject);
      child.on(detached ? 'exit' : 'close', (code) =>
        code === 0 || allowFail
          ? resolve(code)
          : reject(new Error(`${cmd} ${argv.join(' ')}: ${err.trim()}`)),
      );
    },
  );
}

function summary(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
  return { n: s.length, min: s[0], median: at(0.5), p95: at(0.95) };
}

const exists = (p) =>
  access(p, constants.F_OK).then(
    () => true,
    () => false,
  );

// Waits until the sandbox's init writes into its FIFO (the FIFO lives in the tools dir, which is
// bind-mounted, so host and sandbox open the same pipe). O_RDWR|O_NONBLOCK: the open never blocks, and
// libuv polls the pipe, so a sandbox that never starts cannot pin a thread.
function waitReady(fifo) {
  const sock = new Socket({ fd: openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK), readable: true });
  return new Promise(
    /** @param {(v?: unknown) => void} resolve */ (resolve, reject) => {
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new Error(`${fifo}: sandbox not ready after 30 s`));
      }, 30_000);
      sock.once('data', () => {
        clearTimeout(timer);
        sock.destroy();
        resolve();
      });
    },
  );
}

const base = await mkdtemp('/var/tmp/aenv-runtime-bench-');
await chmod(base, 0o755);
const cgroupParent = `aenv-bench-${process.pid}`;
const lower = join(base, 'lower');
const tools = join(base, 'tools');
const netnsFiles = [];
let driver;

async function cleanup() {
  await driver?.reconcile([]).catch(() => {});
  await driver?.close().catch(() => {});
  for (const d of await readdir(join(base, 'raw-runc')).catch(() => [])) {
    await sh('runc', ['--root', join(base, 'raw-runc'), 'delete', '--force', d], { allowFail: true });
  }
  await sh('umount', [join(base, 'home', 'sandboxes')], { allowFail: true });
  for (const f of netnsFiles) await fx.removeNetnsFile(f);
  for (const m of (await readFile('/proc/self/mountinfo', 'utf8')).split('\n')) {
    const mp = m.split(' ')[4];
    if (mp?.startsWith(base)) await sh('umount', ['-l', mp], { allowFail: true });
  }
  await rm(base, { recursive: true, force: true });
  for (const ctrl of [
    'blkio',
    'cpu',
    'cpuacct',
    'cpuset',
    'devices',
    'freezer',
    'memory',
    'pids',
    'systemd',
    'unified',
  ]) {
    await rmdir(`/sys/fs/cgroup/${ctrl}/${cgroupParent}`).catch(() => {});
  }
}

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    cleanup().finally(() => process.exit(130));
  });
}

const results = {};
try {
  await fx.buildBusyboxLower(lower, UID);
  await fx.buildTestTools(tools);
  await mkdir(join(tools, 'ready'), { mode: 0o755 });
  // init: signal readiness on the sandbox's FIFO, then keep a counter (memory state for C/R).
  await writeFile(
    join(tools, 'bin/aenv-init'),
    '#!/agentenv/bin/busybox sh\necho ok > "$AENV_READY"\ni=0; while :; do i=$((i+1)); echo $i > /tmp/count; /agentenv/bin/busybox usleep 100000; done\n',
    { mode: 0o755 },
  );
  const toolsMount = { dir: tools, version: 'bench' };
  const hasCriu = await exists(CRIU);

  driver = new ContainerDriver({
    homePath: join(base, 'home'),
    runtimePath: join(base, 'run'),
    runcPath: 'runc',
    criuPath: hasCriu ? CRIU : null,
    uidMapHostStart: UID,
    uidMapSize: 65536,
    uidRanges: 64,
    subidFiles: [],
    cowVolume: 'loop-btrfs',
    cowVolumeSizeGb: 8,
    cgroupParent,
    spareDirs: opt('--spares', 2),
  });
  await driver.init();

  let seq = 0;
  const newNetns = async () => {
    const f = join(base, `ns-${netnsFiles.length}`);
    await fx.createNetnsFile(f);
    netnsFiles.push(f);
    return f;
  };
  const newFifo = async (id) => {
    const f = join(tools, 'ready', id);
    await sh('mkfifo', ['-m', '0666', f]);
    return f;
  };
  const resources = { cpuCount: 1, memoryMB: 256, pidsLimit: 256 };
  // Every sandbox its own uid range for life, as the server's allocator hands them out (the raw twin keeps
  // the one shared range).
  const ranges = new Map();
  const rangeOf = (id) => {
    if (!ranges.has(id)) ranges.set(id, { hostStart: UID + 65536 * ((ranges.size % 64) + 1), size: 65536 });
    return ranges.get(id);
  };
  const specFor = (id, netnsPath) => ({
    id,
    hostname: id,
    idRange: rangeOf(id),
    rootfs: { layers: [lower] },
    resources,
    netnsPath,
    nameservers: ['192.0.2.53'],
    initEnv: { AENV_READY: `/agentenv/ready/${id}` },
  });

  // ---- create / destroy, driver and raw interleaved so both see the same host load. Between
  // iterations the driver's background work (spare dirs, deferred removals) is let to finish.
  const ns = await newNetns();
  const { profile } = await loadSeccompProfile(DEFAULT_CAPABILITIES, '', { nestedContainers: false });
  const rawRoot = join(base, 'raw-runc');
  const rawDir = join(base, 'raw');
  await mkdir(rawDir);
  const create = [];
  const destroy = [];
  const rawCreate = [];
  const rawDestroy = [];
  const driverOnce = async (keep) => {
    const id = `b${++seq}`;
    const fifo = await newFifo(id);
    const t0 = performance.now();
    const ready = waitReady(fifo);
    await driver.create(specFor(id, ns), { tools: toolsMount });
    await ready;
    const t1 = performance.now();
    await driver.destroy(id);
    const t2 = performance.now();
    await rm(fifo, { force: true });
    await driver.whenIdle();
    if (keep) {
      create.push(t1 - t0);
      destroy.push(t2 - t1);
    }
  };
  const rawOnce = async (keep) => {
    const id = `r${++seq}`;
    const fifo = await newFifo(id);
    const d = join(rawDir, id);
    const config = buildOciConfig({
      hostname: id,
      rootfsDir: join(d, 'rootfs'),
      uidMapHostStart: UID,
      uidMapSize: 65536,
      seccomp: profile,
      capabilities: DEFAULT_CAPABILITIES,
      noNewPrivileges: false,
      env: { AENV_READY: `/agentenv/ready/${id}` },
      toolsDir: tools,
      sysfsDir: join(d, 'sys'),
      netnsPath: ns,
      cgroupsPath: `/${cgroupParent}/${id}`,
      resources,
      swapAccounting: true,
      criuConfigPath: null,
      nofileLimit: 1024,
    });
    const t0 = performance.now();
    const ready = waitReady(fifo);
    for (const sub of ['upper', 'work', 'rootfs', 'sys']) await mkdir(join(d, sub), { recursive: true });
    await chown(join(d, 'upper'), UID, UID);
    await chown(join(d, 'work'), UID, UID);
    await sh('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      overlayOptions([lower], join(d, 'upper'), join(d, 'work')).options,
      join(d, 'rootfs'),
    ]);
    await sh('nsenter', [
      `--net=${ns}`,
      'mount',
      '-t',
      'sysfs',
      '-o',
      'ro,nosuid,nodev,noexec',
      'sysfs',
      join(d, 'sys'),
    ]);
    await writeFile(join(d, 'config.json'), JSON.stringify(config));
    await sh('runc', ['--root', rawRoot, 'run', '--detach', '--bundle', d, id], { detached: true });
    await ready;
    const t1 = performance.now();
    await sh('runc', ['--root', rawRoot, 'delete', '--force', id]);
    await sh('umount', [join(d, 'sys')]);
    await sh('umount', [join(d, 'rootfs')]);
    await rm(d, { recursive: true, force: true });
    const t2 = performance.now();
    await rm(fifo, { force: true });
    if (keep) {
      rawCreate.push(t1 - t0);
      rawDestroy.push(t2 - t1);
    }
  };
  for (let i = 0; i < N + 2; i++) {
    // Alternate which goes first, and drop two warm-up rounds.
    if (i % 2) {
      await rawOnce(i >= 2);
      await driverOnce(i >= 2);
    } else {
      await driverOnce(i >= 2);
      await rawOnce(i >= 2);
    }
  }
  results.create = { driver: summary(create), raw: summary(rawCreate) };
  results.destroy = { driver: summary(destroy), raw: summary(rawDestroy) };

  // ---- checkpoint / restore
  if (hasCriu && !args.includes('--only-create')) {
    const criuEnv = { ...process.env, CRIU_FAULT: '130' };
    const store = driver.captureRoot;
    const dump = [];
    const restore = [];
    const dumpLeave = [];
    const fork = [];
    const id = `c${++seq}`;
    const fifo = await newFifo(id);
    const ready = waitReady(fifo);
    await driver.create(specFor(id, ns), { tools: toolsMount });
    await ready;
    await sleep(300);
    const driverRound = async (i) => {
      const img = join(store, `img-${i}`);
      let t0 = performance.now();
      await driver.checkpoint(id, img);
      dump.push(performance.now() - t0);
      t0 = performance.now();
      await driver.restore(specFor(id, ns), img, { tools: toolsMount });
      restore.push(performance.now() - t0);
      await rm(img, { recursive: true, force: true });
      const img2 = join(store, `img-l-${i}`);
      const snap = join(store, `snap-${i}`);
      t0 = performance.now();
      await driver.checkpoint(id, img2, { leaveRunning: true, diskDest: snap });
      dumpLeave.push(performance.now() - t0);
      const child = `f${++seq}`;
      const ns2 = await newNetns();
      t0 = performance.now();
      await driver.restore(specFor(child, ns2), img2, { tools: toolsMount, disk: snap });
      fork.push(performance.now() - t0);
      await driver.destroy(child);
      await driver.removeDisk(snap);
      await rm(img2, { recursive: true, force: true });
      await driver.whenIdle();
    };
    // raw: the same container, checkpointed and restored by hand with the same CRIU and config.
    const rawDump = [];
    const rawRestore = [];
    const rawDumpLeave = [];
    const p = driver.paths(id);
    const runc = (argv) =>
      sh(
        'nsenter',
        [`--net=${ns}`, '--', 'runc', '--root', join(base, 'run', 'runc'), '--criu', CRIU, ...argv],
        {
          env: criuEnv,
          detached: argv[0] === 'restore',
        },
      );
    const rawRound = async (i) => {
      const img = join(store, `raw-${i}`);
      await mkdir(img, { mode: 0o711 });
      await chmod(img, 0o711);
      let t0 = performance.now();
      await runc(['checkpoint', '--image-path', img, '--work-path', join(store, `raw-w-${i}`), id]);
      rawDump.push(performance.now() - t0);
      t0 = performance.now();
      await runc([
        'restore',
        '--detach',
        '--bundle',
        p.bundle,
        '--image-path',
        img,
        '--work-path',
        join(store, `raw-rw-${i}`),
        id,
      ]);
      rawRestore.push(performance.now() - t0);
      await sh('sh', ['-c', `echo THAWED > /sys/fs/cgroup/freezer/${cgroupParent}/${id}/freezer.state`], {
        allowFail: true,
      });
      const img2 = join(store, `raw-l-${i}`);
      await mkdir(img2, { mode: 0o711 });
      t0 = performance.now();
      await runc([
        'checkpoint',
        '--leave-running',
        '--image-path',
        img2,
        '--work-path',
        join(store, `raw-lw-${i}`),
        id,
      ]);
      rawDumpLeave.push(performance.now() - t0);
      for (const d of [img, img2, `raw-w-${i}`, `raw-rw-${i}`, `raw-lw-${i}`])
        await rm(join(store, d), { recursive: true, force: true });
    };
    // Interleaved, alternating which goes first, like the create rounds.
    for (let i = 0; i < CR_N; i++) {
      if (i % 2) {
        await rawRound(i);
        await driverRound(i);
      } else {
        await driverRound(i);
        await rawRound(i);
      }
    }
    const st = await driver.stats(id);
    await driver.destroy(id);
    results.checkpoint = { driver: summary(dump), raw: summary(rawDump) };
    results.restore = { driver: summary(restore), raw: summary(rawRestore) };
    results.checkpointLeaveRunning = { driver: summary(dumpLeave), raw: summary(rawDumpLeave) };
    results.fork = { driver: summary(fork) };
    results.idleSandboxMemoryBytes = st.memoryUsageBytes;
  }
} finally {
  await cleanup();
}

if (asJson) {
  console.log(JSON.stringify(results, null, 2));
} else {
  const f = (x) => (x === undefined ? '   -  ' : x.toFixed(1).padStart(6));
  console.log(
    `runtime-bench (n=${N} create/destroy, ${CR_N} C/R; ms min / median / p95; ratio = driver/raw median)`,
  );
  for (const [name, r] of Object.entries(results)) {
    if (typeof r !== 'object') continue;
    const d = r.driver;
    const raw = r.raw;
    const ratio = raw ? (d.median / raw.median).toFixed(2) : '-';
    console.log(
      `${name.padEnd(24)} driver ${f(d.min)} ${f(d.median)} ${f(d.p95)}   raw ${f(raw?.min)} ${f(raw?.median)} ${f(raw?.p95)}   ratio ${ratio}`,
    );
  }
  if (results.idleSandboxMemoryBytes)
    console.log(
      `idle busybox sandbox cgroup memory: ${(results.idleSandboxMemoryBytes / 1048576).toFixed(2)} MiB`,
    );
}
