import { dirname, relative, sep } from 'node:path';
import { CommandError, run } from '../../util/exec.js';
import { RuntimeError } from '../driver.js';
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

export async function mountOverlay(
  lowerDirsBottomFirst: readonly string[],
  upperDir: string,
  workDir: string,
  target: string,
): Promise<void> {
  const { options, cwd } = overlayOptions(lowerDirsBottomFirst, upperDir, workDir);
  await run('mount', ['-t', 'overlay', 'overlay', '-o', options, target], cwd ? { cwd } : {});
}

/** Mounts a read-only sysfs whose network view is the given netns (the mount itself lands in our mount ns). */
export async function mountSysfs(netnsPath: string, target: string): Promise<void> {
  await run('nsenter', [
    `--net=${netnsPath}`,
    'mount',
    '-t',
    'sysfs',
    '-o',
    'ro,nosuid,nodev,noexec',
    'sysfs',
    target,
  ]);
}

/** Unmounts everything at or below `dir`, deepest first. Returns the mount points it removed. */
export async function unmountTree(dir: string): Promise<string[]> {
  const removed: string[] = [];
  for (let round = 0; round < 5; round++) {
    const mounts = mountsUnder(await readMounts(), dir);
    if (mounts.length === 0) return removed;
    for (const m of mounts) {
      try {
        await run('umount', [m.mountPoint]);
      } catch (e) {
        // A stuck reference (a late process exit) must not block cleanup: detach lazily instead.
        if (!(e instanceof CommandError)) throw e;
        await run('umount', ['-l', m.mountPoint], { allowFailure: true });
      }
      removed.push(m.mountPoint);
    }
  }
  const left = mountsUnder(await readMounts(), dir);
  if (left.length) {
    throw new RuntimeError('Internal', `cannot unmount ${left.map((m) => m.mountPoint).join(', ')}`);
  }
  return removed;
}
