import { readFileSync, statSync } from 'node:fs';
import { readdir, realpath, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { readMounts, type MountEntry } from '../runtime/drivers/container/mountinfo.js';
import { run } from '../util/exec.js';

export interface DiskUsage {
  /** What the sandbox dir holds, counted as its btrfs quota group counts it (shared snapshot data included). */
  usedBytes: number;
  /** The quota group's limit; undefined when it has none. */
  limitBytes?: number;
}

const SYS_BTRFS = '/sys/fs/btrfs';
// btrfs qgroup limit flag: the referenced-bytes limit is set.
const LIMIT_MAX_RFER = 1;

/** The mount holding `dir` (the deepest mount point that is `dir` or one of its parents). */
function mountOf(mounts: MountEntry[], dir: string): MountEntry | undefined {
  let best: MountEntry | undefined;
  for (const m of mounts) {
    const inside = dir === m.mountPoint || dir.startsWith(m.mountPoint === '/' ? '/' : `${m.mountPoint}/`);
    if (inside && (!best || m.mountPoint.length >= best.mountPoint.length)) best = m;
  }
  return best;
}

/** `/sys/fs/btrfs/<fsid>` of the btrfs filesystem whose device is `source` (e.g. /dev/loop4), if any. */
async function sysDirOf(source: string): Promise<string | undefined> {
  const dev = basename(await realpath(source).catch(() => source));
  for (const fsid of await readdir(SYS_BTRFS).catch(() => [] as string[])) {
    const dir = join(SYS_BTRFS, fsid);
    if (await stat(join(dir, 'devices', dev)).catch(() => undefined)) return dir;
  }
  return undefined;
}

/**
 * Disk usage of sandbox dirs from btrfs quota groups, read from sysfs: no process per sample. A dir's subvolume
 * id is looked up once (one `btrfs inspect-internal rootid`) and kept while the dir stays the same subvolume.
 * Without quotas (`[runtime].disk_limits = false`, or not btrfs) there is nothing to read: `usage` is undefined.
 */
export class QgroupDiskReader {
  private readonly ids = new Map<string, { key: string; id: string }>();

  private constructor(private readonly qgroupsDir: string | undefined) {}

  static async open(sandboxesDir: string): Promise<QgroupDiskReader> {
    const mount = mountOf(await readMounts(), sandboxesDir);
    if (mount?.fsType !== 'btrfs') return new QgroupDiskReader(undefined);
    const sys = await sysDirOf(mount.source);
    const qgroups = sys ? join(sys, 'qgroups') : undefined;
    const enabled = qgroups ? await stat(qgroups).catch(() => undefined) : undefined;
    return new QgroupDiskReader(enabled ? qgroups : undefined);
  }

  get available(): boolean {
    return this.qgroupsDir !== undefined;
  }

  async usage(dir: string): Promise<DiskUsage | undefined> {
    if (!this.qgroupsDir) return undefined;
    let st;
    try {
      st = statSync(dir);
    } catch {
      return undefined;
    }
    if (!st) return undefined;
    // A new subvolume at the same path (a resume makes a new sandbox dir) has another device or birth time.
    const key = `${st.dev}:${st.ino}:${st.birthtimeMs}`;
    let cached = this.ids.get(dir);
    if (cached?.key !== key) {
      const r = await run('btrfs', ['inspect-internal', 'rootid', dir], { allowFailure: true });
      const id = r.stdout.trim();
      if (r.code !== 0 || !/^\d+$/.test(id)) return undefined;
      cached = { key, id };
      this.ids.set(dir, cached);
    }
    const q = join(this.qgroupsDir, `0_${cached.id}`);
    // sysfs files are made in memory: read synchronously (cheaper than a thread-pool hop each).
    const read = (name: string) => {
      try {
        return readFileSync(join(q, name), 'utf8');
      } catch {
        return undefined;
      }
    };
    const referenced = read('referenced');
    const max = read('max_referenced') ?? '0';
    const flags = read('limit_flags') ?? '0';
    if (referenced === undefined) return undefined;
    const limit = Number(max);
    return {
      usedBytes: Number(referenced),
      ...((Number(flags) & LIMIT_MAX_RFER) !== 0 && limit > 0 ? { limitBytes: limit } : {}),
    };
  }

  /** Drops what is cached for `dir` (the sandbox is gone). */
  forget(dir: string): void {
    this.ids.delete(dir);
  }
}
