// The host side of a volume's files (the volume content API, docs/volumes.md). Sandboxes write into volumes, so
// every name below the root is hostile: a path is walked one component at a time from an open directory fd,
// each component opened with O_NOFOLLOW (through /proc/self/fd/N/<name>, which resolves <name> in the directory
// N names, like openat(2)), so a symlink a sandbox planted is never followed, whenever it was planted (the
// effect of openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). Hard links cannot leave the volume (a subvolume).
import { randomBytes } from 'node:crypto';
import { constants as C, createReadStream, type ReadStream } from 'node:fs';
import {
  chmod,
  lchown,
  lstat,
  mkdir,
  open,
  readdir,
  readlink,
  rename,
  rmdir,
  stat,
  unlink,
  type FileHandle,
} from 'node:fs/promises';
import type { Stats } from 'node:fs';
import type { Readable } from 'node:stream';
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { IdRange } from '../runtime/driver.js';
import { sweepWriteLeftovers, WRITE_TMP_PREFIX } from './write-leftovers.js';

export interface VolumeEntryStat {
  name: string;
  /** Absolute within the volume (`/` is its root). */
  path: string;
  type: 'unknown' | 'file' | 'directory' | 'symlink';
  size: number;
  mode: number;
  /** As sandboxes see them. */
  uid: number;
  gid: number;
  atime: string;
  mtime: string;
  ctime: string;
  target?: string;
}

/** Owner and mode a write or make-dir gives, as sandboxes see them. */
/** A write's options besides ownership: `force` makes missing parents; `limitBytes` bounds the whole volume. */
export interface WriteOptions extends Ownership {
  force?: boolean;
  /**
   * Where no quota enforces the volume's size (a shared directory): the most bytes the volume may hold once this
   * write is done, measured by walking the volume before it (so concurrent writers can each fit alone).
   */
  limitBytes?: number;
}

export interface Ownership {
  uid?: number;
  gid?: number;
  mode?: number;
}

const MAX_DEPTH = 16;
const MAX_LIST = 10_000;
const MAX_PATH = 4096;
const OVERFLOW_ID = 65534;
const USAGE_MAX_DEPTH = 256;

const invalid = (m: string) => new DomainError(ErrorKind.InvalidArgument, m);
const notFound = (p: string) => new DomainError(ErrorKind.NotFound, `path ${JSON.stringify(p)} not found`);

const fdPath = (fd: number, name?: string) => (name ? `/proc/self/fd/${fd}/${name}` : `/proc/self/fd/${fd}`);

/** The components of a path inside the volume; `..` is refused, `.` and empty ones ignored. */
export function volumePathParts(path: string): string[] {
  if (typeof path !== 'string') throw invalid('path must be a string');
  if (path.length > MAX_PATH) throw invalid(`path is longer than ${MAX_PATH} characters`);
  if (path.includes('\0')) throw invalid('path must not contain NUL');
  const parts = path.split('/').filter((s) => s !== '' && s !== '.');
  if (parts.includes('..')) throw invalid(`path ${JSON.stringify(path)} must not contain ".."`);
  for (const p of parts)
    if (Buffer.byteLength(p) > 255) throw invalid('a path component is longer than 255 bytes');
  return parts;
}

const shown = (parts: string[]) => `/${parts.join('/')}`;

function errno(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException)?.code;
}

/** What a failed file operation means to the caller. */
function mapFsError(e: unknown, parts: string[]): never {
  const code = errno(e);
  const p = shown(parts);
  if (code === 'ENOENT') throw notFound(p);
  if (code === 'ELOOP')
    throw invalid(`path ${JSON.stringify(p)} goes through a symbolic link, which is not followed`);
  if (code === 'ENOTDIR') throw invalid(`path ${JSON.stringify(p)}: a component is not a directory`);
  if (code === 'EISDIR') throw invalid(`path ${JSON.stringify(p)} is a directory`);
  if (code === 'EEXIST')
    throw new DomainError(ErrorKind.AlreadyExists, `path ${JSON.stringify(p)} already exists`);
  if (code === 'ENOTEMPTY')
    throw new DomainError(ErrorKind.Conflict, `directory ${JSON.stringify(p)} is not empty`);
  // libuv has no name for EDQUOT (122 on Linux): Node reports it as "Unknown system error -122".
  if (code === 'EDQUOT' || code === 'ENOSPC' || (e as NodeJS.ErrnoException)?.errno === -122)
    throw new DomainError(ErrorKind.InsufficientStorage, 'the volume is full (volume.max_size_mb)', {
      expose: true,
    });
  if (code === 'ENAMETOOLONG') throw invalid('path is too long');
  throw e;
}

