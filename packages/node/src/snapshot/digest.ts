import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { Transform, type TransformCallback } from 'node:stream';

export interface FileDigest {
  digest: string;
  size: number;
}

export const digestHex = (digest: string): string => digest.slice('sha256:'.length);

/** sha256 + size of a file, streamed. */
export async function digestFile(path: string): Promise<FileDigest> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(path)) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { digest: `sha256:${hash.digest('hex')}`, size };
}

/** A pass-through stream that hashes and counts what flows through it. */
export class DigestMeter extends Transform {
  private readonly hash: Hash = createHash('sha256');
  private bytes = 0;

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.hash.update(chunk);
    this.bytes += chunk.length;
    cb(null, chunk);
  }

  result(): FileDigest {
    return { digest: `sha256:${this.hash.digest('hex')}`, size: this.bytes };
  }
}
