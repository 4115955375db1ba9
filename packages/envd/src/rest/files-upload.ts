import {
  closeSync,
  constants,
  fchownSync,
  lchownSync,
  mkdirSync,
  openSync,
  statSync,
  write as fsWrite,
} from 'node:fs';
import { promisify } from 'node:util';
import type { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { posix } from 'node:path';
import type { IncomingHttpHeaders } from 'node:http';
import type { EnvdContext } from '../context.js';
import { HttpError, type Req } from '../http/respond.js';
import { METADATA_XATTR_PREFIX } from '../fs/entry-info.js';
import { errnoCode } from '../fs/errors.js';
import { resolveUserPath } from '../fs/paths.js';
import type { SandboxUser } from '../users/user-db.js';
import { fileHttpError } from './errors.js';
import { boundaryOf, MultipartError, readMultipart } from './multipart.js';

const write = promisify(fsWrite);

export interface UploadedEntry {
  path: string;
  name: string;
  type: 'file';
  metadata?: Record<string, string>;
}

const METADATA_HEADER = 'x-metadata-';
const MAX_KEY_BYTES = 255 - METADATA_XATTR_PREFIX.length;
const MAX_METADATA_BYTES = 4096;

/** X-Metadata-<key>: <value> headers → lowercased keys, validated like E2B's envd. */
export function metadataFromHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  let total = 0;
  for (const [name, raw] of Object.entries(headers)) {
    if (!name.toLowerCase().startsWith(METADATA_HEADER)) continue;
    const key = name.slice(METADATA_HEADER.length).toLowerCase();
    const value = Array.isArray(raw) ? raw.join(', ') : (raw ?? '');
    if (!key) throw new HttpError(400, 'empty metadata key');
    if (!/^[\x21-\x7e]+$/.test(key))
      throw new HttpError(400, `metadata key '${key}' must be printable ASCII`);
    if (!/^[\x20-\x7e]*$/.test(value))
      throw new HttpError(400, `metadata value of '${key}' must be printable ASCII`);
    if (Buffer.byteLength(key) > MAX_KEY_BYTES)
      throw new HttpError(400, `metadata key '${key}' longer than ${MAX_KEY_BYTES} bytes`);
    total += Buffer.byteLength(key) + Buffer.byteLength(value);
    out[key] = value;
  }
  if (total > MAX_METADATA_BYTES)
    throw new HttpError(400, `metadata larger than ${MAX_METADATA_BYTES} bytes`);
  return out;
}

/**
 * Creates the missing directories of `dir` one by one, mode 0755, each owned by `user` (E2B's envd
 * `permissions.EnsureDirs`). An existing non-directory on the way is an ENOTDIR.
 */
function ensureDirs(dir: string, user: SandboxUser): void {
  const missing: string[] = [];
  for (let d = dir; ; d = posix.dirname(d)) {
    try {
      if (statSync(d).isDirectory()) break;
      throw Object.assign(new Error(`'${d}' is not a directory`), { code: 'ENOTDIR' });
    } catch (err) {
      if (errnoCode(err) !== 'ENOENT') throw err;
    }
    missing.push(d);
    if (d === '/') break;
  }
  for (const d of missing.reverse()) {
    try {
      mkdirSync(d, 0o755);
    } catch (err) {
      if (errnoCode(err) === 'EEXIST') continue;
      throw err;
    }
    lchownSync(d, user.uid, user.gid);
  }
}

/**
 * Opens path for writing the way E2B's envd does: as envd (root), creating missing parents owned by `user`,
 * truncating or creating the file, which then belongs to `user` whoever owned it before. So `user` can upload
 * anywhere in the sandbox (E2B's SDK tests write to `/`); the kernel still keeps every path inside it.
 */
function openForWrite(
  ctx: EnvdContext,
  user: SandboxUser,
  path: string,
  metadata: Record<string, string>,
): number {
  try {
    if (statSync(path).isDirectory()) throw new HttpError(400, `path is a directory: ${path}`);
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') throw err;
  }
  ensureDirs(posix.dirname(path), user);
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC, 0o666);
  try {
    // The file opened, not whatever the path names by now.
    fchownSync(fd, user.uid, user.gid);
    replaceMetadata(ctx, path, metadata);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return fd;
}

