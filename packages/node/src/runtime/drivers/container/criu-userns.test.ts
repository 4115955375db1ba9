import { mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { imagesForRange, rewriteUsernsImage } from './criu-userns.js';

// What CRIU 4.2 wrote for a sandbox mapped 0 -> 296608 (65536 ids): two magics, one entry, uid and gid map.
const DUMPED = Buffer.from('1943565406494755180000000a0a080010a08d1218808004120a080010a08d1218808004', 'hex');
const FROM = { hostStart: 296608, size: 65536 };
const TO = { hostStart: 165536, size: 65536 };

describe('CRIU user namespace image', () => {
  let dir: string | undefined;
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('moves both maps to the new range and keeps everything else', () => {
    const out = Buffer.from(rewriteUsernsImage(DUMPED, FROM, TO));
    expect(out.subarray(0, 8)).toEqual(DUMPED.subarray(0, 8));
    // Back again gives exactly what CRIU wrote.
    expect(Buffer.from(rewriteUsernsImage(out, TO, FROM))).toEqual(DUMPED);
    expect(out.includes(Buffer.from('a08d12', 'hex'))).toBe(false);
  });

  it('refuses maps outside the range the checkpoint says it was taken in, and damaged images', () => {
    expect(() => rewriteUsernsImage(DUMPED, TO, FROM)).toThrow(/outside the checkpoint's range/);
    expect(() => rewriteUsernsImage(DUMPED.subarray(0, 20), FROM, TO)).toThrow(/truncated/);
    expect(() => rewriteUsernsImage(DUMPED.subarray(0, 6), FROM, TO)).toThrow(/truncated/);
  });

  it('makes a restorable view of a checkpoint: links to every image, the user namespace rewritten', async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-userns-'));
    await writeFile(join(dir, 'userns-13.img'), DUMPED);
    await writeFile(join(dir, 'pages-1.img'), 'pages');
    await writeFile(join(dir, 'aenv-checkpoint.json'), '{}');
    const view = await imagesForRange(dir, '.userns-s1', FROM, TO);
    expect((await readdir(view)).sort()).toEqual(['aenv-checkpoint.json', 'pages-1.img', 'userns-13.img']);
    expect((await stat(join(view, 'pages-1.img'))).ino).toBe((await stat(join(dir, 'pages-1.img'))).ino);
    expect(await readFile(join(view, 'userns-13.img'))).toEqual(
      Buffer.from(rewriteUsernsImage(DUMPED, FROM, TO)),
    );
    expect(await readFile(join(dir, 'userns-13.img'))).toEqual(DUMPED);
    // A checkpoint of another range is refused and leaves no view behind.
    await expect(imagesForRange(dir, '.userns-s2', TO, FROM)).rejects.toThrow(
      /cannot move its user namespace/,
    );
    expect(await readdir(dir)).not.toContain('.userns-s2');
  });

  it('makes the view reachable from inside the restored namespace under the server umask (077)', async () => {
    const d = await mkdtemp(join(tmpdir(), 'aenv-userns-'));
    const old = process.umask(0o077);
    try {
      await writeFile(join(d, 'userns-13.img'), DUMPED);
      const view = await imagesForRange(d, '.userns-s3', FROM, TO);
      expect((await stat(view)).mode & 0o7777).toBe(0o711);
      expect((await stat(join(view, 'userns-13.img'))).mode & 0o7777).toBe(0o644);
    } finally {
      process.umask(old);
      await rm(d, { recursive: true, force: true });
    }
  });
});
