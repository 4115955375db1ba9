import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readTar } from '../image/tar-reader.js';
import { tarEnd, tarHeader, tarPadding } from './tar-writer.js';

async function* once(b: Buffer) {
  yield b;
}

describe('tar writer', () => {
  it('writes entries the tar reader and GNU tar read back byte-exactly', async () => {
    const long = `${'d'.repeat(90)}/${'f'.repeat(80)}\xe9`; // > 100 bytes, not UTF-8
    const data = Buffer.from('hello\n');
    const cap = Buffer.from([0, 0, 0, 3, 1, 2, 3, 4]);
    const tar = Buffer.concat([
      tarHeader({ name: 'dir', type: 'directory', mode: 0o755, uid: 1, gid: 2, mtime: 1000 }),
      tarHeader({
        name: 'dir/file',
        type: 'file',
        mode: 0o4755,
        uid: 3000000,
        gid: 4,
        mtime: 1001,
        size: data.length,
        xattrs: new Map([['security.capability', cap]]),
      }),
      data,
      tarPadding(data.length),
      tarHeader({
        name: long,
        type: 'symlink',
        mode: 0o777,
        uid: 0,
        gid: 0,
        mtime: 1,
        linkname: `/${'t'.repeat(120)}`,
      }),
      tarHeader({
        name: 'dir/link',
        type: 'hardlink',
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime: 1,
        linkname: 'dir/file',
      }),
      tarHeader({ name: 'fifo', type: 'fifo', mode: 0o600, uid: 0, gid: 0, mtime: 1 }),
      tarEnd(),
    ]);
    const seen = [];
    for await (const e of readTar(once(tar))) {
      seen.push({ ...e.header, body: (await e.readAll()).toString() });
    }
    expect(seen.map((h) => [h.name, h.type, h.mode, h.uid, h.gid, h.mtime, h.linkname])).toEqual([
      ['dir', 'directory', 0o755, 1, 2, 1000, ''],
      ['dir/file', 'file', 0o4755, 3000000, 4, 1001, ''],
      [long, 'symlink', 0o777, 0, 0, 1, `/${'t'.repeat(120)}`],
      ['dir/link', 'hardlink', 0o644, 0, 0, 1, 'dir/file'],
      ['fifo', 'fifo', 0o600, 0, 0, 1, ''],
    ]);
    expect(seen[1]!.body).toBe('hello\n');
    expect(seen[1]!.xattrs.get('security.capability')).toEqual(cap);

    const dir = mkdtempSync(join(tmpdir(), 'tarw-'));
    try {
      writeFileSync(join(dir, 'x.tar'), tar);
      const listing = execFileSync('tar', ['-tvf', join(dir, 'x.tar'), '--numeric-owner']).toString();
      expect(listing).toMatch(/^drwxr-xr-x 1\/2 .* dir$/m);
      expect(listing).toMatch(/^-rwsr-xr-x 3000000\/4 +6 .* dir\/file$/m);
      expect(listing).toMatch(/dir\/link link to dir\/file/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
