// Reading local image layouts (`oci:` directories, `oci-archive:` files) without leaving the directories the
// operator allows (`[image.resolver].local_image_dirs`, docs/images.md#local-layouts).
//
// A reference names a path; the allowed directory that contains it is opened (it is the operator's, and may be a
// symlink), then every component below it is opened relative to the directory before it through
// /proc/self/fd/<fd>/<name> with O_NOFOLLOW (Node has no openat): a symlink anywhere below the allowed directory
// is refused instead of followed, and a rename racing the walk cannot send it elsewhere. Files are opened with
// O_NONBLOCK and must be regular files (a FIFO would block a read forever), reads are capped, and no error
// message ever carries file content.

import { constants as C } from 'node:fs';
import { lstat, open, type FileHandle } from 'node:fs/promises';
import { ImageError } from './errors.js';

const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW | C.O_NONBLOCK;
const FILE_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK;

/** A path below one allowed directory: the directory and the components under it ("." and ".." never occur). */
export interface ContainedPath {
  root: string;
  components: readonly string[];
}

/** Normalises the configured directories (absolute, no trailing "/"). */
export function normalizeLocalDirs(dirs: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of dirs) {
    const dir = raw.trim().replace(/\/+$/, '');
    if (!dir.startsWith('/') || dir.split('/').some((c) => c === '..' || c === '.')) {
      throw new ImageError(
        'Internal',
        `image.resolver.local_image_dirs: "${raw}" must be an absolute path without "." or ".."`,
      );
    }
    if (dir === '') throw new ImageError('Internal', 'image.resolver.local_image_dirs must not contain "/"');
    if (!out.includes(dir)) out.push(dir);
  }
  return out;
}

/** The allowed directory holding `path` (already normalised, as parseLocalReference leaves it), or undefined. */
export function containedPath(dirs: readonly string[], path: string): ContainedPath | undefined {
  for (const root of dirs) {
    if (path === root) return { root, components: [] };
    if (path.startsWith(`${root}/`)) {
      const components = path.slice(root.length + 1).split('/');
      if (components.some((c) => c === '' || c === '.' || c === '..')) return undefined;
      return { root, components };
    }
  }
  return undefined;
}

/** `base` with more components below it (names inside a layout: "index.json", "blobs/sha256/<hex>"). */
export function below(base: ContainedPath, ...more: string[]): ContainedPath {
  return { root: base.root, components: [...base.components, ...more] };
}

function shown(p: ContainedPath, upTo = p.components.length): string {
  return [p.root, ...p.components.slice(0, upTo)].join('/');
}

async function openStep(dir: FileHandle, name: string, flags: number, p: ContainedPath, i: number) {
  const at = `/proc/self/fd/${dir.fd}/${name}`;
  try {
    return await open(at, flags);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const where = shown(p, i + 1);
    if (code === 'ENOENT') throw new ImageError('NotFound', `${where} does not exist`);
    if (code === 'ELOOP' || code === 'ENOTDIR') {
      const isLink = await lstat(at).then(
        (s) => s.isSymbolicLink(),
        () => false,
      );
      if (isLink) {
        throw new ImageError(
          'InvalidReference',
          `${where} is a symbolic link: local image paths are read without following symlinks`,
        );
      }
      throw new ImageError('UnsupportedImage', `${where} is not a directory`);
    }
    throw new ImageError('Internal', `opening ${where}: ${code ?? 'error'}`, { cause: e });
  }
}

/** Opens the directory or regular file at `p`, refusing symlinks, FIFOs, devices and sockets below the root. */
export async function openContained(p: ContainedPath, kind: 'file' | 'dir'): Promise<FileHandle> {
  let fh: FileHandle;
  try {
    fh = await open(p.root, C.O_RDONLY | C.O_DIRECTORY);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new ImageError('NotFound', `local image directory ${p.root} does not exist`);
    throw new ImageError('Internal', `opening local image directory ${p.root}: ${code ?? 'error'}`, {
      cause: e,
    });
  }
  try {
    for (let i = 0; i < p.components.length; i++) {
      const last = i === p.components.length - 1;
      const next = await openStep(
        fh,
        p.components[i]!,
        last && kind === 'file' ? FILE_FLAGS : DIR_FLAGS,
        p,
        i,
      );
      await fh.close();
      fh = next;
    }
    const st = await fh.stat();
    if (kind === 'file' && !st.isFile())
      throw new ImageError('UnsupportedImage', `${shown(p)} is not a regular file`);
    if (kind === 'dir' && !st.isDirectory())
      throw new ImageError('UnsupportedImage', `${shown(p)} is not a directory`);
    return fh;
  } catch (e) {
    await fh.close().catch(() => {});
    throw e;
  }
}

/** Reads a whole file of at most `maxBytes` (more is TooLarge, checked before and while reading). */
export async function readContained(p: ContainedPath, maxBytes: number, what: string): Promise<Buffer> {
  const fh = await openContained(p, 'file');
  try {
    return await readAllBounded(fh, maxBytes, what);
  } finally {
    await fh.close();
  }
}

/** Reads an open file to its end, failing once it holds more than `maxBytes` (it may grow while read). */
export async function readAllBounded(fh: FileHandle, maxBytes: number, what: string): Promise<Buffer> {
  const tooLarge = () => new ImageError('TooLarge', `${what} is larger than ${maxBytes} bytes`);
  if ((await fh.stat()).size > maxBytes) throw tooLarge();
  const chunks: Buffer[] = [];
  let len = 0;
  for (;;) {
    const chunk = Buffer.alloc(Math.min(1024 * 1024, maxBytes + 1 - len));
    const { bytesRead } = await fh.read(chunk, 0, chunk.length, len);
    if (bytesRead === 0) break;
    len += bytesRead;
    if (len > maxBytes) throw tooLarge();
    chunks.push(chunk.subarray(0, bytesRead));
  }
  return Buffer.concat(chunks, len);
}
