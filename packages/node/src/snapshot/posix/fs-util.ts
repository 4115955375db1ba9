import { randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { link, mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { DigestMeter, type FileDigest } from '../digest.js';

export const isErrno = (err: unknown, code: string): boolean =>
  (err as NodeJS.ErrnoException | null)?.code === code;

export async function fsyncDir(dir: string): Promise<void> {
  const fd = await open(dir, 'r');
  try {
    await fd.sync();
  } finally {
    await fd.close();
  }
}

/** mkdir -p (owner-only dirs) that makes each new directory's entry durable in its parent. */
export async function ensureDir(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true, mode: 0o700 });
  if (first === undefined) return;
  // Everything from `first` down is new: fsync each parent so the entries survive a power loss.
  let d = dir;
  const chain: string[] = [];
  while (d.length >= first.length) {
    chain.push(d);
    if (d === first) break;
    d = dirname(d);
  }
  for (const created of chain) await fsyncDir(dirname(created));
}

export async function readTextIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return undefined;
    throw err;
  }
}

export async function unlinkIfExists(path: string): Promise<boolean> {
  try {
    await unlink(path);
    return true;
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return false;
    throw err;
  }
}

export const tempName = (tmpDir: string): string => join(tmpDir, `${Date.now()}-${randomUUID()}`);

/**
 * Writes `data` durably to `path`: temp file in `tmpDir` (same filesystem), fsync, then rename (replace) or
 * link (ifAbsent: fails atomically when `path` exists), then fsync the directory. Returns false when
 * `ifAbsent` and the file existed.
 */
export async function writeFileDurable(
  tmpDir: string,
  path: string,
  data: string,
  opts: { ifAbsent?: boolean; mode?: number } = {},
): Promise<boolean> {
  const tmp = tempName(tmpDir);
  const fd = await open(tmp, 'wx', opts.mode ?? 0o600);
  try {
    await fd.writeFile(data, 'utf8');
    await fd.sync();
  } finally {
    await fd.close();
  }
  try {
    await ensureDir(dirname(path));
    if (opts.ifAbsent) {
      try {
        await link(tmp, path);
      } catch (err) {
        if (isErrno(err, 'EEXIST')) return false;
        throw err;
      }
    } else {
      await rename(tmp, path);
    }
    await fsyncDir(dirname(path));
    return true;
  } finally {
    await unlinkIfExists(tmp);
  }
}

/**
 * Copies `src` to a new temp file (read-only, owner-only: published content is immutable and private), hashing
 * the bytes as they stream; the caller renames it into place.
 */
export async function copyToTemp(tmpDir: string, src: string): Promise<{ tmp: string } & FileDigest> {
  const tmp = tempName(tmpDir);
  const meter = new DigestMeter();
  try {
    await pipeline(createReadStream(src), meter, createWriteStream(tmp, { flags: 'wx', mode: 0o400 }));
    const fd = await open(tmp, 'r');
    try {
      await fd.sync();
    } finally {
      await fd.close();
    }
  } catch (err) {
    await unlinkIfExists(tmp);
    throw err;
  }
  return { tmp, ...meter.result() };
}
