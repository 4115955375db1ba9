import { dirname, relative, sep } from 'node:path';
import { run } from '../../../util/exec.js';
import { RuntimeError } from '../../driver.js';
import { mountsUnder, readMounts } from './mountinfo.js';

// The kernel copies mount data into one page; longer option strings fail with a confusing EINVAL.
const MAX_MOUNT_DATA = 4000;

function commonDir(paths: string[]): string {
  let prefix = dirname(paths[0] as string);
  while (!paths.every((p) => p.startsWith(prefix + sep)) && prefix !== '/') prefix = dirname(prefix);
  return prefix;
}

/**
 * Builds the overlay option string. Lower layers are given top-first, as overlayfs wants them. When the
 * absolute paths are too long for one page, they are made relative to their common parent, which
 * becomes the working directory of mount(8) (overlayfs resolves them against it).
 */
export function overlayOptions(
  lowerDirsBottomFirst: readonly string[],
  upperDir: string,
  workDir: string,
): { options: string; cwd?: string } {
  const top = [...lowerDirsBottomFirst].reverse();
  const tail = `,upperdir=${upperDir},workdir=${workDir}`;
  const abs = `lowerdir=${top.join(':')}${tail}`;
  if (abs.length <= MAX_MOUNT_DATA) return { options: abs };
  const cwd = commonDir(top);
  const rel = `lowerdir=${top.map((p) => relative(cwd, p)).join(':')}${tail}`;
  if (rel.length > MAX_MOUNT_DATA) {
    throw new RuntimeError(
      'InvalidSpec',
      `overlay options for ${top.length} layers are ${rel.length} bytes even with relative paths (max ${MAX_MOUNT_DATA})`,
    );
  }
  return { options: rel, cwd };
}

export interface SandboxMounts {
  lowerDirsBottomFirst: readonly string[];
  upperDir: string;
  workDir: string;
  /** Mount point of the overlay (the sandbox's root). */
  rootfsDir: string;
  /** Mount point of the sandbox's sysfs. */
  sysDir: string;
}

/**
 * The sandbox's two host mounts as an fstab, so one `mount --all` (one process) makes both. Paths are
 * validated to hold no whitespace, so no fstab escaping is needed.
 */
export function sandboxFstab(m: SandboxMounts): { text: string; cwd?: string } {
  const { options, cwd } = overlayOptions(m.lowerDirsBottomFirst, m.upperDir, m.workDir);
  // nodev: device nodes in the sandbox's own files never work, wherever they came from (an upper restored
  // from a snapshot). Not nosuid: sudo inside needs setuid; the sandbox dir keeps host users out instead.
  const text =
    `overlay ${m.rootfsDir} overlay nodev,${options} 0 0\n` +
    `sysfs ${m.sysDir} sysfs ro,nosuid,nodev,noexec 0 0\n`;
  return cwd ? { text, cwd } : { text };
}

/**
 * Mounts the overlay and a read-only sysfs whose network view is the sandbox's netns (sysfs shows the
 * interfaces of the netns of the process that mounts it; the mounts themselves land in our mount ns), with
 * the uid mapping helper's `fstab` command (`helper`). `prefix` is a command that execs the rest once it
 * has done its part (the idmapped layer mounts). `detach`: mount points taken out of the host's mount table
 * once everything is mounted (the layer views the overlay holds its own clones of).
 */
export async function mountSandbox(
  helper: string,
  netnsPath: string,
  fstabPath: string,
  cwd?: string,
  prefix: readonly string[] = [],
  detach: readonly string[] = [],
): Promise<void> {
  const argv = [...prefix, helper, 'fstab', netnsPath, fstabPath, ...detach];
  await run(argv[0] as string, argv.slice(1), cwd ? { cwd } : {});
}

/** Unmounts everything at or below `dir`, deepest first. Returns the mount points it removed. */
export async function unmountTree(dir: string): Promise<string[]> {
  const removed: string[] = [];
  for (let round = 0; round < 5; round++) {
    const mounts = mountsUnder(await readMounts(), dir).map((m) => m.mountPoint);
    if (mounts.length === 0) return removed;
    // One umount(8) for all of them (deepest first); only when that fails, one by one.
    const all = await run('umount', mounts, { allowFailure: true });
    if (all.code !== 0) {
      for (const mp of mounts) {
        const one = await run('umount', [mp], { allowFailure: true });
        // A stuck reference (a late process exit) must not block cleanup: detach lazily instead.
        if (one.code !== 0) await run('umount', ['-l', mp], { allowFailure: true });
      }
    }
    removed.push(...mounts);
  }
  const left = mountsUnder(await readMounts(), dir);
  if (left.length) {
    throw new RuntimeError('Internal', `cannot unmount ${left.map((m) => m.mountPoint).join(', ')}`);
  }
  return removed;
}
