// Layer decompression chosen by the stream's magic bytes (media types are sometimes wrong): gzip with zlib,
// zstd with Debian's `zstd -dc` (Node 20's zlib has no zstd), uncompressed tar as is.

import { spawn } from 'node:child_process';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { ImageError } from './errors.js';

export type Compression = 'gzip' | 'zstd' | 'none';

export function sniffCompression(head: Buffer): Compression {
  if (head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b) return 'gzip';
  if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528) return 'zstd';
  return 'none';
}

async function* gunzip(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  const z = createGunzip({ chunkSize: 256 * 1024 });
  const feeding = pipeline(Readable.from(source, { objectMode: false }), z);
  feeding.catch(() => {}); // surfaced below through the iteration or the await
  try {
    for await (const chunk of z) yield chunk as Buffer;
    await feeding;
  } catch (e) {
    if (e instanceof ImageError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code === 'string' && code.startsWith('Z_')) {
      throw new ImageError('UnsupportedImage', `layer is not valid gzip: ${(e as Error).message}`, {
        cause: e,
      });
    }
    throw e;
  } finally {
    z.destroy();
  }
}

async function* unzstd(source: AsyncIterable<Buffer>, zstdPath: string): AsyncGenerator<Buffer> {
  const child = spawn(zstdPath, ['-dcq'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const stderr: Buffer[] = [];
  child.stderr.on('data', (b: Buffer) => stderr.push(b));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve(code));
  });
  exited.catch(() => {});
  const feeding = pipeline(Readable.from(source, { objectMode: false }), child.stdin);
  feeding.catch(() => {});
  let finished = false;
  try {
    for await (const chunk of child.stdout) yield chunk as Buffer;
    await feeding;
    const code = await exited;
    if (code !== 0) {
      const msg = Buffer.concat(stderr).toString().trim().split('\n').slice(-3).join('; ');
      throw new ImageError(
        'UnsupportedImage',
        `layer is not valid zstd: zstd exited with ${code}${msg ? `: ${msg}` : ''}`,
      );
    }
    finished = true;
  } catch (e) {
    if (
      (e as NodeJS.ErrnoException).code === 'ENOENT' &&
      (e as NodeJS.ErrnoException).syscall?.startsWith('spawn')
    ) {
      throw new ImageError('Internal', `zstd layers need ${zstdPath} (Debian package zstd); it is missing`, {
        cause: e,
      });
    }
    throw e;
  } finally {
    if (!finished && child.exitCode === null && child.pid !== undefined) child.kill('SIGKILL');
  }
}

/** Decompresses a layer stream by its magic bytes. */
export async function* decompressLayer(
  source: AsyncIterable<Buffer>,
  opts: { zstdPath?: string } = {},
): AsyncGenerator<Buffer> {
  const it = source[Symbol.asyncIterator]();
  const head: Buffer[] = [];
  let n = 0;
  let ended = false;
  while (n < 4) {
    const r = await it.next();
    if (r.done) {
      ended = true;
      break;
    }
    const b = r.value;
    head.push(b);
    n += b.length;
  }
  const first = Buffer.concat(head);
  async function* all(): AsyncGenerator<Buffer> {
    if (first.length > 0) yield first;
    if (ended) return;
    for (;;) {
      const r = await it.next();
      if (r.done) return;
      yield r.value;
    }
  }
  const kind = sniffCompression(first);
  if (kind === 'gzip') yield* gunzip(all());
  else if (kind === 'zstd') yield* unzstd(all(), opts.zstdPath ?? 'zstd');
  else yield* all();
}
