import { lstat, mkdir, open, readdir, rename, rm, statfs, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { CommandError, run } from '../../util/exec.js';
import { RuntimeError } from '../driver.js';
import { readMounts } from './mountinfo.js';
import { exists } from '../../util/fs.js';

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
   * Per-sandbox disk limits (`limitDir`) with btrfs quota groups: turned on for aenv's own loop volume; on a
   * host btrfs used only when its quotas are already on (turning them on affects the whole filesystem).
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

  constructor(readonly opts: CowVolumeOptions) {}

  get kind(): CowKind {
    if (!this.kindValue) throw new Error('CowVolume.init() has not run');
    return this.kindValue;
  }

  /** Whether `limitDir` enforces limits (after init). */
  get enforcesLimits(): boolean {
    return this.limitsValue;
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
    if (this.kind === 'btrfs') this.limitsValue = await this.setUpQuotas(this.opts.diskLimits === true);
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
    if (mode === 'host' || (mode === 'auto' && (await this.hostCanCow()))) {
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
    // On a plain dir `qgroup limit` would limit the subvolume holding it (the whole volume).
    if (!(await this.isSubvolume(path))) {
      throw new RuntimeError('Internal', `${path} is not a btrfs subvolume: cannot limit its disk`);
    }
    await this.setQgroupLimit(path, `${mb}M`);
  }

  /** Removes the limit of `path` (a btrfs snapshot inherits its source's). No-op where limits are not enforced. */
  async unlimitDir(path: string): Promise<void> {
    if (!this.limitsValue || !(await this.isSubvolume(path))) return;
    await this.setQgroupLimit(path, 'none');
  }

  /**
   * `btrfs qgroup limit` names the subvolume's qgroup and acts through the volume root: acting through the
   * subvolume itself charges the change to that qgroup, which fails with EDQUOT once it is over its limit (a
   * snapshot of a full sandbox). One shell for the id lookup and the limit: a spawn from the server costs more
   * than both commands.
   */
  private async setQgroupLimit(path: string, size: string): Promise<void> {
    await run('sh', [
      '-c',
      'id=$(btrfs inspect-internal rootid "$1") && exec btrfs qgroup limit "$2" "0/$id" "$3"',
      'sh',
      path,
      size,
      this.opts.sandboxesDir,
    ]);
  }

  /** Makes an empty sandbox dir (a subvolume on btrfs). */
  async createDir(path: string): Promise<void> {
    if (this.kind === 'btrfs') await run('btrfs', ['subvolume', 'create', path]);
    else await mkdir(path, { mode: 0o700 });
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
