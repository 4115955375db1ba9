// Real runc, overlayfs, btrfs loop volume, cgroups and (when installed) CRIU. Root only.
import { constants } from 'node:fs';
import {
  access,
  chmod,
  lstat,
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  rmdir,
  stat,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../../util/exec.js';
import type { SandboxSpec } from '../../driver.js';
import { RuntimeError } from '../../driver.js';
import { Cgroups, detectCgroupLayout } from './cgroups.js';
import { ContainerDriver } from './container-driver.js';
import { versionAtLeast } from './criu.js';
import { rangeOfBlock } from './id-ranges.js';
import { readMounts } from './mountinfo.js';
import {
  buildBusyboxLower,
  buildTestTools,
  createNetnsFile,
  execInSandbox,
  launchInSandbox,
  removeNetnsFile,
  unpackOciLayout,
} from './test-fixtures.js';

const IS_ROOT = process.getuid?.() === 0;
const UID_START = 100000;
// The image range is UID_START..+65535 (the layers are owned by it); sandbox ranges follow.
const LAYOUT = { start: UID_START, size: 65536, count: 256 };
// CRIU >= 4.2 is needed on this kernel (see docs/runtime.md); AENV_CRIU_PATH picks another install.
const CRIU = process.env.AENV_CRIU_PATH ?? '/var/lib/aenv/deps/criu/current/bin/criu';
const BASE_IMAGE = '/var/cache/aenv/images/base';

async function exists(p: string): Promise<boolean> {
  try {
    await access(p, constants.F_OK);
    return true;
  } catch {
    return false;
  }
}

const hasCriu = IS_ROOT && (await exists(CRIU));
const hasBase = IS_ROOT && (await exists(join(BASE_IMAGE, 'index.json')));
if (IS_ROOT && !hasCriu) console.warn(`CRIU not found at ${CRIU}: checkpoint/restore/fork tests are skipped`);
if (IS_ROOT && !hasBase)
  console.warn(`${BASE_IMAGE} does not exist yet: the Debian base image test is skipped`);

/** A killed process is gone once it is reaped, or a zombie until its new parent reaps it. */
async function processGone(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

/** Polls `read` until `ok` accepts its value (bounded), returning the last value. */
async function waitFor<T>(
  read: () => Promise<T>,
  ok: (v: T) => boolean,
  what: string,
  ms = 20_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read().catch(() => undefined as T);
    if (v !== undefined && ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${String(v)})`);
    await sleep(20);
  }
}

describe.skipIf(!IS_ROOT)('ContainerDriver on this host', () => {
  let base: string;
  let driver: ContainerDriver;
  let lower: string;
  let tools: { dir: string; version: string };
  let cgroupParent: string;
  const netns: string[] = [];
  let seq = 0;
  // What the server's allocator does: every sandbox its own range.
  const nextRange = () => rangeOfBlock(LAYOUT, (seq % LAYOUT.count) + 1);

  const newNetns = async (): Promise<string> => {
    const p = join(base, `netns-${netns.length}`);
    await createNetnsFile(p);
    netns.push(p);
    return p;
  };

  const spec = async (patch: Partial<SandboxSpec> = {}, cmd = ''): Promise<SandboxSpec> => {
    const idRange = nextRange();
    const id = `t${process.pid}-${++seq}`;
    return {
      id,
      hostname: id,
      idRange,
      rootfs: { layers: [lower] },
      resources: { cpuCount: 1, memoryMB: 128, pidsLimit: 128 },
      netnsPath: patch.netnsPath ?? (await newNetns()),
      nameservers: ['192.0.2.53'],
      initEnv: { AENV_TEST_CMD: cmd },
      ...patch,
    };
  };

  const counterCmd = 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; usleep 50000; done';
  const readCounter = async (upper: string) =>
    Number((await readFile(join(upper, 'tmp/count'), 'utf8')).trim());

  const newDriver = () =>
    new ContainerDriver({
      homePath: join(base, 'home'),
      runtimePath: join(base, 'run'),
      runcPath: 'runc',
      criuPath: hasCriu ? CRIU : null,
      uidMapHostStart: UID_START,
      uidMapSize: 65536,
      uidRanges: LAYOUT.count,
      subidFiles: [],
      cowVolume: 'loop-btrfs',
      cowVolumeSizeGb: 8,
      diskLimits: true,
      cgroupParent,
      inotifyMaxInstances: 77,
      inotifyMaxWatches: 999,
    });

  beforeAll(async () => {
    base = await mkdtemp('/var/tmp/aenv-runtime-test-');
    await chmod(base, 0o755); // the sandbox uid range must be able to reach its rootfs and the tools dir
    cgroupParent = `aenv-test-${process.pid}`;
    lower = join(base, 'lower-busybox');
    await buildBusyboxLower(lower, UID_START);
    tools = await buildTestTools(join(base, 'tools'));
    driver = newDriver();
    await driver.init();
  });

  afterAll(async () => {
    if (!base) return;
    await driver?.reconcile([]).catch(() => {});
    await driver?.close();
    await run('umount', [join(base, 'home', 'sandboxes')], { allowFailure: true });
    for (const p of netns) await removeNetnsFile(p);
    for (const m of (await readMounts()).filter((x) => x.mountPoint.startsWith(base))) {
      await run('umount', ['-l', m.mountPoint], { allowFailure: true });
    }
    await rm(base, { recursive: true, force: true });
    for (const root of await cgroupRoots()) await rmdir(join(root, cgroupParent)).catch(() => {});
  });

  async function cgroupRoots(): Promise<string[]> {
    return [
      ...new Set(
        (await readMounts())
          .filter((m) => m.fsType === 'cgroup' || m.fsType === 'cgroup2')
          .map((m) => m.mountPoint),
      ),
    ];
  }

  async function leftovers(id: string): Promise<string[]> {
    const found: string[] = [];
    const dir = join(base, 'home', 'sandboxes', id);
    if (await exists(dir)) found.push(`dir ${dir}`);
    for (const m of await readMounts())
      if (m.mountPoint.startsWith(`${dir}/`)) found.push(`mount ${m.mountPoint}`);
    for (const root of await cgroupRoots()) {
      if (await exists(join(root, cgroupParent, id))) found.push(`cgroup ${join(root, cgroupParent, id)}`);
    }
    if (await exists(join(base, 'run', 'runc', id))) found.push(`runc state ${id}`);
    return found;
  }

  it('starts the init with the sandbox identity and its isolation', async () => {
    const s = await spec();
    const h = await driver.create(s, { tools });
    expect(h.pid).toBeGreaterThan(1);
    const status = await readFile(`/proc/${h.pid}/status`, 'utf8');
    expect(status).toMatch(/CapEff:\s+00000000a80405fb/); // Docker's default set without NET_RAW
    expect(status).toMatch(/CapInh:\s+0000000000000000/);
    expect(status).toMatch(/Seccomp:\s+2/);
    expect(status).toMatch(/NoNewPrivs:\s+0/);
    const root = s.idRange.hostStart;
    expect((await readFile(`/proc/${h.pid}/uid_map`, 'utf8')).trim().split(/\s+/)).toEqual([
      '0',
      String(root),
      '65536',
    ]);
    expect((await readFile(`/proc/${h.pid}/gid_map`, 'utf8')).trim().split(/\s+/)).toEqual([
      '0',
      String(root),
      '65536',
    ]);

    const r = await execInSandbox(
      h.upperDir,
      'hostname; grep -E "^(CapEff|Seccomp):" /proc/self/status; id -u',
    );
    expect(r).toEqual({ code: 0, output: `${s.id}\nCapEff:\t00000000a80405fb\nSeccomp:\t2\n0\n` });
    expect((await execInSandbox(h.upperDir, 'cat /etc/hostname /etc/hosts /etc/resolv.conf')).output).toBe(
      `${s.id}\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${s.id}\nnameserver 192.0.2.53\n`,
    );
    // The files are in the upper, owned by the mapped root, not bind mounts.
    const hosts = await lstat(join(h.upperDir, 'etc/hosts'));
    expect([hosts.uid, hosts.gid, hosts.mode & 0o777]).toEqual([root, root, 0o644]);
    expect((await execInSandbox(h.upperDir, 'grep -c " /etc/" /proc/self/mounts')).output.trim()).toBe('0');

    const dev = (await execInSandbox(h.upperDir, 'ls /dev')).output.split('\n').filter(Boolean).sort();
    expect(dev).toEqual(
      [
        'fd',
        'full',
        'mqueue',
        'null',
        'ptmx',
        'pts',
        'random',
        'shm',
        'stderr',
        'stdin',
        'stdout',
        'tty',
        'urandom',
        'zero',
      ].sort(),
    );
    const ro = await execInSandbox(h.upperDir, 'touch /agentenv/x; echo rc=$?; ls /agentenv/bin/aenv-init');
    expect(ro.output).toMatch(/Read-only file system/);
    expect(ro.output).toMatch(/rc=1\n\/agentenv\/bin\/aenv-init/);
    const mounts = (await execInSandbox(h.upperDir, 'grep -E " /(agentenv|sys) " /proc/self/mounts')).output;
    expect(mounts).toMatch(/ \/agentenv \S+ ro,nosuid,nodev/);
    expect(mounts).toMatch(/ \/sys sysfs ro,nosuid,nodev,noexec/);
    // sysfs shows the sandbox's netns (only lo here), not the host's interfaces.
    expect((await execInSandbox(h.upperDir, 'ls /sys/class/net')).output).toBe('lo\n');
    const masked = await execInSandbox(
      h.upperDir,
      'wc -c < /proc/keys; ls /sys/firmware | wc -l; echo x > /proc/sysrq-trigger',
    );
    expect(masked.output).toMatch(/^0\n0\n/);
    expect(masked.code).not.toBe(0);
    // Nested user namespaces are refused by the seccomp filter.
    expect((await execInSandbox(h.upperDir, 'unshare -U true; echo rc=$?')).output).toMatch(/rc=1/);
    // /tmp is part of the overlay (it must survive a pause), so it lands in the upper.
    await execInSandbox(h.upperDir, 'echo kept > /tmp/t1');
    expect(await readFile(join(h.upperDir, 'tmp/t1'), 'utf8')).toBe('kept\n');

    const listed = (await driver.list()).find((x) => x.id === s.id);
    // Started, its root and sysfs are only in its own mount namespace: nothing of it in the host's table.
    expect(listed).toMatchObject({
      status: 'running',
      pid: h.pid,
      hasDir: true,
      rootfsMounted: false,
      hasCgroup: true,
    });
    expect((await readMounts()).filter((m) => m.mountPoint.startsWith(`${h.sandboxDir}/`))).toEqual([]);
    const st = await driver.stats(s.id);
    expect(st.memoryLimitBytes).toBe(128 * 1024 * 1024);
    expect(st.pids).toBeGreaterThan(0);
    expect(st.memoryUsageBytes).toBeGreaterThan(0);
    expect(st.frozen).toBe(false);
    await driver.destroy(s.id);
  });

  it("refuses what Docker's profile refuses, without NET_RAW, core dumps or the host's cgroup names", async () => {
    const s = await spec();
    const h = await driver.create(s, { tools });
    const tryIt = async (cmd: string) => (await execInSandbox(h.upperDir, `${cmd}; echo rc=$?`)).output;
    expect(await tryIt('dmesg')).toMatch(/Operation not permitted[\s\S]*rc=1/);
    expect(await tryIt('unshare -U true')).toMatch(/rc=1/);
    expect(await tryIt('unshare -n true')).toMatch(/rc=1/);
    expect(await tryIt('mount -t tmpfs x /mnt')).toMatch(/rc=(1|255)/);
    expect(await tryIt('nsenter -t 1 -n true')).toMatch(/rc=1/);
    expect(await tryIt('chroot / true')).toMatch(/rc=0/);
    // ping needs a raw socket (CAP_NET_RAW) or ICMP datagram sockets (ping_group_range, off in the slot).
    expect(await tryIt('ping -c1 -W1 127.0.0.1')).toMatch(/(permitted|denied)[\s\S]*rc=1/);
    expect(await tryIt('ulimit -c; ulimit -c unlimited')).toMatch(/^0\n[\s\S]*rc=(1|2)/);
    // A cgroup namespace: the sandbox sees its own cgroup as the root, not /<parent>/<id>.
    const cg = await tryIt('cat /proc/self/cgroup');
    expect(cg).not.toContain(cgroupParent);
    expect(cg).toMatch(/^\d+:[^:]*:\/$/m);
    // Per-user limits of its user namespace, set by the host once it runs; the sandbox cannot change them.
    await driver.diskLimitSet(s.id);
    const userSysctls =
      'cat /proc/sys/user/max_inotify_instances /proc/sys/user/max_inotify_watches /proc/sys/user/max_user_namespaces';
    expect(await tryIt(userSysctls)).toBe('77\n999\n0\nrc=0\n');
    expect(await tryIt('echo 100000 > /proc/sys/user/max_inotify_instances')).toMatch(/rc=1/);
    await driver.destroy(s.id);
  });

  it('keeps host users out of sandbox files: 0710 sandbox dirs, nosuid/nodev host paths, nodev overlay', async () => {
    const s = await spec();
    const root = s.idRange.hostStart;
    const owner = async (path: string) => {
      const st = await stat(path);
      return [st.uid, st.gid, (st.mode & 0o7777).toString(8)];
    };
    // Spare dirs are ready (the create takes one): the image range's until taken, which no sandbox runs as.
    await driver.whenIdle();
    const spares = (await readdir(join(base, 'home', 'sandboxes'))).filter((n) => n.startsWith('.spare-'));
    expect(spares.length).toBeGreaterThan(0);
    for (const n of spares)
      expect(await owner(join(base, 'home', 'sandboxes', n))).toEqual([0, UID_START, '710']);
    const h = await driver.create(s, { tools });
    // Taken, the dir passes to the sandbox's own range: its root gid alone may pass (it started, so it could).
    expect(await owner(h.sandboxDir)).toEqual([0, root, '710']);
    expect((await stat(join(base, 'home', 'sandboxes'))).mode & 0o777).toBe(0o711);
    const mounts = await readMounts();
    expect(mounts.find((m) => m.mountPoint === join(base, 'home', 'sandboxes'))?.mountOptions).toEqual(
      expect.arrayContaining(['nosuid', 'nodev']),
    );
    // The overlay root and the sysfs, as the sandbox's own mount namespace holds them.
    const inside = await execInSandbox(
      h.upperDir,
      `awk '$2 == "/" || $2 == "/sys" {print $2, $4}' /proc/self/mounts`,
    );
    const optionsOf = (point: string) =>
      inside.output
        .split('\n')
        .find((l) => l.startsWith(`${point} `))
        ?.split(' ')[1]
        ?.split(',');
    expect(optionsOf('/')).toContain('nodev');
    expect(optionsOf('/sys')).toEqual(expect.arrayContaining(['ro', 'nosuid', 'nodev', 'noexec']));
    // What a sandbox's root can plant: a setuid binary owned by its mapped root.
    const planted = join(h.upperDir, 'tmp', 'suid-id');
    await execInSandbox(h.upperDir, 'touch /tmp/.copied-up');
    await run('cp', ['/usr/bin/id', planted]);
    await run('chown', [`${root}:${root}`, planted]);
    await run('chmod', ['4755', planted]);
    const asNobody = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--inh-caps=-all'];
    // (Through sh: setpriv itself finds its program before it drops privileges.)
    const byPath = await run(asNobody[0]!, [...asNobody.slice(1), 'sh', '-c', '"$0"', planted], {
      allowFailure: true,
    });
    expect(byPath.code).not.toBe(0);
    expect(byPath.stderr).toMatch(/Permission denied/);
    // Even given an open file (a path it could never walk), the host-side copy does not elevate: nosuid.
    const viaFd = (path: string) =>
      run('sh', ['-c', `exec 3<"$1"; exec ${asNobody.join(' ')} /proc/self/fd/3`, 'sh', path]);
    expect((await viaFd(planted)).stdout).not.toMatch(/euid=/);
    // Inside the sandbox the overlay honours setuid (sudo must work: test/security), but only there: the
    // started sandbox's root is in its own mount namespace alone, and the kernel honours setuid only on mounts
    // of the caller's namespace. So even opened through the sandbox's root, it runs as the user who ran it.
    const throughRoot = (await viaFd(`/proc/${h.pid}/root/tmp/suid-id`)).stdout;
    expect(throughRoot).toMatch(/^uid=65534\(nobody\)/);
    expect(throughRoot).not.toMatch(/euid=/);
    expect((await execInSandbox(h.upperDir, 'mknod /tmp/mem c 1 1; echo rc=$?')).output).toMatch(/rc=1/);
    await driver.destroy(s.id);
  });

  it('caps the tasks of all sandboxes together at the node budget', async () => {
    const cg = new Cgroups(detectCgroupLayout(await readMounts()), cgroupParent);
    await cg.limitParentPids(48);
    try {
      const resources = { cpuCount: 1, memoryMB: 128, pidsLimit: 40 };
      // Both run before either bomb goes off: a bomb started with the first would leave the second no task
      // to start with (runc's own hooks fork inside its cgroup), which is the budget working, not this test.
      const a = await driver.create(await spec({ resources }), { tools });
      const b = await driver.create(await spec({ resources }), { tools });
      await execInSandbox(a.upperDir, 'true');
      await execInSandbox(b.upperDir, 'true');
      const bomb = '(bomb() { bomb | bomb & }; bomb) </dev/null >/dev/null 2>&1';
      await launchInSandbox(a.upperDir, bomb);
      await launchInSandbox(b.upperDir, bomb);
      // The kernel counts a refused fork in the cgroup of the task that forked, whichever limit refused it.
      const refused = (id: string) =>
        readFile(`/sys/fs/cgroup/pids/${cgroupParent}/${id}/pids.events`, 'utf8').then((t) =>
          Number(/max (\d+)/.exec(t)?.[1]),
        );
      for (const id of [a.id, b.id])
        await waitFor(
          () => refused(id),
          (n) => n > 0,
          `forks refused in ${id}`,
        );
      expect(await cg.parentPids()).toBeLessThanOrEqual(48);
      const [sa, sb] = [await driver.stats(a.id), await driver.stats(b.id)];
      expect(sa.pids + sb.pids).toBeLessThanOrEqual(48);
      await driver.destroy(a.id);
      await driver.destroy(b.id);
    } finally {
      await writeFile(`/sys/fs/cgroup/pids/${cgroupParent}/pids.max`, 'max');
    }
  });

  it('refuses bad specs and duplicate ids with clear errors, leaving nothing behind', async () => {
    const s = await spec();
    await expect(
      driver.create({ ...s, rootfs: { layers: [join(base, 'nope')] } }, { tools }),
    ).rejects.toThrow(/image layer dir .*nope does not exist/);
    await expect(driver.create({ ...s, id: '../evil' }, { tools })).rejects.toThrow(/sandbox id/);
    await expect(
      driver.create(s, { tools: { dir: join(base, 'lower-busybox'), version: 'x' } }),
    ).rejects.toThrow(/has no bin\/aenv-init/);
    expect(await leftovers(s.id)).toEqual([]);
    await driver.create(s, { tools });
    const dup = await driver.create(s, { tools }).catch((e: unknown) => e);
    expect(dup).toBeInstanceOf(RuntimeError);
    expect((dup as RuntimeError).reason).toBe('AlreadyExists');
    await driver.destroy(s.id);
    // runc itself fails (the init is not executable): everything made so far is rolled back.
    const brokenTools = join(base, 'tools-broken');
    await buildTestTools(brokenTools);
    await chmod(join(brokenTools, 'bin/aenv-init'), 0o644);
    const broken = await spec();
    const err = await driver
      .create(broken, { tools: { dir: brokenTools, version: 'x' } })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ reason: 'StartFailed' });
    expect((err as Error).message).toMatch(/runc run .* failed: .*permission denied/);
    expect(await leftovers(broken.id)).toEqual([]);
  });

  describe('uid isolation', () => {
    const uidMap = async (pid: number) =>
      (await readFile(`/proc/${pid}/uid_map`, 'utf8')).trim().split(/\s+/).map(Number);
    const inRange = (uid: number, r: { hostStart: number; size: number }) =>
      uid >= r.hostStart && uid < r.hostStart + r.size;
    /** Every owner (uid and gid) below `dir`, not following symlinks. */
    const owners = async (dir: string): Promise<number[]> => {
      const out: number[] = [];
      const st = await lstat(dir);
      out.push(st.uid, st.gid);
      if (st.isDirectory()) for (const e of await readdir(dir)) out.push(...(await owners(join(dir, e))));
      return out;
    };
    const mountOptions = async (mountPoint: string) => {
      const line = (await readFile('/proc/self/mountinfo', 'utf8'))
        .split('\n')
        .find((l) => l.split(' ')[4] === mountPoint);
      return line?.split(' ')[5]?.split(',') ?? [];
    };

    it('gives each sandbox its own range: disjoint maps, its files owned by it, the layers shown as its own', async () => {
      const [a, b] = [await spec(), await spec()];
      const [ha, hb] = [await driver.create(a, { tools }), await driver.create(b, { tools })];
      const [ma, mb] = [await uidMap(ha.pid), await uidMap(hb.pid)];
      expect(ma).toEqual([0, a.idRange.hostStart, 65536]);
      expect(mb).toEqual([0, b.idRange.hostStart, 65536]);
      expect(ma[1]! + ma[2]! <= mb[1]! || mb[1]! + mb[2]! <= ma[1]!).toBe(true);
      for (const [h, other] of [
        [ha, b],
        [hb, a],
      ] as const) {
        const r = await execInSandbox(
          h.upperDir,
          'stat -c %u:%g /bin/busybox /etc/passwd; echo r > /tmp/by-root; echo u > /tmp/by-user; chown 1000:1000 /tmp/by-user',
        );
        expect(r).toEqual({ code: 0, output: '0:0\n0:0\n' });
        const own = h === ha ? a.idRange : b.idRange;
        const byRoot = await lstat(join(h.upperDir, 'tmp/by-root'));
        const byUser = await lstat(join(h.upperDir, 'tmp/by-user'));
        expect([byRoot.uid, byRoot.gid]).toEqual([own.hostStart, own.hostStart]);
        expect([byUser.uid, byUser.gid]).toEqual([own.hostStart + 1000, own.hostStart + 1000]);
        for (const uid of await owners(h.upperDir)) expect(inRange(uid, other.idRange)).toBe(false);
        // The layer stays owned by the image range on disk; the sandbox's overlay is made of an idmapped
        // view of it, which the overlay holds alone: the view is not left in the host's mount table.
        expect((await lstat(`/proc/${h.pid}/root/bin/busybox`)).uid).toBe(own.hostStart);
        expect(await mountOptions(join(h.sandboxDir, 'l/0'))).toEqual([]);
      }
      expect((await lstat(join(lower, 'bin/busybox'))).uid).toBe(UID_START);
      for (const id of [a.id, b.id]) {
        await driver.destroy(id);
        expect(await leftovers(id)).toEqual([]);
      }
    });

    it("moves a disk another sandbox wrote into the new sandbox's range: owners, setuid bits, capabilities", async () => {
      const a = await spec();
      const ha = await driver.create(a, { tools });
      const r = await execInSandbox(
        ha.upperDir,
        'mkdir /data && echo s > /data/suid && chmod 4755 /data/suid && echo u > /data/user && ' +
          'chown 1000:1000 /data/user && ln -s user /data/link && chown -h 1000:1000 /data/link && echo ok',
      );
      expect(r.output).toBe('ok\n');
      // A file capability set inside a sandbox names its root (v3 rootid): set one as the sandbox would.
      await run('nsenter', [
        `--user=/proc/${ha.pid}/ns/user`,
        'setcap',
        'cap_net_raw+ep',
        join(ha.upperDir, 'data/suid'),
      ]);
      expect((await run('getcap', ['-n', join(ha.upperDir, 'data/suid')])).stdout).toContain(
        `rootid=${a.idRange.hostStart}`,
      );
      await driver.freeze(a.id);
      const snap = join(driver.captureRoot, `uid-disk-${a.id}`);
      await driver.captureDisk(a.id, snap);
      await driver.thaw(a.id);

      const b = await spec();
      const hb = await driver.create(b, { tools, disk: snap });
      const root = b.idRange.hostStart;
      const suid = await lstat(join(hb.upperDir, 'data/suid'));
      expect([suid.uid, suid.gid, suid.mode & 0o7777]).toEqual([root, root, 0o4755]);
      const user = await lstat(join(hb.upperDir, 'data/user'));
      expect([user.uid, user.gid]).toEqual([root + 1000, root + 1000]);
      expect((await lstat(join(hb.upperDir, 'data/link'))).uid).toBe(root + 1000);
      expect((await run('getcap', ['-n', join(hb.upperDir, 'data/suid')])).stdout).toContain(
        `rootid=${root}`,
      );
      for (const uid of await owners(hb.upperDir)) expect(inRange(uid, a.idRange)).toBe(false);
      // The source's own disk is untouched, and inside the new sandbox the files are what they were.
      expect((await lstat(join(ha.upperDir, 'data/user'))).uid).toBe(a.idRange.hostStart + 1000);
      expect(
        (await execInSandbox(hb.upperDir, 'stat -c %u:%a /data/user /data/suid; cat /data/user')).output,
      ).toBe('1000:644\n0:4755\nu\n');
      await driver.removeDisk(snap);
      for (const id of [a.id, b.id]) await driver.destroy(id);
    });

    it('refuses a range that is not one of its sandbox ranges, leaving nothing behind', async () => {
      const s = await spec();
      const bad = [
        { hostStart: UID_START, size: 65536 }, // the image range
        { hostStart: UID_START + 65536 + 1, size: 65536 }, // misaligned
        { hostStart: UID_START + 65536, size: 1000 }, // wrong size
        { hostStart: UID_START + 65536 * (LAYOUT.count + 1), size: 65536 }, // past the span
        { hostStart: 1000, size: 65536 }, // host users
      ];
      for (const idRange of bad) {
        await expect(driver.create({ ...s, idRange }, { tools })).rejects.toThrow(
          /is not one of this node's sandbox ranges/,
        );
      }
      expect(await leftovers(s.id)).toEqual([]);
    });

    it('refuses to start when its span overlaps /etc/subuid or /etc/subgid, naming the entry', async () => {
      const subuid = join(base, 'subuid');
      const subgid = join(base, 'subgid');
      await writeFile(subuid, '# users\nbob:900000000:65536\n');
      await writeFile(subgid, 'bob:900000000:65536\nalice:165536:65536\n');
      // A driver of its own (host volume, no spares): an init on the shared home would replace its spares.
      const opts = {
        ...newDriver().opts,
        homePath: join(base, 'home-subid'),
        runtimePath: join(base, 'run-subid'),
        cowVolume: 'host' as const,
        // The host volume here is ext4, which cannot limit disks; this test is about the id ranges.
        diskLimits: false,
        spareDirs: 0,
        subidFiles: [subuid, subgid],
      };
      const err = await new ContainerDriver(opts).init().catch((e: unknown) => e);
      expect(err).toMatchObject({ reason: 'HostSetup' });
      expect((err as Error).message).toContain(`${subgid} line 2 "alice:165536:65536"`);
      await writeFile(subgid, 'bob:900000000:65536\n');
      const ok = new ContainerDriver(opts);
      await ok.init();
      await ok.close();
    });
  });

  it('keeps writes through .. and symlinks inside the upper; host-side rewrites never follow them', async () => {
    const victim = join(base, 'victim.txt');
    await writeFile(victim, 'host file\n');
    const s = await spec();
    const h = await driver.create(s, { tools });
    const r = await execInSandbox(
      h.upperDir,
      `ln -s / /tmp/root; ln -s ../../../../../../../.. /tmp/up; echo a > /tmp/root/../../escape1; mkdir -p /tmp/up${base} && echo b > /tmp/up${base}/escape2; ` +
        `rm -f /etc/hosts /etc/resolv.conf; ln -s ${victim} /etc/hosts; ln -s /tmp/up${victim} /etc/resolv.conf; echo done`,
    );
    expect(r.output).toBe('done\n');
    expect(await exists('/escape1')).toBe(false);
    expect(await exists(join(base, 'escape2'))).toBe(false);
    expect(await readFile(join(h.upperDir, 'escape1'), 'utf8')).toBe('a\n');
    expect(await readFile(join(h.upperDir, base.slice(1), 'escape2'), 'utf8')).toBe('b\n');
    // Starting a second sandbox on this disk rewrites /etc files in the new upper: the links are replaced.
    await driver.freeze(s.id);
    const snap = join(driver.captureRoot, `snap-${s.id}`);
    await driver.captureDisk(s.id, snap);
    await driver.thaw(s.id);
    const s2 = await spec();
    const h2 = await driver.create(s2, { tools, disk: snap });
    expect(await readFile(victim, 'utf8')).toBe('host file\n');
    expect((await lstat(join(h2.upperDir, 'etc/hosts'))).isFile()).toBe(true);
    expect((await execInSandbox(h2.upperDir, 'cat /escape1 /etc/hostname')).output).toBe(`a\n${s2.id}\n`);
    await driver.removeDisk(snap);
    expect(await exists(snap)).toBe(false);
    await driver.destroy(s.id);
    await driver.destroy(s2.id);
  });

  it('OOM-kills a process allocating past memoryMB, and only that process', async () => {
    const s = await spec({ resources: { cpuCount: 1, memoryMB: 64, pidsLimit: 128 } }, counterCmd);
    const h = await driver.create(s, { tools });
    const r = await execInSandbox(h.upperDir, 'dd if=/dev/zero of=/dev/null bs=200M count=1; echo rc=$?');
    expect(r.output).toMatch(/rc=137/);
    expect((await driver.stats(s.id)).oomKills).toBeGreaterThanOrEqual(1);
    // The init and the counter survived.
    expect((await lstat(`/proc/${h.pid}`)).isDirectory()).toBe(true);
    const c = await readCounter(h.upperDir);
    await waitFor(
      () => readCounter(h.upperDir),
      (v) => v > c,
      'counter to advance after the OOM kill',
    );
    const small = await execInSandbox(
      h.upperDir,
      'dd if=/dev/zero of=/dev/null bs=16M count=1 2>/dev/null; echo rc=$?',
    );
    expect(small.output).toBe('rc=0\n');
    await driver.destroy(s.id);
  });

  it('limits what a sandbox writes to diskMB; a clone of its disk gets the limit of its own spec', async () => {
    expect(driver.enforcesDiskLimits).toBe(true);
    const limited = (diskMB: number) => ({ cpuCount: 1, memoryMB: 128, pidsLimit: 128, diskMB });
    const s = await spec({ resources: limited(64) });
    const h = await driver.create(s, { tools });
    await driver.diskLimitSet(s.id);
    // The test's command channel writes into the sandbox: free the space before answering.
    const fillUp = (file: string, mb: number) =>
      `out=$(dd if=/dev/zero of=${file} bs=1M count=${mb} 2>&1); rc=$?; rm -f ${file}; sync; echo "$out"; echo rc=$rc`;
    const fill = await execInSandbox(h.upperDir, fillUp('/big', 100));
    expect(fill.output).toMatch(/quota/i);
    expect(fill.output).toMatch(/rc=1\n$/);
    // Writing as root inside does not get around it, and what is freed can be written again.
    const again = await execInSandbox(
      h.upperDir,
      'dd if=/dev/zero of=/ok bs=1M count=16 2>/dev/null; echo rc=$?',
    );
    expect(again.output).toBe('rc=0\n');

    const disk = join(driver.captureRoot, `disk-${s.id}`);
    await driver.captureDisk(s.id, disk);
    const child = await spec({ resources: limited(32) });
    const c = await driver.create(child, { tools, disk: disk });
    await driver.diskLimitSet(child.id);
    // The 16 MB it inherited count toward its 32.
    const childFill = await execInSandbox(c.upperDir, fillUp('/more', 24));
    expect(childFill.output).toMatch(/quota/i);
    expect(childFill.output).toMatch(/rc=1\n$/);
    expect((await execInSandbox(c.upperDir, fillUp('/more', 8))).output).toMatch(/rc=0\n$/);

    // A full disk (the host is held to the limit too): a sandbox started on a copy of it still starts — the
    // host writes its files into the sandbox dir before the limit is set — and is as full as its source.
    const EDQUOT = { errno: -122 };
    await expect(writeFile(join(c.upperDir, 'filler'), Buffer.alloc(64 << 20))).rejects.toMatchObject(EDQUOT);
    const fullDisk = join(driver.captureRoot, `disk-${child.id}`);
    await driver.captureDisk(child.id, fullDisk);
    // Its limit may even be below what it already holds (8 of ~32 MB): it starts, and can be snapshotted again.
    const grandchild = await spec({ resources: limited(8) });
    const g = await driver.create(grandchild, { tools, disk: fullDisk });
    await driver.diskLimitSet(grandchild.id);
    await expect(writeFile(join(g.upperDir, 'more'), Buffer.alloc(1 << 20))).rejects.toMatchObject(EDQUOT);
    const overDisk = join(driver.captureRoot, `disk-${grandchild.id}`);
    await driver.captureDisk(grandchild.id, overDisk);
    // The snapshots themselves (host data) are not held to the limit they were taken with.
    await writeFile(join(fullDisk, 'upper', 'host-copy'), Buffer.alloc(40 << 20));
    await writeFile(join(overDisk, 'upper', 'host-copy'), Buffer.alloc(40 << 20));
    for (const id of [grandchild.id, child.id, s.id]) await driver.destroy(id);
    for (const d of [disk, fullDisk, overDisk]) await driver.removeDisk(d);
  });

  it('stops a fork bomb at pidsLimit', async () => {
    const s = await spec(
      { resources: { cpuCount: 1, memoryMB: 128, pidsLimit: 32 } },
      'bomb() { bomb | bomb & }; bomb',
    );
    const h = await driver.create(s, { tools });
    const eventsFile = `/sys/fs/cgroup/pids/${cgroupParent}/${s.id}/pids.events`;
    await waitFor(
      async () => Number(/max (\d+)/.exec(await readFile(eventsFile, 'utf8'))?.[1]),
      (n) => n > 0,
      'the pids limit to be hit',
    );
    const st = await driver.stats(s.id);
    expect(st.pids).toBeLessThanOrEqual(32);
    expect((await lstat(`/proc/${h.pid}`)).isDirectory()).toBe(true);
    // Tearing down a sandbox with a live fork bomb still works and leaves nothing.
    await driver.destroy(s.id);
    expect(await leftovers(s.id)).toEqual([]);
  });

  it('sets the cpu quota and memory+swap limits in the cgroup', async () => {
    const s = await spec({ resources: { cpuCount: 0.5, memoryMB: 96, pidsLimit: 64 } });
    await driver.create(s, { tools });
    const cg = (ctrl: string, file: string) =>
      readFile(`/sys/fs/cgroup/${ctrl}/${cgroupParent}/${s.id}/${file}`, 'utf8');
    expect((await cg('cpu', 'cpu.cfs_quota_us')).trim()).toBe('50000');
    expect((await cg('cpu', 'cpu.cfs_period_us')).trim()).toBe('100000');
    expect((await cg('memory', 'memory.limit_in_bytes')).trim()).toBe(String(96 * 1024 * 1024));
    expect((await cg('memory', 'memory.memsw.limit_in_bytes')).trim()).toBe(String(96 * 1024 * 1024));
    expect((await cg('pids', 'pids.max')).trim()).toBe('64');
    await driver.destroy(s.id);
  });

  it('freezes and thaws: a counter stops and then continues', async () => {
    const s = await spec({}, counterCmd);
    const h = await driver.create(s, { tools });
    await waitFor(
      () => readCounter(h.upperDir),
      (v) => v > 2,
      'counter to start',
    );
    await driver.freeze(s.id);
    expect((await driver.stats(s.id)).frozen).toBe(true);
    expect((await driver.list()).find((x) => x.id === s.id)?.status).toBe('paused');
    const frozenAt = await readCounter(h.upperDir);
    await sleep(300);
    expect(await readCounter(h.upperDir)).toBe(frozenAt);
    await driver.freeze(s.id); // idempotent
    await driver.thaw(s.id);
    await waitFor(
      () => readCounter(h.upperDir),
      (v) => v > frozenAt,
      'counter to continue after thaw',
    );
    expect((await driver.stats(s.id)).frozen).toBe(false);
    await driver.destroy(s.id);
    await expect(driver.freeze(s.id)).rejects.toMatchObject({ reason: 'NotFound' });
  });

  it('destroy is idempotent and leaves no mounts, cgroups, runc state or dirs', async () => {
    const s = await spec({}, counterCmd);
    const h = await driver.create(s, { tools });
    await driver.freeze(s.id); // a frozen sandbox must be destroyable too
    await driver.destroy(s.id);
    expect(await leftovers(s.id)).toEqual([]);
    expect(await processGone(h.pid)).toBe(true);
    await driver.destroy(s.id);
    expect((await driver.list()).find((x) => x.id === s.id)).toBeUndefined();
  });

  it('reconcile after a crash removes everything not kept, including half-made sandboxes', async () => {
    const keep = await driver.create(await spec({}, counterCmd), { tools });
    const gone1 = await driver.create(await spec({}, counterCmd), { tools });
    const gone2 = await driver.create(await spec(), { tools });
    await driver.freeze(gone2.id);
    // A create that died half-way: a dir with a mounted overlay and a cgroup with a process in it, no runc state.
    const half = `t${process.pid}-half`;
    const hd = join(base, 'home', 'sandboxes', half);
    await mkdir(join(hd, 'upper'), { recursive: true });
    await mkdir(join(hd, 'work'));
    await mkdir(join(hd, 'rootfs'));
    await run('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      `lowerdir=${lower},upperdir=${hd}/upper,workdir=${hd}/work`,
      `${hd}/rootfs`,
    ]);
    const cgDir = `/sys/fs/cgroup/pids/${cgroupParent}/${half}`;
    await mkdir(cgDir, { recursive: true });
    const { spawn } = await import('node:child_process');
    const stray = spawn('sleep', ['600'], { stdio: 'ignore' });
    await writeFile(join(cgDir, 'cgroup.procs'), String(stray.pid));

    // Inside, the kept sandbox's root gives its root dir to another id of its range (it may).
    expect((await execInSandbox(keep.upperDir, 'chown 0:5 / && echo ok')).output).toBe('ok\n');
    const keepRoot = (await stat(keep.upperDir)).uid;
    const layerModes = async () =>
      (await readdir(lower, { recursive: true })).length +
      ':' +
      (await stat(join(lower, 'bin/busybox'))).mode.toString(8);
    const layersBefore = await layerModes();

    // The server "crashes": a new driver object on the same dirs starts up and reconciles.
    await driver.close(); // the old driver object is gone; its background work must not race the new one
    const fresh = newDriver();
    await fresh.init();
    // Its start-up pass over the sandbox dirs left the idmapped layer views (read-only mounts of the shared
    // layers) alone, and kept the kept sandbox's dir group at its range's root, not the upper's group.
    expect(await layerModes()).toBe(layersBefore);
    const keepDir = await stat(keep.sandboxDir);
    expect([keepDir.uid, keepDir.gid, (keepDir.mode & 0o7777).toString(8)]).toEqual([0, keepRoot, '710']);
    expect((await stat(keep.upperDir)).gid).toBe(keepRoot + 5);
    const report = await fresh.reconcile([keep.id]);
    expect(report.containers).toEqual(expect.arrayContaining([gone1.id, gone2.id]));
    expect(report.cgroups).toContain(half);
    expect(report.dirs).toEqual(expect.arrayContaining([gone1.id, gone2.id, half]));
    expect(report.containers).not.toContain(keep.id);
    for (const id of [gone1.id, gone2.id, half]) expect(await leftovers(id)).toEqual([]);
    await waitFor(
      async () => stray.exitCode !== null || stray.signalCode !== null,
      (v) => v,
      'stray process to die',
    );
    expect((await fresh.list()).map((x) => x.id)).toEqual([keep.id]);
    expect((await fresh.list())[0]).toMatchObject({ status: 'running', hasDir: true, rootfsMounted: false });
    const c = await readCounter(keep.upperDir);
    await waitFor(
      () => readCounter(keep.upperDir),
      (v) => v > c,
      'kept sandbox to keep running',
    );
    await fresh.destroy(keep.id);
    expect(await leftovers(keep.id)).toEqual([]);
    await fresh.close();
    driver = newDriver();
    await driver.init();
  });

  describe.skipIf(!hasCriu)('checkpoint / restore / fork (CRIU)', () => {
    // A process with state in memory (counter + a random secret) and a listening socket.
    const statefulCmd =
      'secret=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d " "); echo $secret > /tmp/secret; ' +
      'nc -ll -p 8080 -e echo hello & i=0; while :; do i=$((i+1)); echo $i > /tmp/count; usleep 50000; done';

    it('uses a CRIU that can dump TCP sockets on this kernel (>= 4.2)', () => {
      // CRIU 4.1 fails every dump of a sandbox with a TCP socket (envd) here: SO_PASSCRED -> EOPNOTSUPP.
      expect(
        versionAtLeast(driver.criuVersion ?? '0', '4.2'),
        `CRIU ${driver.criuVersion} at ${CRIU} is too old; install CRIU >= 4.2 (Debian sid) or set AENV_CRIU_PATH`,
      ).toBe(true);
    });

    it('checkpoint then restore under the same id: PIDs, counter and listener continue', async () => {
      const s = await spec({}, statefulCmd);
      const h = await driver.create(s, { tools });
      await waitFor(
        () => readCounter(h.upperDir),
        (v) => v > 3,
        'counter to start',
      );
      const pidsBefore = (await execInSandbox(h.upperDir, 'pidof nc')).output;
      const images = join(driver.captureRoot, `ckpt-${s.id}`);
      // The pause flow: CPU is released at once by the freezer, then the dump, its images written back as
      // they are written.
      await driver.freeze(s.id);
      const ck = await driver.checkpoint(s.id, images, { writeBack: true });
      expect(ck.imageBytes).toBeGreaterThan(0);
      // Not asked to be durable: a plain dir, and nothing said about durability.
      expect((await stat(images)).ino).not.toBe(256);
      expect(ck.durable).toBeUndefined();
      // CRIU archived the tmpfs mounts /dev and /dev/shm, not the empty ones masking directories (external
      // mounts: criu.ts, MaskedDirs).
      expect((await readdir(images)).filter((f) => /^tmpfs-dev-\d+\.tar\.gz\.img$/.test(f))).toHaveLength(2);
      const stopped = await readCounter(h.upperDir);
      // Processes, cgroups, runc state and the mounts (its own namespace's) are gone; the disk stays.
      expect(await leftovers(s.id)).toEqual([`dir ${h.sandboxDir}`]);
      expect((await driver.list()).find((x) => x.id === s.id)).toMatchObject({
        status: 'absent',
        hasDir: true,
        hasCgroup: false,
      });

      const r = await driver.restore(s, images, { tools });
      expect(r.pid).not.toBe(h.pid); // a new host PID; inside, the PIDs are the same
      const next = await waitFor(
        () => readCounter(h.upperDir),
        (v) => v > stopped,
        'counter to continue',
      );
      expect(next).toBeLessThan(stopped + 40); // continued from where it stopped, not restarted from 1
      const nc = (await execInSandbox(h.upperDir, 'pidof nc; nc 127.0.0.1 8080')).output;
      expect(nc.split('\n')[0]).toBe(pidsBefore.split('\n')[0]);
      expect(nc).toMatch(/hello/);
      expect(await readFile(`/proc/${r.pid}/status`, 'utf8')).toMatch(/Seccomp:\s+2/);
      // The masked directories came back masked: the empty read-only dir of the volume in their place.
      const masks = (await readFile(`/proc/${r.pid}/mountinfo`, 'utf8'))
        .split('\n')
        .map((l) => l.split(' '))
        .filter((f) => f[4] === '/sys/firmware' || f[4] === '/proc/acpi');
      expect(masks.length).toBeGreaterThan(0);
      for (const f of masks) {
        expect(f[3]).toMatch(/\/\.masked-empty$/);
        expect(f[5]?.split(',')).toContain('ro');
      }
      const probe = await execInSandbox(h.upperDir, 'ls -A /sys/firmware; touch /sys/firmware/x 2>&1; true');
      expect(probe.output).toMatch(/^touch: .*(Read-only file system|Permission denied)/);
      // CRIU made a new user namespace: its limits are set again.
      await driver.diskLimitSet(s.id);
      expect((await execInSandbox(h.upperDir, 'cat /proc/sys/user/max_inotify_instances')).output).toBe(
        '77\n',
      );
      expect((await readFile(`/proc/${r.pid}/uid_map`, 'utf8')).trim().split(/\s+/)).toEqual([
        '0',
        String(s.idRange.hostStart),
        '65536',
      ]);
      await rm(images, { recursive: true, force: true });
      await driver.destroy(s.id);
      expect(await leftovers(s.id)).toEqual([]);
    });

    it('fork: one leave-running dump restored into a second netns and dir; both run and diverge', async () => {
      const s = await spec({}, statefulCmd);
      const h = await driver.create(s, { tools });
      await waitFor(
        () => readCounter(h.upperDir),
        (v) => v > 3,
        'counter to start',
      );
      const secret = await readFile(join(h.upperDir, 'tmp/secret'), 'utf8');
      const images = join(driver.captureRoot, `fork-${s.id}`);
      const snap = join(driver.captureRoot, `fork-disk-${s.id}`);
      // Durable, as a pause asks: the images are a subvolume of their own, committed alone (no snapshot of it
      // is left behind), and so is the disk (a snapshot); restoring from them is as from any dir.
      const ck = await driver.checkpoint(s.id, images, { leaveRunning: true, diskDest: snap, durable: true });
      expect(ck.durable).toBe(true);
      expect((await stat(images)).ino).toBe(256);
      expect((await readdir(driver.captureRoot)).filter((n) => n.endsWith('.commit'))).toEqual([]);
      const atFork = Number((await readFile(join(snap, 'upper/tmp/count'), 'utf8')).trim());
      // The source keeps running.
      await waitFor(
        () => readCounter(h.upperDir),
        (v) => v > atFork,
        'source to keep running',
      );

      const child = await spec();
      const c = await driver.restore(child, images, { tools, disk: snap });
      expect(c.sandboxDir).not.toBe(h.sandboxDir);
      // The fork runs in its own range: its restored user namespace and its disk moved there.
      expect(child.idRange.hostStart).not.toBe(s.idRange.hostStart);
      expect((await readFile(`/proc/${c.pid}/uid_map`, 'utf8')).trim().split(/\s+/)).toEqual([
        '0',
        String(child.idRange.hostStart),
        '65536',
      ]);
      expect((await lstat(join(c.upperDir, 'tmp/secret'))).uid).toBe(child.idRange.hostStart);
      // Its sandbox dir lets only its own root pass (not the source's, whose disk it started from).
      const forkDir = await stat(c.sandboxDir);
      expect([forkDir.uid, forkDir.gid, (forkDir.mode & 0o7777).toString(8)]).toEqual([
        0,
        child.idRange.hostStart,
        '710',
      ]);
      expect(await readdir(images)).not.toContain(`.userns-${child.id}`);
      await waitFor(
        () => readCounter(c.upperDir),
        (v) => v > atFork,
        'fork counter to continue',
      );
      expect(await readFile(join(c.upperDir, 'tmp/secret'), 'utf8')).toBe(secret); // same memory/disk at the fork
      expect((await execInSandbox(c.upperDir, 'hostname; cat /etc/hostname; nc 127.0.0.1 8080')).output).toBe(
        `${child.id}\n${child.id}\nhello\n`,
      );
      // They diverge: writes in one are not seen in the other.
      await execInSandbox(c.upperDir, 'echo child > /tmp/who; chown 1000 /tmp/who');
      await execInSandbox(h.upperDir, 'echo parent > /tmp/who');
      expect((await lstat(join(c.upperDir, 'tmp/who'))).uid).toBe(child.idRange.hostStart + 1000);
      expect(await readFile(join(c.upperDir, 'tmp/who'), 'utf8')).toBe('child\n');
      expect(await readFile(join(h.upperDir, 'tmp/who'), 'utf8')).toBe('parent\n');
      const [pc, cc] = [await driver.stats(s.id), await driver.stats(child.id)];
      expect(pc.pids).toBeGreaterThan(0);
      expect(cc.pids).toBeGreaterThan(0);
      await driver.removeDisk(snap);
      await rm(images, { recursive: true, force: true });
      await driver.destroy(child.id);
      await driver.destroy(s.id);
      expect(await leftovers(child.id)).toEqual([]);
    });

    it('refuses a restore with another tools version and reports CRIU failures clearly', async () => {
      const s = await spec({}, counterCmd);
      await driver.create(s, { tools });
      const images = join(driver.captureRoot, `ckpt-tools-${s.id}`);
      await driver.checkpoint(s.id, images);
      await expect(driver.restore(s, images, { tools: { ...tools, version: 'other' } })).rejects.toThrow(
        /taken with tools test-tools-1, not other/,
      );
      // The disk survives the refused restore, and a correct one still works — here into another netns
      // (a resume into a different slot): the process lands in it and /sys is remounted from it.
      const otherNs = await newNetns();
      const r = await driver.restore({ ...s, netnsPath: otherNs }, images, { tools });
      expect((await stat(`/proc/${r.pid}/ns/net`)).ino).toBe((await stat(otherNs)).ino);
      expect((await readFile(join(r.sandboxDir, 'bundle/config.json'), 'utf8')).includes(otherNs)).toBe(true);
      await driver.destroy(s.id);
      // A damaged image: restore fails with CRIU's own error text, and leaves no half sandbox.
      const child = await spec();
      const snapDir = join(driver.captureRoot, `empty-disk-${s.id}`);
      await mkdir(join(snapDir, 'upper'), { recursive: true });
      for (const f of await readdir(images)) if (f.startsWith('pstree')) await rm(join(images, f));
      const err = await driver.restore(child, images, { tools, disk: snapDir }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RuntimeError);
      expect((err as RuntimeError).reason).toBe('RestoreFailed');
      expect((err as Error).message).toMatch(/restore of .* failed: .*Error|restore of .* failed/);
      expect(await leftovers(child.id)).toEqual([]);
      await rm(images, { recursive: true, force: true });
      await rm(snapDir, { recursive: true, force: true });
    });
  });

  describe.skipIf(!hasBase)('Debian base image', () => {
    it('runs with the base image: sudo works for user 1000, package files owned by root inside', async () => {
      const layers = await unpackOciLayout(BASE_IMAGE, 'latest', join(base, 'base-layers'), UID_START);
      const s = await spec({ rootfs: { layers } });
      const h = await driver.create(s, { tools });
      const r = await execInSandbox(
        h.upperDir,
        'stat -c %U /usr/bin/sudo; su user -c "id -u; sudo -n id -u"; useradd -m bob && su bob -c "touch ~/f" && echo ok',
        60_000,
      );
      expect(r.output).toBe('root\n1000\n0\nok\n');
      const bobFile = await lstat(join(h.upperDir, 'home/bob/f'));
      expect(bobFile.uid).toBeGreaterThan(UID_START);
      await driver.destroy(s.id);
    });
  });
});
