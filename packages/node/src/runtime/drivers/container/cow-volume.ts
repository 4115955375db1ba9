import {
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  statfs,
  unlink,
  writeFile,
} from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { CommandError, run } from '../../../util/exec.js';
import { RuntimeError } from '../../driver.js';
import type { MountEntry } from './mountinfo.js';
import { readMounts } from './mountinfo.js';
import { exists } from '../../../util/fs.js';

export type CowVolumeMode = 'auto' | 'host' | 'loop-btrfs';

/**
 * How sandbox disks are copied:
 * - btrfs: every sandbox dir is a subvolume; snapshots take milliseconds whatever the size.
 * - reflink: plain dirs; `cp --reflink` shares extents (xfs with reflink, or btrfs without subvolumes).
 * - copy: plain dirs, full copies (ext4): correct, but slow for big uppers.
 */
export type CowKind = 'btrfs' | 'reflink' | 'copy';

export interface CowVolumeOptions {
  /** `<homePath>`: holds the loop image when one is needed. */
  homePath: string;
  /** `<homePath>/sandboxes`: where sandbox dirs live. */
  sandboxesDir: string;
  mode: CowVolumeMode;
  sizeGb: number;
  /**
   * Per-sandbox disk limits (`limitDir`): btrfs quota groups (turned on for aenv's own loop volume; on a host
   * btrfs used only when its quotas are already on, as turning them on affects the whole filesystem), or XFS
   * project quotas (the host filesystem mounted with prjquota). When wanted and neither is possible, `init`
   * refuses (in `auto` mode aenv's own volume is used instead of such a host filesystem).
   */
  diskLimits?: boolean;
}

// mkfs label of the loop volume aenv creates: quotas on it are aenv's to manage.
const LOOP_VOLUME_LABEL = 'aenv-cow';
/**
 * Every host-side path to sandbox files: a setuid binary or a device node a sandbox writes there is inert
 * for host users (inside, the overlay decides: see mounts.ts).
 */
export const VOLUME_MOUNT_FLAGS = ['nosuid', 'nodev'];

const BTRFS_MAGIC = 0x9123683e;
const XFS_MAGIC = 0x58465342;
/** XFS project ids are 32 bits; 0 is "no project" and 2^32-1 is reserved. */
const MAX_PROJECT_ID = 2 ** 32 - 2;
// The root directory of every btrfs subvolume has this inode number (BTRFS_FIRST_FREE_OBJECTID).
const BTRFS_SUBVOL_INO = 256;

async function nearestExisting(path: string): Promise<string> {
  let p = path;
  while (!(await exists(p))) p = dirname(p);
  return p;
}

async function isBtrfs(path: string): Promise<boolean> {
  return (await statfs(path)).type === BTRFS_MAGIC;
}

/** The mount holding `path` (the deepest mount point above it). */
export async function mountOf(path: string): Promise<MountEntry> {
  let best: MountEntry | undefined;
  for (const m of await readMounts()) {
    const prefix = m.mountPoint === '/' ? '/' : `${m.mountPoint}/`;
    if (path !== m.mountPoint && !path.startsWith(prefix)) continue;
    if (!best || m.mountPoint.length >= best.mountPoint.length) best = m;
  }
  if (!best) throw new RuntimeError('Internal', `no mount holds ${path}`);
  return best;
}

/** Whether `path` is on XFS mounted with project quotas enforced. */
async function xfsWithProjectQuotas(path: string): Promise<boolean> {
  if ((await statfs(path)).type !== XFS_MAGIC) return false;
  const opts = (await mountOf(path)).superOptions;
  return opts.includes('prjquota') || opts.includes('pquota');
}

/**
 * The project id of a sandbox dir: its inode number, unique among the dirs that exist on the filesystem
 * (each sandbox dir is a direct child of the volume root and lives as long as its project).
 */
function projectId(ino: number): number {
  if (ino >= 1 && ino <= MAX_PROJECT_ID) return ino;
  return (ino % MAX_PROJECT_ID) + 1;
}

