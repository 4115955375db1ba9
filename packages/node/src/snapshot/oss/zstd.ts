import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { DigestMeter, type FileDigest } from '../digest.js';
import { RepositoryError } from '../errors.js';

interface ZstdRun {
  exit: Promise<{ code: number | null; stderr: string }>;
  stdin: NodeJS.WritableStream;
  stdout: Readable;
}

function startZstd(args: string[]): ZstdRun {
  const child = spawn('zstd', args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (s: string) => (stderr += s));
  const exit = new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
    child.once('error', (err) =>
      reject(
        new RepositoryError('Backend', `cannot run zstd (Debian package zstd): ${err.message}`, {
          cause: err,
        }),
      ),
    );
    child.once('close', (code) => resolve({ code, stderr: stderr.trim() }));
  });
  return { exit, stdin: child.stdin, stdout: child.stdout };
}

/**
 * zstd-compresses `src` into `dst` (multi-threaded, `level`), hashing the raw bytes on the way in. Returns the
 * raw digest/size so the caller can check the file did not change since it was first hashed.
 */
export async function compressFile(src: string, dst: string, level: number): Promise<FileDigest> {
  const z = startZstd(['-q', '-T0', `-${level}`, '-c']);
  const meter = new DigestMeter();
  const results = await Promise.allSettled([
    pipeline(createReadStream(src), meter, z.stdin),
    pipeline(z.stdout, createWriteStream(dst, { flags: 'wx', mode: 0o600 })),
    z.exit,
  ]);
  const exit = results[2];
  if (exit.status === 'rejected') throw exit.reason;
  if (exit.value.code !== 0)
    throw new RepositoryError('Backend', `zstd compression of ${src} failed: ${exit.value.stderr}`);
  for (const r of results) if (r.status === 'rejected') throw r.reason;
  return meter.result();
}

/**
 * Writes the raw content of `body` to `dst`, decompressing it when `codec` is zstd, and returns the raw
 * digest/size. A stream zstd rejects (corrupt frame, checksum error) is an IntegrityMismatch.
 */
export async function writeRawContent(
  body: Readable,
  codec: string,
  dst: string,
  what: string,
): Promise<FileDigest> {
  const meter = new DigestMeter();
  if (codec === 'none') {
    await pipeline(body, meter, createWriteStream(dst, { flags: 'wx', mode: 0o600 }));
    return meter.result();
  }
  if (codec !== 'zstd')
    throw new RepositoryError('Unsupported', `${what} is stored with unknown codec '${codec}'`);
  const z = startZstd(['-q', '-d', '-c']);
  const results = await Promise.allSettled([
    pipeline(body, z.stdin),
    pipeline(z.stdout, meter, createWriteStream(dst, { flags: 'wx', mode: 0o600 })),
    z.exit,
  ]);
  const exit = results[2];
  if (exit.status === 'rejected') throw exit.reason;
  if (exit.value.code !== 0) {
    const input = results[0];
    // zstd stopping early breaks our pipe; only a download failure that came first is not an integrity error.
    if (input.status === 'rejected' && !isPipeError(input.reason)) throw input.reason;
    throw new RepositoryError(
      'IntegrityMismatch',
      `${what} is corrupt: not a valid zstd stream (${exit.value.stderr || 'zstd failed'})`,
    );
  }
  for (const r of results) if (r.status === 'rejected') throw r.reason;
  return meter.result();
}

function isPipeError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'EPIPE' || code === 'ERR_STREAM_DESTROYED' || code === 'ERR_STREAM_PREMATURE_CLOSE';
}
