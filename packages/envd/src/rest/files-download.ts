import { closeSync, constants, createReadStream, fstatSync, openSync, readSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { createGzip, deflateRawSync } from 'node:zlib';
import { posix } from 'node:path';
import type { EnvdContext } from '../context.js';
import { HttpError, type Req, type Res } from '../http/respond.js';
import { resolveUserPath } from '../fs/paths.js';
import type { SandboxUser } from '../users/user-db.js';
import { contentDisposition, sniffContentType, typeByExtension } from './content-type.js';
import { fileHttpError } from './errors.js';

/**
 * Chooses the response encoding from Accept-Encoding: 'gzip', 'identity', or undefined (→ 406).
 * `gzipCostly`: the file does not compress (see `compressesPoorly`); then identity is preferred when allowed,
 * because Node's fetch, which sends `gzip` on every request, inflates incompressible data at ~1 MB/s.
 */
export function negotiateEncoding(
  header: string | undefined,
  gzipCostly = false,
): 'gzip' | 'identity' | undefined {
  if (!header || !header.trim()) return 'identity';
  const q = new Map<string, number>();
  for (const part of header.split(',')) {
    const [coding, ...params] = part.trim().toLowerCase().split(';');
    if (!coding) continue;
    let weight = 1;
    for (const p of params) {
      const m = /^\s*q\s*=\s*([0-9.]+)\s*$/.exec(p);
      if (m) weight = Number(m[1]);
    }
    q.set(coding.trim(), weight);
  }
  const star = q.get('*');
  const gzip = q.get('gzip') ?? q.get('x-gzip') ?? star ?? 0;
  const identity = q.get('identity') ?? (star === 0 ? 0 : 1);
  if (gzip > 0 && !(gzipCostly && identity > 0)) return 'gzip';
  return identity > 0 ? 'identity' : undefined;
}

const SAMPLE_BYTES = 64 * 1024;

/** True for files big enough to matter whose first 64 KiB shrink by less than 10 % (media, archives, random). */
export function compressesPoorly(fd: number, size: number): boolean {
  if (size <= SAMPLE_BYTES) return false;
  const sample = Buffer.alloc(SAMPLE_BYTES);
  const n = readSync(fd, sample, 0, SAMPLE_BYTES, 0);
  return deflateRawSync(sample.subarray(0, n), { level: 1 }).length > n * 0.9;
}

interface ByteRange {
  start: number;
  end: number;
}

/** A single satisfiable `bytes=` range, 'unsatisfiable', or undefined (serve the whole file). */
export function parseRange(
  header: string | undefined,
  size: number,
): ByteRange | 'unsatisfiable' | undefined {
  if (!header) return undefined;
  const m = /^bytes=\s*(\d*)\s*-\s*(\d*)\s*$/.exec(header.trim());
  if (!m) return undefined; // multiple or malformed ranges: RFC 9110 allows ignoring Range
  const [, a, b] = m;
  if (a === '' && b === '') return undefined;
  if (a === '') {
    const suffix = Number(b);
    if (suffix === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(a);
  if (start >= size) return 'unsatisfiable';
  const end = b === '' ? size - 1 : Math.min(Number(b), size - 1);
  if (end < start) return undefined;
  return { start, end };
}

/** GET /files: streams a file as `user`, with gzip, Range and If-Modified-Since like E2B's envd. */
export async function downloadFile(
  ctx: EnvdContext,
  req: Req,
  res: Res,
  user: SandboxUser,
  rawPath: string,
): Promise<void> {
  let path: string;
  try {
    path = resolveUserPath(rawPath, user, ctx.state.defaultWorkdir);
  } catch (err) {
    throw fileHttpError(err, rawPath);
  }
  let fd: number;
  try {
    fd = ctx.asUser(user, () => openSync(path, constants.O_RDONLY | constants.O_NONBLOCK));
  } catch (err) {
    throw fileHttpError(err, path);
  }
  let handedOff = false;
  try {
    const st = fstatSync(fd);
    if (st.isDirectory()) throw new HttpError(400, `path '${path}' is a directory`);
    if (!st.isFile()) throw new HttpError(400, `path '${path}' is not a regular file`);

    const headers = req.headers;
    const hasRangeOrConditional = !!(
      headers['range'] ||
      headers['if-modified-since'] ||
      headers['if-none-match'] ||
      headers['if-range']
    );
    const encoding = hasRangeOrConditional
      ? 'identity'
      : negotiateEncoding(headers['accept-encoding'] as string | undefined, compressesPoorly(fd, st.size));
    if (!encoding) throw new HttpError(406, 'no acceptable content encoding (supported: gzip, identity)');

    const common: Record<string, string> = {
      vary: 'Accept-Encoding',
      'content-disposition': contentDisposition(posix.basename(path)),
    };
    if (encoding === 'gzip') {
      res.writeHead(200, {
        ...common,
        'content-encoding': 'gzip',
        'content-type': typeByExtension(path) ?? 'application/octet-stream',
      });
      handedOff = true;
      await pipeline(createReadStream('', { fd }), createGzip({ level: 1 }), res);
      return;
    }

    const mtime = new Date(Math.floor(st.mtimeMs / 1000) * 1000);
    common['last-modified'] = mtime.toUTCString();
    common['accept-ranges'] = 'bytes';
    const since = headers['if-modified-since'] ? Date.parse(headers['if-modified-since'] as string) : NaN;
    if (!headers['range'] && !Number.isNaN(since) && mtime.getTime() <= since) {
      res.writeHead(304, common);
      res.end();
      return;
    }
    let type = typeByExtension(path);
    if (!type) {
      const head = Buffer.alloc(Math.min(512, st.size));
      const n = head.length ? readSync(fd, head, 0, head.length, 0) : 0;
      type = sniffContentType(head.subarray(0, n));
    }
    const range = parseRange(headers['range'] as string | undefined, st.size);
    if (range === 'unsatisfiable') {
      res.writeHead(416, {
        ...common,
        'content-range': `bytes */${st.size}`,
        'content-type': 'text/plain; charset=utf-8',
      });
      res.end('invalid range: failed to overlap');
      return;
    }
    const start = range?.start ?? 0;
    const end = range?.end ?? st.size - 1;
    const length = st.size === 0 ? 0 : end - start + 1;
    res.writeHead(range ? 206 : 200, {
      ...common,
      'content-type': type,
      'content-length': String(length),
      ...(range ? { 'content-range': `bytes ${start}-${end}/${st.size}` } : {}),
    });
    if (length === 0 || req.method === 'HEAD') {
      res.end();
      return;
    }
    handedOff = true;
    await pipeline(createReadStream('', { fd, start, end }), res);
  } finally {
    if (!handedOff) closeSync(fd);
  }
}