/** Whether `cp --reflink=always` works inside `dir` (xfs with reflink=1, btrfs). */
async function canReflink(dir: string): Promise<boolean> {
  const a = join(dir, `.aenv-reflink-probe-${process.pid}`);
  const b = `${a}.clone`;
  try {
    await writeFile(a, 'probe');
    const r = await run('cp', ['--reflink=always', a, b], { allowFailure: true });
    return r.code === 0;
  } finally {
    await rm(a, { force: true });
    await rm(b, { force: true });
  }
}

/** The filesystem sandbox dirs live on, and the copy-on-write operations it offers. */
export class CowVolume {
  private kindValue: CowKind | null = null;
  private limitsValue = false;
  private loopDirectIoValue: 'on' | 'off' | undefined;
  private helper: string | undefined;

  constructor(readonly opts: CowVolumeOptions) {}

  get kind(): CowKind {
    if (!this.kindValue) throw new Error('CowVolume.init() has not run');
    return this.kindValue;
  }

  /** Whether `limitDir` enforces limits (after init). */
  get enforcesLimits(): boolean {
    return this.limitsValue;
  }

  /**
   * The uid helper (`aenv-idmap`), whose `qgroup-limit` command sets btrfs limits (needed before `limitDir`)
   * and whose `subvolume` and `commit` commands make the dirs `durableDir` offers.
   */
  useHelper(path: string): void {
    this.helper = path;
  }

  get imagePath(): string {
    return join(this.opts.homePath, 'cow-volume.img');
  }

  /**
   * Prepares `sandboxesDir`. Idempotent: an existing loop image is mounted again after a reboot or crash,
   * never formatted again; a fresh one is formatted under a temporary name and renamed when complete.
   */
  async init(): Promise<void> {
    await this.initVolume();
    this.loopDirectIoValue = await this.turnOnLoopDirectIo();
    const wanted = this.opts.diskLimits === true;
    if (this.kind === 'btrfs') this.limitsValue = await this.setUpQuotas(wanted);
    else this.limitsValue = wanted && (await xfsWithProjectQuotas(this.opts.sandboxesDir));
    if (wanted && !this.limitsValue) {
      const fs = (await mountOf(this.opts.sandboxesDir)).fsType;
      throw new RuntimeError(
        'HostSetup',
        `runtime.disk_limits is on, but the disks of sandboxes in ${this.opts.sandboxesDir} (${fs}) cannot be limited: ` +
          (this.kind === 'btrfs'
            ? 'btrfs quotas are off on this host filesystem (`btrfs quota enable` turns them on for all of it). '
            : 'that needs btrfs, or XFS mounted with prjquota. ') +
          'Use runtime.cow_volume = "loop-btrfs" (aenv\'s own volume, which enforces them), or set runtime.disk_limits = false to run without',
      );
    }
  }

  /**
   * The loop device under aenv's own volume reads and writes its image file with direct I/O: without it every
   * block the volume writes is cached twice (once as the volume's page, once as the image file's) and a sync
   * has to push it through both, so a durable pause of 256 MB waited ≈ 150 ms more. Turned on at every start
   * (a loop device made by `mount -o loop` has it off). 'off': the backing filesystem refused it (tmpfs);
   * undefined: no loop volume of aenv's.
   */
  get loopDirectIo(): 'on' | 'off' | undefined {
    return this.loopDirectIoValue;
  }

  private async turnOnLoopDirectIo(): Promise<'on' | 'off' | undefined> {
    const { source } = await mountOf(this.opts.sandboxesDir);
    const loop = /^\/dev\/(loop\d+)$/.exec(source)?.[1];
    if (!loop) return undefined;
    const sys = `/sys/block/${loop}/loop`;
    const backing = await readFile(join(sys, 'backing_file'), 'utf8').catch(() => '');
    if (backing.trim() !== this.imagePath) return undefined;
    if ((await readFile(join(sys, 'dio'), 'utf8').catch(() => '0')).trim() === '1') return 'on';
    const set = await run('losetup', ['--direct-io=on', source], { allowFailure: true });
    return set.code === 0 && (await readFile(join(sys, 'dio'), 'utf8')).trim() === '1' ? 'on' : 'off';
  }