function typeOf(st: Stats): VolumeEntryStat['type'] {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symlink';
  return 'unknown';
}

/** One volume's root and how its on-disk owners map to what sandboxes see. */
export class VolumeFiles {
  constructor(
    private readonly root: string,
    private readonly owner: IdRange,
  ) {}

  private view(id: number): number {
    const off = id - this.owner.hostStart;
    return off >= 0 && off < this.owner.size ? off : OVERFLOW_ID;
  }

  private hostId(id: number | undefined, what: string): number {
    const v = id ?? 0;
    if (!Number.isInteger(v) || v < 0 || v >= this.owner.size)
      throw invalid(`${what} ${id} must be an integer from 0 to ${this.owner.size - 1}`);
    return this.owner.hostStart + v;
  }

  private static mode(mode: number | undefined, dflt: number): number {
    const m = mode ?? dflt;
    // No setuid/setgid: the volume is mounted nosuid, and a host-made setuid file has no use.
    if (!Number.isInteger(m) || m < 0 || m > 0o1777)
      throw invalid(`mode ${mode} must be an integer from 0 to 0o1777`);
    return m;
  }

  private async openRoot(): Promise<FileHandle> {
    return open(this.root, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW);
  }

  /** Opens the directory `parts` names (no symlink followed); the caller closes it. */
  private async openDir(parts: string[]): Promise<FileHandle> {
    let dir = await this.openRoot();
    try {
      for (let i = 0; i < parts.length; i++) {
        const next = await open(fdPath(dir.fd, parts[i]), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW).catch(
          (e) => mapFsError(e, parts.slice(0, i + 1)),
        );
        await dir.close();
        dir = next;
      }
      return dir;
    } catch (e) {
      await dir.close().catch(() => {});
      throw e;
    }
  }

  /** The parent directory of `parts` open, and the last name (the root itself has none). */
  private async openParent(parts: string[]): Promise<{ dir: FileHandle; leaf: string | undefined }> {
    if (parts.length === 0) return { dir: await this.openRoot(), leaf: undefined };
    return { dir: await this.openDir(parts.slice(0, -1)), leaf: parts[parts.length - 1] };
  }

  private async statIn(dirFd: number, leaf: string | undefined, parts: string[]): Promise<VolumeEntryStat> {
    const p = fdPath(dirFd, leaf);
    // The root: the magic link /proc/self/fd/N itself would be lstat'ed; following it reaches our open directory.
    const st = await (leaf === undefined ? stat(p) : lstat(p)).catch((e) => mapFsError(e, parts));
    const entry: VolumeEntryStat = {
      name: parts[parts.length - 1] ?? '',
      path: shown(parts),
      type: typeOf(st),
      size: st.size,
      mode: st.mode & 0o7777,
      uid: this.view(st.uid),
      gid: this.view(st.gid),
      atime: st.atime.toISOString(),
      mtime: st.mtime.toISOString(),
      ctime: st.ctime.toISOString(),
    };
    if (entry.type === 'symlink') entry.target = await readlink(p).catch(() => '');
    return entry;
  }

  private async withParent<T>(
    path: string,
    fn: (dir: FileHandle, leaf: string | undefined, parts: string[]) => Promise<T>,
  ): Promise<T> {
    const parts = volumePathParts(path);
    const { dir, leaf } = await this.openParent(parts);
    try {
      return await fn(dir, leaf, parts);
    } finally {
      await dir.close().catch(() => {});
    }
  }

  async stat(path: string): Promise<VolumeEntryStat> {
    return this.withParent(path, (dir, leaf, parts) => this.statIn(dir.fd, leaf, parts));
  }

