import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { once } from 'node:events';
import { RepositoryError } from '../snapshot/errors.js';
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

/** What a repository record says an archive is (its signed digest and size, docs/snapshots.md#record-signing). */
export interface ExpectedArchive {
  digest: string;
  size: number;
}

/**
 * Extracts an archive made by `archiveDir` into `dir` (created; must not exist). With `expected` (archives from
 * the snapshot repository, restored as root), tar reads the archive through a hash: what it extracted is exactly
 * what was verified, even if the file is swapped after the repository checked it (a shared directory hands out
 * its own file). A mismatch fails with IntegrityMismatch and removes `dir`.
 */
export async function extractArchive(file: string, dir: string, expected?: ExpectedArchive): Promise<void> {
  await mkdir(dir, { recursive: true });
  const args = [...TAR_FLAGS, '--same-permissions', '--same-owner', '-C', dir];
  if (!expected) {
    await run('tar', [...args, '-xf', file]);
    return;
  }
  try {
    const got = await extractHashing(file, args);
    if (got.digest !== expected.digest || got.size !== expected.size) {
      throw new RepositoryError(
        'IntegrityMismatch',
        `archive ${expected.digest} changed after it was verified (read ${got.digest}, ${got.size} bytes); its extraction was removed`,
      );
    }
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

async function extractHashing(file: string, args: string[]): Promise<{ digest: string; size: number }> {
  const child = spawn('tar', [...args, '-xf', '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
  const stderr: Buffer[] = [];
  child.stderr.on('data', (b: Buffer) => stderr.push(b));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  exited.catch(() => {});
  // Every byte of the file is hashed; tar gets them until it stops reading (it may stop at the archive's end
  // marker before the zero padding after it): whatever follows still counts for the digest.
  const stdin = child.stdin;
  let open = true;
  const closed = new Promise<void>((resolve) => stdin.once('close', resolve));
  stdin.on('error', () => (open = false));
  void closed.then(() => (open = false));
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(file, { highWaterMark: 1024 * 1024 })) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
    if (open && !stdin.write(chunk)) await Promise.race([once(stdin, 'drain'), closed]);
  }
  if (open) stdin.end();
  const code = await exited;
  if (code !== 0) {
    const detail = Buffer.concat(stderr).toString().trim().split('\n').slice(-3).join('; ');
    throw new Error(`tar -x of ${file} exited with ${code}${detail ? `: ${detail}` : ''}`);
  }
  return { digest: `sha256:${hash.digest('hex')}`, size };
}

/** Flushes the filesystem holding `path` (syncfs), so what was written there survives a power loss. */
export async function syncFilesystem(path: string): Promise<void> {
  await run('sync', ['-f', path]);
}

/**
 * Writes `text` to `path` and makes the file and its entry in its dir durable (an fsync of each, at once, so
 * btrfs can log both in one commit): what a commit marker needs once everything it vouches for is durable
 * already, without a sync of the filesystem.
 */
export async function writeDurably(path: string, text: string): Promise<void> {
  const dir = await open(dirname(path), 'r');
  try {
    const file = await open(path, 'w');
    try {
      await file.writeFile(text);
      await Promise.all([file.sync(), dir.sync()]);
    } finally {
      await file.close();
    }
  } finally {
    await dir.close();
  }
}
