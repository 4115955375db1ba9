import { randomUUID } from 'node:crypto';
import { constants } from 'node:fs';
import type { Stats } from 'node:fs';
import { chmod, chown, lstat, mkdir, open, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Where a sandbox's boot id lives on its disk. The OCI config binds it over /proc/sys/kernel/random/boot_id
 * (which a container would otherwise share with the host), so every boot has its own id, and a CRIU restore,
 * which brings the disk back with the memory, keeps the id the processes saw.
 */
export const BOOT_ID_FILE = '/run/agentenv/boot_id';

async function lstatOrNull(path: string): Promise<Stats | null> {
  try {
    return await lstat(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** A directory of the upper dir that is really one (a symlink or file the sandbox left there is replaced). */
async function realDir(
  path: string,
  mode: number,
  uid: number,
  gid: number,
  lower: Stats | null,
  lowerOwner: (id: number) => number,
) {
  const st = await lstatOrNull(path);
  if (st?.isDirectory()) return;
  if (st) await unlink(path);
  await mkdir(path);
  const like = lower?.isDirectory() ? lower : null;
  await chown(path, like ? lowerOwner(like.uid) : uid, like ? lowerOwner(like.gid) : gid);
  await chmod(path, like ? like.mode & 0o7777 : mode);
}

/** The image's entry at `rel` as the merged view would show it: the top-most layer that has one. */
async function inImage(lowerDirs: readonly string[], rel: string): Promise<Stats | null> {
  for (let i = lowerDirs.length - 1; i >= 0; i--) {
    const st = await lstatOrNull(join(lowerDirs[i] as string, rel));
    if (st) return st;
  }
  return null;
}

/**
 * Gives the sandbox a new boot id: writes BOOT_ID_FILE into its upper dir before a fresh boot (never before a
 * restore). Like the /etc files it works on the upper directly, and makes `run` and `run/agentenv` real
 * directories there, so the path the boot-id mount follows in the merged view has no symlink in it.
 */
export async function writeBootId(
  upperDir: string,
  lowerDirs: readonly string[],
  rootUid: number,
  /** The host id the sandbox sees a layer's host id as (layers are in the image range, the upper in its own). */
  lowerOwner: (id: number) => number = (id) => id,
) {
  const run = await inImage(lowerDirs, 'run');
  await realDir(join(upperDir, 'run'), 0o755, rootUid, rootUid, run, lowerOwner);
  await realDir(join(upperDir, 'run', 'agentenv'), 0o700, rootUid, rootUid, null, lowerOwner);
  const path = join(upperDir, BOOT_ID_FILE);
  const st = await lstatOrNull(path);
  if (st && !st.isFile()) await unlink(path);
  const fh = await open(
    path,
    constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
    0o444,
  );
  try {
    await fh.writeFile(`${randomUUID()}\n`);
    await fh.chown(rootUid, rootUid);
    await fh.chmod(0o444);
  } finally {
    await fh.close();
  }
}
