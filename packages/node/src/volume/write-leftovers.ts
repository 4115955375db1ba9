// Temporaries a content-API write leaves behind when the node dies in the middle of it (docs/volumes.md): the
// first write into a directory after a (re)start removes them. A temporary is recognised by all of: the name
// writeFile gives it, a regular file still at its creation mode 0600 (the final mode is set only just before the
// rename), and a modification time before this process started — so a write this process has in flight is never
// touched, whatever the directory.
import type { FileHandle } from 'node:fs/promises';
import { lstat, readdir, unlink } from 'node:fs/promises';

export const WRITE_TMP_PREFIX = '.aenv-write-';
const LEFTOVER_RE = /^\.aenv-write-[0-9a-f]{16}$/;
const STARTED_AT_MS = Date.now();
/** Directories (dev:ino) already swept by this process: one directory read each, not one per write. */
const swept = new Set<string>();
const SWEPT_MAX = 100_000;

/** Removes the leftovers in the directory `dir` is open on, once per process; returns how many. */
export async function sweepWriteLeftovers(dir: FileHandle): Promise<number> {
  const st = await dir.stat();
  const key = `${st.dev}:${st.ino}`;
  if (swept.has(key)) return 0;
  const base = `/proc/self/fd/${dir.fd}`;
  let removed = 0;
  for (const name of await readdir(base)) {
    if (!LEFTOVER_RE.test(name)) continue;
    const f = await lstat(`${base}/${name}`).catch(() => undefined);
    if (!f?.isFile() || (f.mode & 0o7777) !== 0o600 || f.mtimeMs >= STARTED_AT_MS) continue;
    await unlink(`${base}/${name}`).then(
      () => removed++,
      () => {}, // gone meanwhile
    );
  }
  if (swept.size >= SWEPT_MAX) swept.clear();
  swept.add(key);
  return removed;
}

/** Tests only: a directory whose inode number a removed directory had would otherwise count as swept. */
export function forgetSweptDirectories(): void {
  swept.clear();
}
