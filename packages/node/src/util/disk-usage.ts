import { lstat, readdir, statfs } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Bytes a file tree takes on disk (allocated blocks, like `du`): symlinks are not followed, a file with several
 * hard links counts once. Walks into subvolumes and other mounts below `path` (a saved disk is a btrfs
 * subvolume). A missing path is 0; entries removed during the walk are skipped.
 */
export async function treeBytes(path: string): Promise<number> {
  const seen = new Set<string>();
  let total = 0;
  const visit = async (p: string): Promise<void> => {
    const st = await lstat(p).catch(() => undefined);
    if (!st) return;
    if (st.nlink > 1 && !st.isDirectory()) {
      const id = `${st.dev}:${st.ino}`;
      if (seen.has(id)) return;
      seen.add(id);
    }
    total += st.blocks * 512;
    if (!st.isDirectory()) return;
    const names = await readdir(p).catch(() => [] as string[]);
    for (const name of names) await visit(join(p, name));
  };
  await visit(path);
  return total;
}

/** Size in bytes of the filesystem holding `path`. */
export async function filesystemBytes(path: string): Promise<number> {
  const s = await statfs(path);
  return s.blocks * s.bsize;
}