  /** The entries below directory `path`, `depth` levels deep (1: its children). Symlinks are listed, not entered. */
  async list(path: string, depth = 1): Promise<VolumeEntryStat[]> {
    if (!Number.isInteger(depth) || depth < 1 || depth > MAX_DEPTH)
      throw invalid(`depth ${depth} must be an integer from 1 to ${MAX_DEPTH}`);
    const parts = volumePathParts(path);
    const out: VolumeEntryStat[] = [];
    const walk = async (dir: FileHandle, at: string[], left: number): Promise<void> => {
      const names = (await readdir(fdPath(dir.fd))).sort();
      for (const name of names) {
        if (out.length >= MAX_LIST)
          throw invalid(`more than ${MAX_LIST} entries: list a smaller directory or depth`);
        const entry = await this.statIn(dir.fd, name, [...at, name]).catch((e: unknown) => {
          if (e instanceof DomainError && e.kind === ErrorKind.NotFound) return undefined; // removed meanwhile
          throw e;
        });
        if (!entry) continue;
        out.push(entry);
        if (entry.type !== 'directory' || left <= 1) continue;
        const sub = await open(fdPath(dir.fd, name), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW).catch(
          () => undefined,
        );
        if (!sub) continue; // replaced by something else meanwhile
        try {
          await walk(sub, [...at, name], left - 1);
        } finally {
          await sub.close();
        }
      }
    };
    const dir = await this.openDir(parts);
    try {
      await walk(dir, parts, depth);
    } finally {
      await dir.close();
    }
    return out;
  }

  /** Makes directory `path`; `force`: its missing parents too, and an existing directory is no error. */
  async makeDir(path: string, own: Ownership & { force?: boolean } = {}): Promise<VolumeEntryStat> {
    const parts = volumePathParts(path);
    if (parts.length === 0) throw invalid('the volume root exists already');
    const uid = this.hostId(own.uid, 'uid');
    const gid = this.hostId(own.gid, 'gid');
    const mode = VolumeFiles.mode(own.mode, 0o755);
    if (own.force) {
      for (let i = 1; i < parts.length; i++) await this.mkdirOne(parts.slice(0, i), uid, gid, mode, true);
    }
    return this.mkdirOne(parts, uid, gid, mode, own.force === true);
  }

  private async mkdirOne(
    parts: string[],
    uid: number,
    gid: number,
    mode: number,
    existingOk: boolean,
  ): Promise<VolumeEntryStat> {
    return this.withParent(shown(parts), async (dir, leaf) => {
      const p = fdPath(dir.fd, leaf);
      try {
        await mkdir(p, { mode });
      } catch (e) {
        if (!(existingOk && errno(e) === 'EEXIST')) mapFsError(e, parts);
        const st = await lstat(p);
        if (!st.isDirectory())
          throw invalid(`path ${JSON.stringify(shown(parts))} exists and is not a directory`);
        return this.statIn(dir.fd, leaf, parts);
      }
      await lchown(p, uid, gid);
      await chmod(p, mode); // mkdir's mode is masked by the server's umask
      await fsyncDir(dir);
      return this.statIn(dir.fd, leaf, parts);
    });
  }

  /**
   * Writes `body` to file `path` (replacing it, atomically: a reader sees the old or the whole new file), durably:
   * when it resolves, the data and the name are on disk. `force`: missing parent directories are made.
   */
  async writeFile(path: string, body: Readable, own: WriteOptions = {}): Promise<VolumeEntryStat> {
    const parts = volumePathParts(path);
    if (parts.length === 0) throw invalid('the volume root is a directory');
    const room = own.limitBytes === undefined ? Infinity : own.limitBytes - (await this.usedBytes());
    const uid = this.hostId(own.uid, 'uid');
    const gid = this.hostId(own.gid, 'gid');
    const mode = VolumeFiles.mode(own.mode, 0o644);
    if (own.force && parts.length > 1)
      await this.makeDir(shown(parts.slice(0, -1)), { ...own, mode: 0o755, force: true });
    return this.withParent(path, async (dir, leaf, ps) => {
      const existing = await lstat(fdPath(dir.fd, leaf)).catch(() => undefined);
      if (existing?.isDirectory()) throw invalid(`path ${JSON.stringify(shown(ps))} is a directory`);
      // The file replaced frees its blocks.
      const allowed = room + (existing?.isFile() ? existing.blocks * 512 : 0);
      await sweepWriteLeftovers(dir);
      const tmp = `${WRITE_TMP_PREFIX}${randomBytes(8).toString('hex')}`;
      const tmpPath = fdPath(dir.fd, tmp);
      const fh = await open(tmpPath, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600).catch((e) =>
        mapFsError(e, ps),
      );
      try {
        await fh.chown(uid, gid);
        let written = 0;
        for await (const chunk of body) {
          const buf = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
          written += buf.length;
          if (written > allowed) throw Object.assign(new Error('volume full'), { code: 'EDQUOT' });
          for (let off = 0; off < buf.length;) off += (await fh.write(buf, off)).bytesWritten;
        }
        await fh.chmod(mode);
        await fh.sync();
        await fh.close();
        // Replaces whatever the name is now (a file, or a symlink a sandbox put there: the link, never its target).
        await rename(tmpPath, fdPath(dir.fd, leaf));
        await fsyncDir(dir);
      } catch (e) {
        await fh.close().catch(() => {});
        await unlink(tmpPath).catch(() => {});
        mapFsError(e, ps);
      }
      return this.statIn(dir.fd, leaf, ps);
    });
  }