/** Each upload replaces all user.e2b.* xattrs of the file. */
function replaceMetadata(ctx: EnvdContext, path: string, metadata: Record<string, string>): void {
  const native = ctx.native;
  const hasNew = Object.keys(metadata).length > 0;
  if (!native) {
    if (hasNew) throw new HttpError(500, 'file metadata is not available (native helper missing)');
    return;
  }
  try {
    for (const key of Object.keys(native.getXattrs(path, METADATA_XATTR_PREFIX)))
      native.removeXattr(path, METADATA_XATTR_PREFIX + key);
  } catch {
    /* no xattr support and nothing to clear */
  }
  for (const [key, value] of Object.entries(metadata)) {
    try {
      native.setXattr(path, METADATA_XATTR_PREFIX + key, value);
    } catch (err) {
      if (errnoCode(err) === 'ENOTSUP')
        throw new HttpError(400, `the filesystem of '${path}' does not support file metadata`);
      throw err;
    }
  }
}

async function writeStream(fd: number, source: AsyncIterable<Buffer>): Promise<void> {
  for await (const chunk of source) {
    let off = 0;
    while (off < chunk.length) {
      const { bytesWritten } = await write(fd, chunk, off, chunk.length - off);
      off += bytesWritten;
    }
  }
}

async function writeOne(
  ctx: EnvdContext,
  user: SandboxUser,
  path: string,
  source: AsyncIterable<Buffer>,
  metadata: Record<string, string>,
): Promise<UploadedEntry> {
  let fd: number;
  try {
    fd = openForWrite(ctx, user, path, metadata);
  } catch (err) {
    throw fileHttpError(err, path);
  }
  try {
    await writeStream(fd, source);
  } catch (err) {
    if (err instanceof MultipartError)
      throw new HttpError(400, `error reading multipart body: ${err.message}`);
    if (errnoCode(err) === 'Z_DATA_ERROR' || errnoCode(err) === 'Z_BUF_ERROR') {
      throw new HttpError(400, `error decompressing request body: ${(err as Error).message}`);
    }
    throw fileHttpError(err, path);
  } finally {
    closeSync(fd);
  }
  const entry: UploadedEntry = { path, name: posix.basename(path), type: 'file' };
  if (Object.keys(metadata).length) entry.metadata = metadata;
  return entry;
}

/** The upload body, decompressed when needed. Iterating it never destroys the request, so an error
 * response can still be sent after a failed write. */
function requestBody(req: Req): AsyncIterable<Buffer> {
  const encoding = String(req.headers['content-encoding'] ?? 'identity')
    .trim()
    .toLowerCase();
  if (encoding === 'identity' || encoding === '')
    return (req as Readable).iterator({ destroyOnReturn: false });
  if (encoding === 'gzip' || encoding === 'x-gzip') {
    const gunzip = createGunzip();
    req.on('error', (err) => gunzip.destroy(err));
    (req as NodeJS.ReadableStream).pipe(gunzip);
    return gunzip.iterator({ destroyOnReturn: false });
  }
  throw new HttpError(400, `unsupported Content-Encoding '${encoding}' (supported: gzip, identity)`);
}

/** POST /files: multipart (one or many parts named `file`) or a raw octet-stream body. */
export async function uploadFiles(
  ctx: EnvdContext,
  req: Req,
  user: SandboxUser,
  queryPath: string | undefined,
): Promise<UploadedEntry[]> {
  const metadata = metadataFromHeaders(req.headers);
  const contentType = String(req.headers['content-type'] ?? '');
  const mediaType = contentType.split(';')[0]!.trim().toLowerCase();
  const resolve = (p: string) => {
    try {
      return resolveUserPath(p, user, ctx.state.defaultWorkdir);
    } catch (err) {
      throw fileHttpError(err, p);
    }
  };

  if (mediaType === 'application/octet-stream') {
    if (queryPath === undefined)
      throw new HttpError(400, 'path query parameter is required for raw body upload');
    return [await writeOne(ctx, user, resolve(queryPath), requestBody(req), metadata)];
  }
  if (mediaType.startsWith('multipart/')) {
    const boundary = boundaryOf(contentType);
    if (!boundary) throw new HttpError(400, 'multipart Content-Type without boundary');
    const entries: UploadedEntry[] = [];
    try {
      for await (const part of readMultipart(requestBody(req), boundary)) {
        if (part.name !== 'file') continue;
        const target = queryPath ?? part.filename;
        if (!target)
          throw new HttpError(400, 'multipart part has no filename and no path query parameter was given');
        const path = resolve(target);
        if (entries.some((e) => e.path === path)) {
          throw new HttpError(
            400,
            `you cannot upload multiple files to the same path '${path}' in one upload request, only the first specified file was uploaded`,
          );
        }
        entries.push(await writeOne(ctx, user, path, part.body, metadata));
      }
    } catch (err) {
      if (err instanceof MultipartError)
        throw new HttpError(400, `error reading multipart body: ${err.message}`);
      throw err;
    }
    return entries;
  }
  throw new HttpError(
    400,
    `unsupported content type: ${contentType}, expected multipart/form-data or application/octet-stream`,
  );
}
