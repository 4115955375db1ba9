import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { compressFile, writeRawContent } from './zstd.js';

describe('zstd codec (Debian zstd CLI)', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-zstd-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('compresses, reports the raw digest, and restores the raw bytes', async () => {
    const raw = Buffer.concat([Buffer.from('text '.repeat(100_000)), randomBytes(1000)]);
    await writeFile(join(dir, 'raw'), raw);
    const digest = await compressFile(join(dir, 'raw'), join(dir, 'raw.zst'), 3);
    expect(digest).toEqual({
      digest: `sha256:${createHash('sha256').update(raw).digest('hex')}`,
      size: raw.length,
    });
    expect((await stat(join(dir, 'raw.zst'))).size).toBeLessThan(raw.length / 10);
    const back = await writeRawContent(
      createReadStream(join(dir, 'raw.zst')),
      'zstd',
      join(dir, 'back'),
      'blob',
    );
    expect(back).toEqual(digest);
    expect((await readFile(join(dir, 'back'))).equals(raw)).toBe(true);
  });

  it('reports a corrupt stream as IntegrityMismatch and an unknown codec as Unsupported', async () => {
    await writeFile(join(dir, 'raw'), randomBytes(200_000));
    await compressFile(join(dir, 'raw'), join(dir, 'raw.zst'), 1);
    const bytes = await readFile(join(dir, 'raw.zst'));
    bytes[bytes.length >> 1]! ^= 0xff;
    await expect(
      writeRawContent(Readable.from([bytes]), 'zstd', join(dir, 'out'), 'layer X'),
    ).rejects.toMatchObject({
      reason: 'IntegrityMismatch',
      message: expect.stringMatching(/layer X is corrupt/),
    });
    await expect(
      writeRawContent(Readable.from([Buffer.from('not zstd at all')]), 'zstd', join(dir, 'out2'), 'b'),
    ).rejects.toMatchObject({
      reason: 'IntegrityMismatch',
    });
    await expect(
      writeRawContent(Readable.from([bytes]), 'lz4', join(dir, 'out3'), 'b'),
    ).rejects.toMatchObject({ reason: 'Unsupported' });
  });
});
