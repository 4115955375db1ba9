// Image-backed drives (AgentENV's `attachedDrives`, docs/volumes.md "Attached drives"). A drive is an overlay over
// idmapped read-only views of its image's layers, bind-mounted into the sandbox (its `subPath` directory of it).
// A writable drive's upper is the directory at the drive's mount path inside the sandbox's own upper: the drive's
// mount hides it from the sandbox's root, and every copy of the disk (pause, fork, snapshot, disk archives, the
// disk limit) carries it with no format of its own.
import { chown, chmod, lstat, mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { DriveSpec } from '../../driver.js';
import { RuntimeError } from '../../driver.js';
import { overlayOptions } from './mounts.js';

/** Where one drive's mounts and state are on the host. */
export interface DriveMountPaths {
  /** Mount points of the idmapped views of the drive's layers, bottom first. */
  views: string[];
  /** The drive as a whole (its overlay, or the one view of a one-layer read-only drive). */
  merged: string;
  /** Writable drives: the overlay's upper (inside the sandbox's upper) and work dir. */
  upper?: string;
  work?: string;
  /** What is bind-mounted at the drive's mount path. */
  source: string;
}

/** `<sandbox dir>/d/<n>/...`: the drive's mount points; `<sandbox dir>/dw/<n>`: a writable drive's work dir. */
export function drivePaths(
  sandboxDir: string,
  upperDir: string,
  drive: DriveSpec,
  n: number,
): DriveMountPaths {
  const base = join(sandboxDir, 'd', String(n));
  const views = drive.layers.map((_, k) => join(base, String(k)));
  const overlay = !drive.readOnly || views.length > 1;
  const merged = overlay ? join(base, 'm') : (views[0] as string);
  const source = drive.subPath ? join(merged, drive.subPath) : merged;
  if (drive.readOnly) return { views, merged, source };
  return {
    views,
    merged,
    source,
    upper: join(upperDir, drive.mountPath),
    work: join(sandboxDir, 'dw', String(n)),
  };
}

/**
 * The fstab lines of the drives' overlays (mounted after the sandbox's root, over the views the uid helper made).
 * nosuid, nodev: a drive's files never raise privileges. index=off: a writable drive's upper lies inside the
 * root overlay's upper, which the kernel only allows without the inode index.
 */
export function driveFstabLines(paths: readonly DriveMountPaths[]): string {
  return paths
    .filter((d) => d.merged !== d.views[0] || d.upper)
    .map((d) => {
      const lowers = [...d.views].reverse().join(':');
      let options = `lowerdir=${lowers}`;
      if (d.upper && d.work) {
        const built = overlayOptions(d.views, d.upper, d.work);
        if (built.cwd)
          throw new RuntimeError(
            'InvalidSpec',
            `drive overlay options are too long (${d.views.length} layers)`,
          );
        options = built.options;
      } else options = `ro,${options}`;
      return `overlay ${d.merged} overlay nosuid,nodev,index=off,${options} 0 0\n`;
    })
    .join('');
}

/**
 * Makes `path` (below `root`, both on the host) a directory without following anything the sandbox may have put
 * there: a symlink or file on the way (the sandbox wrote its upper) is removed, never followed. New dirs belong
 * to the sandbox's root.
 */
async function ownDirChain(root: string, rel: string, rootUid: number): Promise<void> {
  let at = root;
  for (const part of rel.split('/').filter(Boolean)) {
    at = join(at, part);
    const st = await lstat(at).catch(() => undefined);
    if (st?.isDirectory()) continue;
    if (st) await rm(at, { force: true, recursive: true });
    await mkdir(at, { mode: 0o755 });
    await chown(at, rootUid, rootUid);
    await chmod(at, 0o755);
  }
}

/** Before the mounts: the mount point dirs' parent, and each writable drive's upper and a fresh work dir. */
export async function prepareDriveDirs(
  sandboxDir: string,
  upperDir: string,
  drives: readonly DriveSpec[],
  paths: readonly DriveMountPaths[],
  rootUid: number,
): Promise<void> {
  if (!drives.length) return;
  // Search only: runc (as the sandbox's root) passes through to the binds' sources; nobody lists them.
  await mkdir(join(sandboxDir, 'd'), { recursive: true });
  await chmod(join(sandboxDir, 'd'), 0o711);
  for (const [n, d] of paths.entries()) {
    // chmod, not mkdir's mode: the node's umask (077) would take the search bit away again.
    await mkdir(join(sandboxDir, 'd', String(n)), { recursive: true });
    await chmod(join(sandboxDir, 'd', String(n)), 0o711);
    if (d.merged !== d.views[0]) await mkdir(d.merged, { recursive: true });
    if (!d.upper || !d.work) continue;
    await ownDirChain(upperDir, (drives[n] as DriveSpec).mountPath, rootUid);
    await rm(d.work, { recursive: true, force: true });
    await mkdir(d.work, { recursive: true });
    await chown(d.work, rootUid, rootUid);
  }
}

/**
 * After the mounts: each drive's `subPath` must be a directory of the drive reached through directories only (an
 * image's symlink would point runc's bind at a host path).
 */
export async function assertDriveSources(
  drives: readonly DriveSpec[],
  paths: readonly DriveMountPaths[],
): Promise<void> {
  for (const [n, drive] of drives.entries()) {
    let at = (paths[n] as DriveMountPaths).merged;
    for (const part of (drive.subPath ?? '').split('/').filter(Boolean)) {
      at = join(at, part);
      const st = await lstat(at).catch(() => undefined);
      if (!st?.isDirectory()) {
        throw new RuntimeError(
          'InvalidSpec',
          `drive ${drive.id}: subPath ${drive.subPath} is not a directory of image ${drive.image.reference}`,
        );
      }
    }
  }
}