  private async initVolume(): Promise<void> {
    const { sandboxesDir, mode } = this.opts;
    await mkdir(this.opts.homePath, { recursive: true, mode: 0o711 });
    const mounted = (await readMounts()).find((m) => m.mountPoint === sandboxesDir);
    if (mounted) {
      // Mounted by an older version (or before a crash): the flags are put right on every start.
      if (!VOLUME_MOUNT_FLAGS.every((f) => mounted.mountOptions.includes(f))) {
        const options = [...new Set([...mounted.mountOptions, ...VOLUME_MOUNT_FLAGS])];
        await run('mount', ['-o', `remount,bind,${options.join(',')}`, sandboxesDir]);
      }
      this.kindValue = await this.detectKind(sandboxesDir);
      if (mode === 'loop-btrfs' && this.kindValue !== 'btrfs') {
        throw new RuntimeError(
          'HostSetup',
          `${sandboxesDir} is a ${mounted.fsType} mount, not the btrfs CoW volume`,
        );
      }
      return;
    }
    if (
      mode === 'host' ||
      (mode === 'auto' && (await this.hostCanCow()) && (await this.hostCanLimitIfWanted()))
    ) {
      await mkdir(sandboxesDir, { recursive: true, mode: 0o711 });
      // A bind mount of the dir onto itself carries the flags the host filesystem's mount lacks.
      await run('mount', ['--bind', sandboxesDir, sandboxesDir]);
      await run('mount', ['-o', `remount,bind,${VOLUME_MOUNT_FLAGS.join(',')}`, sandboxesDir]);
      this.kindValue = await this.detectKind(sandboxesDir);
      return;
    }
    if (mode !== 'auto' && mode !== 'loop-btrfs') {
      throw new RuntimeError(
        'HostSetup',
        `runtime.cow_volume = ${JSON.stringify(mode)}: must be auto, host or loop-btrfs`,
      );
    }
    await this.mountLoopVolume();
    this.kindValue = 'btrfs';
  }

  /** `auto` picks the host filesystem only when it can also enforce disk limits (if they are wanted). */
  private async hostCanLimitIfWanted(): Promise<boolean> {
    if (this.opts.diskLimits !== true) return true;
    const probeDir = await nearestExisting(this.opts.sandboxesDir);
    if (await isBtrfs(probeDir)) {
      return (await run('btrfs', ['qgroup', 'show', probeDir], { allowFailure: true })).code === 0;
    }
    return xfsWithProjectQuotas(probeDir);
  }

  private async hostCanCow(): Promise<boolean> {
    const probeDir = await nearestExisting(this.opts.sandboxesDir);
    return (await isBtrfs(probeDir)) || (await canReflink(probeDir));
  }

  private async detectKind(dir: string): Promise<CowKind> {
    if (await isBtrfs(dir)) return 'btrfs';
    return (await canReflink(dir)) ? 'reflink' : 'copy';
  }

