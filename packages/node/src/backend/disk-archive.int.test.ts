// Archives from the repository are extracted (as root) through a hash of exactly the bytes tar reads: a file
// swapped after the repository verified it fails, and what it extracted is removed.

import { createHash, randomBytes } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
  appendFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { archiveDir, extractArchive } from './disk-archive.js';

const base = mkdtempSync(join(tmpdir(), 'aenv-disk-archive-'));
afterAll(() => rmSync(base, { recursive: true, force: true }));

const digestOf = (file: string) => ({
  digest: `sha256:${createHash('sha256').update(readFileSync(file)).digest('hex')}`,
  size: readFileSync(file).length,
});

async function archiveOf(name: string, content: string): Promise<string> {
  const src = join(base, `${name}-src`);
  mkdirSync(join(src, 'home'), { recursive: true });
  writeFileSync(join(src, 'home', 'file.txt'), content);
  const out = join(base, `${name}.tar`);
  await archiveDir(src, out);
  return out;
}

describe('extractArchive with the expected digest', () => {
  it('extracts an archive that matches', async () => {
    const tar = await archiveOf('good', 'hello');
    const dir = join(base, 'good-out');
    await extractArchive(tar, dir, digestOf(tar));
    expect(readFileSync(join(dir, 'home', 'file.txt'), 'utf8')).toBe('hello');
  });

  it('extracts a larger archive (tar may stop reading before the padding after its end marker)', async () => {
    const src = join(base, 'large-src');
    mkdirSync(src);
    for (let i = 0; i < 200; i++) writeFileSync(join(src, `f${i}`), randomBytes(1000 + i * 97));
    writeFileSync(join(src, 'big'), randomBytes(3 * 1024 * 1024 + 123));
    const tar = join(base, 'large.tar');
    await archiveDir(src, tar);
    const dir = join(base, 'large-out');
    await extractArchive(tar, dir, digestOf(tar));
    expect(readFileSync(join(dir, 'big')).equals(readFileSync(join(src, 'big')))).toBe(true);
  });

  it('refuses an archive swapped after it was verified, and removes what it extracted', async () => {
    const tar = await archiveOf('orig', 'genuine');
    const expected = digestOf(tar);
    const evil = await archiveOf('evil', 'planted');
    writeFileSync(tar, readFileSync(evil));
    const dir = join(base, 'swapped-out');
    await expect(extractArchive(tar, dir, expected)).rejects.toMatchObject({ reason: 'IntegrityMismatch' });
    expect(existsSync(dir)).toBe(false);
  });

  it('refuses an archive with data appended after its end', async () => {
    const tar = await archiveOf('appended', 'x');
    const expected = digestOf(tar);
    appendFileSync(tar, Buffer.alloc(64 * 1024, 1));
    const dir = join(base, 'appended-out');
    await expect(extractArchive(tar, dir, expected)).rejects.toMatchObject({ reason: 'IntegrityMismatch' });
    expect(existsSync(dir)).toBe(false);
  });
});
