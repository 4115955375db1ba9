import { mkdir, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { run } from '../util/exec.js';

// GNU tar keeps what a sandbox disk needs: overlay whiteouts (char 0/0), `trusted.overlay.*` xattrs on opaque
// dirs, numeric (shifted) owners, hardlinks and sparse files. Node has no library that does all of that.
const TAR_FLAGS = [
  '--xattrs',
  '--xattrs-include=trusted.*',
  '--xattrs-include=user.*',
  '--xattrs-include=security.capability',
  '--numeric-owner',
  '--sparse',
];

/** Archives the contents of `dir` into the file `out` (written under a temp name, then renamed). */
export async function archiveDir(dir: string, out: string): Promise<void> {
  await mkdir(dirname(out), { recursive: true });
  const tmp = `${out}.tmp-${process.pid}`;
  try {
    await run('tar', [...TAR_FLAGS, '-C', dir, '-cf', tmp, '.']);
    await rename(tmp, out);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

/** Extracts an archive made by `archiveDir` into `dir` (created; must not exist). */
export async function extractArchive(file: string, dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await run('tar', [...TAR_FLAGS, '--same-permissions', '--same-owner', '-C', dir, '-xf', file]);
}

/** Flushes the filesystem holding `path` (syncfs), so what was written there survives a power loss. */
export async function syncFilesystem(path: string): Promise<void> {
  await run('sync', ['-f', path]);
}