  /**
   * Bytes the volume's entries take on disk (allocated blocks), walked without following any link, at most
   * USAGE_MAX_DEPTH directories deep (one open fd per level; what is deeper is not counted).
   */
  async usedBytes(): Promise<number> {
    let total = 0;
    const walk = async (dir: FileHandle, depth: number): Promise<void> => {
      for (const name of await readdir(fdPath(dir.fd))) {
        const st = await lstat(fdPath(dir.fd, name)).catch(() => undefined); // removed meanwhile
        if (!st) continue;
        total += st.blocks * 512;
        if (!st.isDirectory() || depth >= USAGE_MAX_DEPTH) continue;
        const sub = await open(fdPath(dir.fd, name), C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW).catch(
          () => undefined,
        );
        if (!sub) continue;
        try {
          await walk(sub, depth + 1);
        } finally {
          await sub.close();
        }
      }
    };
    const root = await this.openRoot();
    try {
      await walk(root, 0);
    } finally {
      await root.close();
    }
    return total;
  }

  /** A stream of regular file `path` (a symlink, FIFO or device is refused). */
  async readFile(path: string): Promise<{ stream: ReadStream; size: number }> {
    return this.withParent(path, async (dir, leaf, parts) => {
      if (leaf === undefined) throw invalid('the volume root is a directory');
      // O_NONBLOCK: a FIFO a sandbox made must not hang the server.
      const fh = await open(fdPath(dir.fd, leaf), C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK).catch((e) =>
        mapFsError(e, parts),
      );
      const st = await fh.stat();
      if (!st.isFile()) {
        await fh.close();
        throw invalid(`path ${JSON.stringify(shown(parts))} is not a regular file`);
      }
      return { stream: createReadStream('', { fd: fh, autoClose: true }), size: st.size };
    });
  }

  /** Changes owner and mode of `path` (not through a symlink: a symlink's own owner changes, its mode cannot). */
  async updateMetadata(path: string, own: Ownership): Promise<VolumeEntryStat> {
    return this.withParent(path, async (dir, leaf, parts) => {
      const st = await this.statIn(dir.fd, leaf, parts);
      const p = fdPath(dir.fd, leaf);
      if (own.uid !== undefined || own.gid !== undefined) {
        await lchown(p, this.hostId(own.uid ?? st.uid, 'uid'), this.hostId(own.gid ?? st.gid, 'gid')).catch(
          (e) => mapFsError(e, parts),
        );
      }
      if (own.mode !== undefined) {
        if (st.type === 'symlink')
          throw invalid(`path ${JSON.stringify(shown(parts))} is a symbolic link: it has no mode of its own`);
        const fh = await open(p, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK).catch((e) => mapFsError(e, parts));
        try {
          await fh.chmod(VolumeFiles.mode(own.mode, 0));
        } finally {
          await fh.close();
        }
      }
      return this.statIn(dir.fd, leaf, parts);
    });
  }

  /** Removes `path` (a directory with everything in it; a symlink itself, never what it points to). */
  async remove(path: string): Promise<void> {
    await this.withParent(path, async (dir, leaf, parts) => {
      if (leaf === undefined) throw invalid('the volume root cannot be removed (delete the volume instead)');
      await removeIn(dir, leaf).catch((e) => mapFsError(e, parts));
      await fsyncDir(dir);
    });
  }
}

async function fsyncDir(dir: FileHandle): Promise<void> {
  await dir.sync().catch(() => {});
}

/** Removes `name` in `dir`, descending only through directories opened without following links. */
async function removeIn(dir: FileHandle, name: string): Promise<void> {
  const p = fdPath(dir.fd, name);
  const st = await lstat(p);
  if (!st.isDirectory()) return unlink(p);
  const sub = await open(p, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW).catch((e: unknown) => {
    // Swapped for a non-directory since the lstat: remove that instead.
    if (errno(e) === 'ELOOP' || errno(e) === 'ENOTDIR') return undefined;
    throw e;
  });
  if (!sub) return unlink(p);
  try {
    for (const child of await readdir(fdPath(sub.fd))) await removeIn(sub, child);
  } finally {
    await sub.close();
  }
  await rmdir(p);
}