  private async mountLoopVolume(): Promise<void> {
    const { sandboxesDir, sizeGb } = this.opts;
    const img = this.imagePath;
    if (!(Number.isInteger(sizeGb) && sizeGb >= 1)) {
      throw new RuntimeError('HostSetup', `runtime.cow_volume_size_gb = ${sizeGb}: must be an integer >= 1`);
    }
    await mkdir(sandboxesDir, { recursive: true, mode: 0o711 });
    const entries = await readdir(sandboxesDir);
    if (entries.length > 0) {
      throw new RuntimeError(
        'HostSetup',
        `${sandboxesDir} is not empty and not mounted; refusing to mount the CoW volume over existing files`,
      );
    }
    if (!(await exists(img))) {
      const tmp = `${img}.tmp`;
      await rm(tmp, { force: true });
      const fh = await open(tmp, 'wx', 0o600);
      try {
        await fh.truncate(sizeGb * 1024 ** 3); // sparse: blocks are allocated as sandboxes write
      } finally {
        await fh.close();
      }
      try {
        await run('mkfs.btrfs', ['-q', '-K', '-L', LOOP_VOLUME_LABEL, tmp]);
      } catch (e) {
        await unlink(tmp).catch(() => {});
        throw new RuntimeError('HostSetup', `cannot format the CoW volume: ${(e as Error).message}`, {
          cause: e,
        });
      }
      await rename(tmp, img);
    }
    try {
      await run('mount', [
        '-t',
        'btrfs',
        '-o',
        `loop,noatime,discard=async,${VOLUME_MOUNT_FLAGS.join(',')}`,
        img,
        sandboxesDir,
      ]);
    } catch (e) {
      throw new RuntimeError(
        'HostSetup',
        `cannot mount the CoW volume ${img} at ${sandboxesDir} (the image is kept as is): ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  /**
   * Limits wanted: aenv's own volume gets quotas turned on; a host btrfs must have them already. Not wanted:
   * aenv's own volume gets them turned off (their accounting costs a little on every commit); a host btrfs
   * is left as its admin set it.
   */
  private async setUpQuotas(wanted: boolean): Promise<boolean> {
    const dir = this.opts.sandboxesDir;
    const label = await run('btrfs', ['filesystem', 'label', dir], { allowFailure: true });
    const ownVolume = label.code === 0 && label.stdout.trim() === LOOP_VOLUME_LABEL;
    if (!wanted) {
      if (ownVolume) await run('btrfs', ['quota', 'disable', dir]);
      return false;
    }
    if (ownVolume) {
      await run('btrfs', ['quota', 'enable', dir]);
      // Quota groups of subvolumes deleted before (older kernels keep them) are only clutter.
      await run('btrfs', ['qgroup', 'clear-stale', dir], { allowFailure: true });
      return true;
    }
    const probe = await run('btrfs', ['qgroup', 'show', dir], { allowFailure: true });
    return probe.code === 0;
  }

  /**
   * Limits what can be written in the sandbox dir `path` (a subvolume) to `mb` MiB in total, counting data it
   * shares with the snapshot it was cloned from. No-op where limits are not enforced.
   */
  async limitDir(path: string, mb: number | undefined): Promise<void> {
    if (!this.limitsValue || mb === undefined) return;
    if (this.kind !== 'btrfs') return this.setProjectLimit(path, mb);
    // On a plain dir `qgroup limit` would limit the subvolume holding it (the whole volume).
    if (!(await this.isSubvolume(path))) {
      throw new RuntimeError('Internal', `${path} is not a btrfs subvolume: cannot limit its disk`);
    }
    await this.setQgroupLimit(path, mb * 1024 * 1024);
  }

  /** Removes the limit of `path` (a btrfs snapshot inherits its source's). No-op where limits are not enforced. */
  async unlimitDir(path: string): Promise<void> {
    if (!this.limitsValue) return;
    if (this.kind !== 'btrfs') return (await exists(path)) ? this.setProjectLimit(path, 0) : undefined;
    if (!(await this.isSubvolume(path))) return;
    await this.setQgroupLimit(path, 'none');
  }

  /**
   * XFS: `path` and everything below it become one project (new files inherit it), limited to `mb` MiB of
   * blocks (0 = no limit). Only the host's root may change a file's project, so the sandbox cannot leave it.
   */
  private async setProjectLimit(path: string, mb: number): Promise<void> {
    const id = projectId((await lstat(path)).ino);
    const mnt = (await mountOf(path)).mountPoint;
    const cmds = mb > 0 ? ['-c', `project -s -p ${path} ${id}`] : [];
    await run('xfs_quota', ['-x', ...cmds, '-c', `limit -p bhard=${mb}m ${id}`, mnt]);
  }

  /**
   * The limit of the subvolume's qgroup, set through the volume root: acting through the subvolume itself
   * charges the change to that qgroup, which fails with EDQUOT once it is over its limit (a snapshot of a full
   * sandbox). One helper process with two ioctls (≈ 2 ms) instead of `sh` + `btrfs inspect-internal rootid` +
   * `btrfs qgroup limit` (≈ 9 ms), which a resume's answer waits for.
   */
  private async setQgroupLimit(path: string, bytes: number | 'none'): Promise<void> {
    if (!this.helper) throw new RuntimeError('Internal', 'CowVolume.useHelper() has not run');
    await run(this.helper, ['qgroup-limit', path, String(bytes), this.opts.sandboxesDir]);
  }

  /** Makes an empty sandbox dir (a subvolume on btrfs). */
  async createDir(path: string): Promise<void> {
    if (this.kind === 'btrfs') await run('btrfs', ['subvolume', 'create', path]);
    else await mkdir(path, { mode: 0o700 });
  }

  /**
   * Makes the empty dir `path` (mode 0700) so that `commit(path)` can later make what is written into it durable
   * on its own: a subvolume on this btrfs volume (true); anywhere else a plain dir (false: the caller syncs
   * the filesystem instead).
   */
  async durableDir(path: string): Promise<boolean> {
    if (this.kind === 'btrfs' && this.helper && (await this.sameVolume(path))) {
      await run(this.helper, ['subvolume', path]);
      return true;
    }
    await mkdir(path, { mode: 0o700 });
    return false;
  }

  /**
   * Makes everything written under `path`, a dir `durableDir` made a subvolume, durable (data and metadata)
   * without writing back anyone else's: a snapshot of it, which btrfs commits after flushing that subvolume
   * alone, deleted again at once (`aenv-idmap commit`). A `syncfs` would wait for every sandbox's dirty pages.
   */
  async commit(path: string): Promise<void> {
    if (!this.helper) throw new RuntimeError('Internal', 'CowVolume.useHelper() has not run');
    await run(this.helper, ['commit', path]);
  }

  /**
   * `dest` becomes a copy of `src` (a sandbox dir or a snapshot). btrfs: one subvolume snapshot; when
   * `src` is no subvolume or lives on another filesystem, a reflink-or-copy of `src/upper` instead.
   */
  async cloneDir(src: string, dest: string): Promise<void> {
    if (this.kind === 'btrfs' && (await this.isSubvolume(src))) {
      const r = await run('btrfs', ['subvolume', 'snapshot', src, dest], { allowFailure: true });
      if (r.code === 0) return;
      if (!/cross-device|Invalid argument/i.test(r.stderr)) {
        throw new CommandError('btrfs', ['subvolume', 'snapshot', src, dest], r.code, r.stderr, r.stdout);
      }
    }
    if (await this.sameVolume(dest)) await this.createDir(dest);
    else await mkdir(dest, { mode: 0o700 });
    await this.copyTree(join(src, 'upper'), join(dest, 'upper'));
  }

  /** Reflink where possible, else a full copy; keeps owners, modes, xattrs (overlay opaque) and whiteouts. */
  async copyTree(src: string, dest: string): Promise<void> {
    await run('cp', ['-a', '--reflink=auto', '--', src, dest]);
  }

  private async sameVolume(path: string): Promise<boolean> {
    const dir = await nearestExisting(dirname(path));
    const root = this.opts.sandboxesDir;
    return dir === root || dir.startsWith(`${root}/`);
  }

  async isSubvolume(path: string): Promise<boolean> {
    try {
      const st = await lstat(path);
      return st.isDirectory() && st.ino === BTRFS_SUBVOL_INO && (await isBtrfs(path));
    } catch {
      return false;
    }
  }

  /** Removes a sandbox dir or snapshot, whatever kind it is. Idempotent. Nothing may be mounted below it. */
  async removeDir(path: string): Promise<void> {
    if (!(await exists(path))) return;
    if (await this.isSubvolume(path)) {
      // Nested subvolumes (a sandbox that made its own) must go first, or the delete fails.
      const r = await run('btrfs', ['subvolume', 'delete', path], { allowFailure: true });
      if (r.code === 0) return;
    }
    await rm(path, { recursive: true, force: true });
    if (await exists(path)) await run('btrfs', ['subvolume', 'delete', path]);
  }
}
