// The sandbox volume: loop-file btrfs creation and re-mounting, subvolume snapshots, and the copy
// fallback on a filesystem without reflink. Root only.
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../../util/exec.js';
import { CowVolume } from './cow-volume.js';
import { buildIdmapHelper } from './idmap-helper.js';
import { readMounts } from './mountinfo.js';

const IS_ROOT = process.getuid?.() === 0;

/** Whether this kernel has XFS quotas (CONFIG_XFS_QUOTA; not set on this project's machines). */
async function hasXfsQuotas(): Promise<boolean> {
  const dir = await mkdtemp('/var/tmp/aenv-xfs-probe-');
  try {
    await run('truncate', ['-s', '320M', join(dir, 'img')]);
    await run('mkfs.xfs', ['-q', join(dir, 'img')]);
    await mkdir(join(dir, 'm'));
    const r = await run('mount', ['-o', 'loop,prjquota', join(dir, 'img'), join(dir, 'm')], {
      allowFailure: true,
    });
    if (r.code === 0) await run('umount', [join(dir, 'm')]);
    return r.code === 0;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
const XFS_QUOTAS = IS_ROOT && (await hasXfsQuotas());
if (IS_ROOT && !XFS_QUOTAS)
  console.warn('this kernel has no XFS quotas: the XFS project quota test is skipped');

async function isMounted(dir: string): Promise<boolean> {
  return (await readMounts()).some((m) => m.mountPoint === dir);
}

async function mountOptions(dir: string): Promise<string[]> {
  return (await readMounts()).filter((m) => m.mountPoint === dir).pop()?.mountOptions ?? [];
}

describe.skipIf(!IS_ROOT)('CowVolume on this host', () => {
  let base: string;
  let helper: string;

  beforeAll(async () => {
    base = await mkdtemp('/var/tmp/aenv-cow-test-');
    helper = await buildIdmapHelper(join(base, 'native'));
  });

  /** The loop volume the first test made (`home1`), opened again. */
  async function firstVolume(): Promise<{ sandboxes: string; vol: CowVolume }> {
    const sandboxes = join(base, 'home1', 'sandboxes');
    const vol = new CowVolume({
      homePath: join(base, 'home1'),
      sandboxesDir: sandboxes,
      mode: 'auto',
      sizeGb: 2,
    });
    await vol.init();
    return { sandboxes, vol };
  }

  afterAll(async () => {
    for (const m of (await readMounts()).filter((x) => x.mountPoint.startsWith(base)).reverse()) {
      await run('umount', [m.mountPoint], { allowFailure: true });
    }
    await rm(base, { recursive: true, force: true });
  });

  it('creates a sparse loop btrfs once, mounts it again after a restart, never formats it again', async () => {
    const home = join(base, 'home1');
    const sandboxes = join(home, 'sandboxes');
    const vol = new CowVolume({ homePath: home, sandboxesDir: sandboxes, mode: 'loop-btrfs', sizeGb: 2 });
    await vol.init();
    expect(vol.kind).toBe('btrfs');
    expect(await isMounted(sandboxes)).toBe(true);
    // Host users may never use a setuid file or device node a sandbox put there.
    expect(await mountOptions(sandboxes)).toEqual(expect.arrayContaining(['nosuid', 'nodev', 'noatime']));
    const img = await stat(vol.imagePath);
    expect(img.size).toBe(2 * 1024 ** 3);
    expect(img.blocks * 512).toBeLessThan(256 * 1024 ** 2); // sparse
    await writeFile(join(sandboxes, 'marker'), 'kept');
    // Its loop device reads and writes the image with direct I/O (no second copy in the host's page cache).
    expect(vol.loopDirectIo).toBe('on');
    const loop = (await readMounts()).find((m) => m.mountPoint === sandboxes)?.source ?? '';
    expect(loop).toMatch(/^\/dev\/loop\d+$/);
    const dio = join('/sys/block', loop.slice('/dev/'.length), 'loop', 'dio');
    expect((await readFile(dio, 'utf8')).trim()).toBe('1');

    // Second start while mounted (by an older version, without the flags or direct I/O): both are put right.
    await run('mount', ['-o', 'remount,bind,suid,dev', sandboxes]);
    await run('losetup', ['--direct-io=off', loop]);
    expect(await mountOptions(sandboxes)).not.toContain('nosuid');
    expect((await readFile(dio, 'utf8')).trim()).toBe('0');
    const second = new CowVolume({ homePath: home, sandboxesDir: sandboxes, mode: 'loop-btrfs', sizeGb: 2 });
    await second.init();
    expect(await mountOptions(sandboxes)).toEqual(expect.arrayContaining(['nosuid', 'nodev', 'noatime']));
    expect(second.loopDirectIo).toBe('on');
    expect((await readFile(dio, 'utf8')).trim()).toBe('1');
    // After a reboot (unmounted): mounted again, same filesystem, data intact.
    await run('umount', [sandboxes]);
    expect(await isMounted(sandboxes)).toBe(false);
    const again = new CowVolume({ homePath: home, sandboxesDir: sandboxes, mode: 'auto', sizeGb: 5 });
    await again.init();
    expect(again.kind).toBe('btrfs');
    expect(await readFile(join(sandboxes, 'marker'), 'utf8')).toBe('kept');
    expect((await stat(vol.imagePath)).size).toBe(2 * 1024 ** 3); // a new size does not re-format
  });

  it('refuses to mount over a non-empty dir and to use a damaged image, touching neither', async () => {
    const home = join(base, 'home2');
    const sandboxes = join(home, 'sandboxes');
    await mkdir(sandboxes, { recursive: true });
    await writeFile(join(sandboxes, 'stray'), 'x');
    const vol = new CowVolume({ homePath: home, sandboxesDir: sandboxes, mode: 'loop-btrfs', sizeGb: 1 });
    await expect(vol.init()).rejects.toThrow(/not empty and not mounted/);
    await rm(join(sandboxes, 'stray'));
    await writeFile(vol.imagePath, Buffer.alloc(1024 * 1024)); // not a filesystem
    await expect(vol.init()).rejects.toThrow(/cannot mount the CoW volume .* kept as is/);
    expect((await stat(vol.imagePath)).size).toBe(1024 * 1024);
    await expect(
      new CowVolume({ homePath: home, sandboxesDir: sandboxes, mode: 'loop-btrfs', sizeGb: 0 }).init(),
    ).rejects.toThrow(/cow_volume_size_gb/);
  });

  it('snapshots subvolumes with whiteouts, opaque dirs and owners intact; removes them', async () => {
    const { sandboxes, vol } = await firstVolume();
    const src = join(sandboxes, 'src');
    await vol.createDir(src);
    expect(await vol.isSubvolume(src)).toBe(true);
    await mkdir(join(src, 'upper/etc'), { recursive: true });
    await writeFile(join(src, 'upper/etc/file'), 'data');
    await run('chown', ['-R', '100000:100000', join(src, 'upper')]);
    await run('mknod', [join(src, 'upper/gone'), 'c', '0', '0']); // an overlay whiteout
    await run('python3', [
      '-c',
      `import os; os.setxattr('${join(src, 'upper/etc')}', 'trusted.overlay.opaque', b'y')`,
    ]);
    const dest = join(sandboxes, 'dest');
    await vol.cloneDir(src, dest);
    expect(await vol.isSubvolume(dest)).toBe(true);
    expect(await readFile(join(dest, 'upper/etc/file'), 'utf8')).toBe('data');
    expect((await lstat(join(dest, 'upper/etc/file'))).uid).toBe(100000);
    const wh = await lstat(join(dest, 'upper/gone'));
    expect(wh.isCharacterDevice() && wh.rdev === 0).toBe(true);
    const { stdout } = await run('python3', [
      '-c',
      `import os; print(os.getxattr('${join(dest, 'upper/etc')}', 'trusted.overlay.opaque'))`,
    ]);
    expect(stdout.trim()).toBe("b'y'");
    // Copies are independent.
    await writeFile(join(dest, 'upper/etc/file'), 'changed');
    expect(await readFile(join(src, 'upper/etc/file'), 'utf8')).toBe('data');
    await vol.removeDir(dest);
    await vol.removeDir(src);
    await vol.removeDir(src); // idempotent
    expect((await run('btrfs', ['subvolume', 'list', '-o', sandboxes])).stdout.trim()).toBe('');
  });

  it("makes a durable dir a subvolume and commits it alone: its data is written, a neighbour's is not", async () => {
    const { sandboxes, vol } = await firstVolume();
    vol.useHelper(helper);
    const dir = join(sandboxes, 'paused', 'memory');
    await mkdir(join(sandboxes, 'paused'));
    expect(await vol.durableDir(dir)).toBe(true);
    expect(await vol.isSubvolume(dir)).toBe(true);
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    await expect(vol.durableDir(dir)).rejects.toThrow(/File exists/);
    // What the kernel has not written yet is a delalloc extent (FIEMAP): the dir's file stops being one, the
    // neighbour's (same volume, outside the dir) stays one: the commit wrote back nothing of anyone else's.
    const delalloc = async (file: string) =>
      (await run('filefrag', ['-v', file])).stdout.includes('delalloc');
    const mine = join(dir, 'pages.img');
    const neighbour = join(sandboxes, 'neighbour');
    await writeFile(mine, Buffer.alloc(1 << 20, 1));
    await writeFile(neighbour, Buffer.alloc(1 << 20, 2));
    expect([await delalloc(mine), await delalloc(neighbour)]).toEqual([true, true]);
    await vol.commit(dir);
    expect([await delalloc(mine), await delalloc(neighbour)]).toEqual([false, true]);
    // The snapshot that made the commit is gone again; one a crash left behind is replaced.
    expect((await readdir(join(sandboxes, 'paused'))).sort()).toEqual(['memory']);
    await vol.cloneDir(dir, `${dir}.commit`);
    await vol.commit(dir);
    expect(await readdir(join(sandboxes, 'paused'))).toEqual(['memory']);
    // Only a subvolume can be committed; outside the volume a durable dir is a plain dir (the caller syncs).
    await expect(vol.commit(join(sandboxes, 'paused'))).rejects.toThrow(/is not a btrfs subvolume/);
    const outside = join(base, 'outside-durable');
    expect(await vol.durableDir(outside)).toBe(false);
    expect(await vol.isSubvolume(outside)).toBe(false);
    // An ordinary recursive delete removes it, as it does any pause dir.
    await rm(join(sandboxes, 'paused'), { recursive: true });
    await rm(neighbour);
    await rm(outside, { recursive: true });
    expect((await run('btrfs', ['subvolume', 'list', '-o', sandboxes])).stdout.trim()).toBe('');
  });

  it('turns quotas on for disk limits on its own volume, and off again when limits are not wanted', async () => {
    const home = join(base, 'home-quota');
    const sandboxes = join(home, 'sandboxes');
    const opts = { homePath: home, sandboxesDir: sandboxes, mode: 'loop-btrfs' as const, sizeGb: 1 };
    const quotasOn = async () =>
      (await run('btrfs', ['qgroup', 'show', sandboxes], { allowFailure: true })).code === 0;
    const limited = new CowVolume({ ...opts, diskLimits: true });
    await limited.init();
    expect(limited.enforcesLimits).toBe(true);
    expect(await quotasOn()).toBe(true);
    const dir = join(sandboxes, 'sb');
    await limited.createDir(dir);
    await expect(limited.limitDir(dir, 8)).rejects.toThrow(/useHelper\(\) has not run/);
    limited.useHelper(helper);
    await limited.limitDir(dir, 8);
    await expect(writeFile(join(dir, 'big'), Buffer.alloc(16 << 20))).rejects.toMatchObject({ errno: -122 });
    await rm(join(dir, 'big'), { force: true });
    // The limit is the subvolume's own: the volume's top level stays unlimited.
    const limits = (await run('btrfs', ['qgroup', 'show', '-re', '--raw', sandboxes])).stdout;
    expect(limits).toMatch(/^0\/5\s+\d+\s+\d+\s+none\s+none/m);
    expect(limits).toMatch(new RegExp(`^0/\\d+\\s+\\d+\\s+\\d+\\s+${8 << 20}\\s+none`, 'm'));
    await expect(limited.limitDir(join(sandboxes, 'plain'), 8)).rejects.toThrow(/not a btrfs subvolume/);
    // The helper refuses a plain dir too (it would limit the subvolume holding it: here the whole volume).
    await mkdir(join(sandboxes, 'plain'));
    await expect(
      run(helper, ['qgroup-limit', join(sandboxes, 'plain'), '8388608', sandboxes]),
    ).rejects.toThrow(/is not a btrfs subvolume/);
    await limited.unlimitDir(dir);
    await writeFile(join(dir, 'big'), Buffer.alloc(16 << 20));
    await limited.removeDir(dir);

    const unlimited = new CowVolume({ ...opts, diskLimits: false });
    await unlimited.init();
    expect(unlimited.enforcesLimits).toBe(false);
    expect(await quotasOn()).toBe(false);
    await unlimited.createDir(dir);
    await unlimited.limitDir(dir, 8); // no-op
    await writeFile(join(dir, 'big'), Buffer.alloc(16 << 20));
    await unlimited.removeDir(dir);
    await run('umount', [sandboxes]);
  });

  const xfs = async (name: string, options: string) => {
    const img = join(base, `${name}.img`);
    const mnt = join(base, name);
    await run('truncate', ['-s', '512M', img]);
    await run('mkfs.xfs', ['-q', '-f', '-m', 'reflink=1', img]);
    await mkdir(mnt, { recursive: true });
    await run('mount', ['-o', `loop,${options}`, img, mnt]);
    return mnt;
  };

  it.skipIf(!XFS_QUOTAS)(
    'enforces disk limits on a host XFS mounted with prjquota (XFS project quotas)',
    async () => {
      const home = await xfs('xfs-pq', 'prjquota');
      const sandboxes = join(home, 'sandboxes');
      const vol = new CowVolume({
        homePath: home,
        sandboxesDir: sandboxes,
        mode: 'host',
        sizeGb: 1,
        diskLimits: true,
      });
      await vol.init();
      expect([vol.kind, vol.enforcesLimits]).toEqual(['reflink', true]);
      const dir = join(sandboxes, 'sb');
      await vol.createDir(dir);
      await mkdir(join(dir, 'upper/sub'), { recursive: true });
      await writeFile(join(dir, 'upper/sub/before'), Buffer.alloc(2 << 20));
      await vol.limitDir(dir, 8);
      // What was there counts, new files and dirs below inherit the project: 16 MiB more does not fit.
      await expect(writeFile(join(dir, 'upper/sub/big'), Buffer.alloc(16 << 20))).rejects.toMatchObject({
        errno: -122,
      });
      await mkdir(join(dir, 'upper/new-dir'));
      await expect(writeFile(join(dir, 'upper/new-dir/big'), Buffer.alloc(16 << 20))).rejects.toMatchObject({
        errno: -122,
      });
      await rm(join(dir, 'upper/sub/big'), { force: true });
      await rm(join(dir, 'upper/new-dir/big'), { force: true });
      await vol.unlimitDir(dir);
      await writeFile(join(dir, 'upper/sub/big'), Buffer.alloc(16 << 20));
      await vol.removeDir(dir);
      await run('umount', [sandboxes]);
      await run('umount', [home]);
    },
  );

  it('refuses disk limits it cannot enforce (XFS without project quotas); auto then uses its own volume', async () => {
    const plain = await xfs('xfs-noq', 'noquota');
    const opts = { homePath: plain, sandboxesDir: join(plain, 'sandboxes'), sizeGb: 1, diskLimits: true };
    await expect(new CowVolume({ ...opts, mode: 'host' }).init()).rejects.toThrow(
      /runtime.disk_limits is on, but the disks of sandboxes in .*\(xfs\) cannot be limited: that needs btrfs, or XFS mounted with prjquota/,
    );
    await run('umount', [join(plain, 'sandboxes')]);
    const auto = new CowVolume({ ...opts, mode: 'auto' });
    await auto.init();
    expect([auto.kind, auto.enforcesLimits]).toEqual(['btrfs', true]);
    await run('umount', [join(plain, 'sandboxes')]);
    // Without limits wanted, the same host XFS is used as it is.
    await rm(auto.imagePath, { force: true });
    const unlimited = new CowVolume({ ...opts, mode: 'auto', diskLimits: false });
    await unlimited.init();
    expect([unlimited.kind, unlimited.enforcesLimits]).toEqual(['reflink', false]);
    await run('umount', [join(plain, 'sandboxes')]);
    await run('umount', [plain]);
  });

  it('falls back to full copies in host mode on a filesystem without reflink', async () => {
    const home = join(base, 'home3');
    const sandboxes = join(home, 'sandboxes');
    const fsType = (await run('stat', ['-f', '-c', '%T', base])).stdout.trim();
    const vol = new CowVolume({ homePath: home, sandboxesDir: sandboxes, mode: 'host', sizeGb: 1 });
    await vol.init();
    // On the host's filesystem, a bind mount of the dir onto itself carries nosuid and nodev.
    expect(await mountOptions(sandboxes)).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
    expect(vol.loopDirectIo).toBeUndefined(); // no loop device of aenv's
    if (fsType === 'ext2/ext3') expect(vol.kind).toBe('copy');
    const src = join(sandboxes, 'a');
    await vol.createDir(src);
    await mkdir(join(src, 'upper'));
    await writeFile(join(src, 'upper/f'), 'x');
    await vol.cloneDir(src, join(sandboxes, 'b'));
    expect(await readFile(join(sandboxes, 'b/upper/f'), 'utf8')).toBe('x');
    await vol.removeDir(join(sandboxes, 'b'));
    await vol.removeDir(src);
    await run('umount', [sandboxes]);
  });
});
