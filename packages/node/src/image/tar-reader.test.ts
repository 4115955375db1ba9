import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync, linkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readTar, type TarHeader } from './tar-reader.js';
import { buildTar } from './testing/tar-builder.js';

async function* once(b: Buffer): AsyncGenerator<Buffer> {
  yield b;
}

async function headers(tar: Buffer): Promise<(TarHeader & { body: string })[]> {
  const out: (TarHeader & { body: string })[] = [];
  for await (const e of readTar(once(tar)))
    out.push({ ...e.header, body: (await e.readAll()).toString('latin1') });
  return out;
}

describe('readTar', () => {
  it('keeps binary PAX xattr values byte-exact (tar-stream would decode them as UTF-8)', async () => {
    const value = Buffer.from([0x01, 0x00, 0x00, 0x02, 0x80, 0xff, 0xfe, 0x0a, 0x3d, 0x20]);
    const [h] = await headers(
      buildTar([{ name: 'f', content: 'x', xattrs: { 'security.capability': value, 'user.a': 'b' } }]),
    );
    expect(h!.xattrs.get('security.capability')!.equals(value)).toBe(true);
    expect(h!.xattrs.get('user.a')!.toString()).toBe('b');
  });

  it('reads what GNU tar writes: long names and link targets, hardlinks, symlinks, base-256 ids', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-tar-'));
    try {
      const root = join(dir, 'root');
      const deep = join(root, 'd'.repeat(90), 'e'.repeat(90));
      mkdirSync(deep, { recursive: true });
      writeFileSync(join(deep, 'file'), 'payload');
      linkSync(join(deep, 'file'), join(root, 'hard'));
      symlinkSync('t'.repeat(150), join(root, 'sym'));
      // uid 3000000 does not fit the octal field: gnu writes base-256, posix a PAX record.
      for (const format of ['gnu', 'posix']) {
        const tar = execFileSync(
          'tar',
          [
            `--format=${format}`,
            '--owner=3000000:3000000',
            '--group=3000000:3000000',
            '-C',
            root,
            '-cf',
            '-',
            '.',
          ],
          {
            maxBuffer: 1 << 24,
          },
        );
        const list = await headers(tar);
        const byName = new Map(list.map((h) => [h.name.replace(/^\.\//, ''), h]));
        const longName = `${'d'.repeat(90)}/${'e'.repeat(90)}/file`;
        // Whichever of the two names comes first holds the data; the other is a hardlink to it.
        const pair = [byName.get('hard'), byName.get(longName)];
        const file = pair.find((h) => h?.type === 'file');
        const hard = pair.find((h) => h?.type === 'hardlink');
        expect(file?.body).toBe('payload');
        expect(hard?.linkname).toBe(file?.name);
        expect(file?.uid).toBe(3000000);
        expect(byName.get('sym')?.type).toBe('symlink');
        expect(byName.get('sym')?.linkname).toBe('t'.repeat(150));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('splits input at any chunk boundary', async () => {
    const tar = buildTar([
      { name: 'a', content: Buffer.alloc(1000, 1) },
      { name: 'b/', type: 'dir' },
      { name: 'b/c', content: 'c' },
    ]);
    async function* bytewise(): AsyncGenerator<Buffer> {
      for (let i = 0; i < tar.length; i += 3) yield tar.subarray(i, i + 3);
    }
    const names: string[] = [];
    for await (const e of readTar(bytewise())) {
      names.push(e.header.name);
      if (e.header.name === 'a') expect((await e.readAll()).length).toBe(1000);
    }
    expect(names).toEqual(['a', 'b/', 'b/c']);
  });

  it('rejects sparse files and unknown entry types', async () => {
    const tar = buildTar([{ name: 'f', content: 'x', pax: { 'GNU.sparse.major': '1' } }]);
    await expect(headers(tar)).rejects.toThrow(/sparse/);
  });
});
