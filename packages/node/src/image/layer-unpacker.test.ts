// Layer extraction without privileges: ownership maps every id onto the test's own uid (a one-id range), so
// chown succeeds unprivileged. Whiteouts, xattrs and the real shift are covered by layer-unpacker.int.test.ts.

import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ImageError } from './errors.js';
import { unpackLayer } from './layer-unpacker.js';
import { buildTar, type TarSpec } from './testing/tar-builder.js';

let work: string;
let dest: string;
let outside: string;

const me = process.getuid!();
const idMap = { hostStart: me, size: 1 };

async function* chunks(buf: Buffer, size = 777): AsyncGenerator<Buffer> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

function unpack(entries: TarSpec[]) {
  return unpackLayer(chunks(buildTar(entries)), dest, { idMap });
}

async function unpackError(entries: TarSpec[]): Promise<ImageError> {
  try {
    await unpack(entries);
  } catch (e) {
    if (e instanceof ImageError) return e;
    throw e;
  }
  throw new Error('expected the layer to be rejected');
}

beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'aenv-unpack-'));
  dest = join(work, 'layer');
  outside = join(work, 'outside');
  mkdirSync(dest, { mode: 0o700 });
  mkdirSync(outside);
  writeFileSync(join(outside, 'target'), 'original');
});

afterEach(() => {
  rmSync(work, { recursive: true, force: true });
});

describe('unpackLayer', () => {
  it('writes files, directories, symlinks and hardlinks with modes and times', async () => {
    const long = `deep/${'x'.repeat(120)}/file.txt`;
    const stats = await unpack([
      { name: './', type: 'dir', mode: 0o755 },
      { name: 'etc/', type: 'dir', mode: 0o755, mtime: 1_600_000_000 },
      { name: 'etc/hostname', content: 'box\n', mode: 0o644, mtime: 1_600_000_100 },
      { name: 'bin/tool', content: Buffer.alloc(3 * 1024 * 1024, 7), mode: 0o4755 },
      { name: 'etc/link', type: 'symlink', linkname: '/etc/hostname' },
      { name: 'etc/hard', type: 'hardlink', linkname: 'etc/hostname' },
      { name: long, content: 'long name' },
      { name: 'tmp/', type: 'dir', mode: 0o1777 },
      { name: 'empty', content: '' },
      { name: 'dev/null', type: 'chardev', devmajor: 1, devminor: 3 },
      { name: 'dev/sda', type: 'blockdev', devmajor: 8, devminor: 0 },
    ]);
    expect(readFileSync(join(dest, 'etc/hostname'), 'utf8')).toBe('box\n');
    expect(statSync(join(dest, 'etc/hostname')).mode & 0o7777).toBe(0o644);
    expect(statSync(join(dest, 'etc/hostname')).mtimeMs).toBe(1_600_000_100_000);
    expect(statSync(join(dest, 'etc')).mtimeMs).toBe(1_600_000_000_000);
    expect(statSync(join(dest, 'tmp')).mode & 0o7777).toBe(0o1777);
    expect(statSync(join(dest, 'bin/tool')).mode & 0o7777).toBe(0o4755);
    expect(statSync(join(dest, 'bin/tool')).size).toBe(3 * 1024 * 1024);
    expect(readlinkSync(join(dest, 'etc/link'))).toBe('/etc/hostname');
    expect(statSync(join(dest, 'etc/hard')).ino).toBe(statSync(join(dest, 'etc/hostname')).ino);
    expect(readFileSync(join(dest, long), 'utf8')).toBe('long name');
    expect(statSync(join(dest, 'empty')).size).toBe(0);
    expect(readdirSync(join(dest, 'dev'))).toEqual([]);
    expect(statSync(join(dest, 'etc/hostname')).uid).toBe(me);
    expect(stats.skippedDevices).toBe(2);
    expect(stats.entries).toBe(11);
  });

  it('keeps non-UTF-8 names byte-exact', async () => {
    const name = Buffer.from([0x66, 0xff, 0xfe, 0x2e, 0x74]); // "f\xff\xfe.t"
    await unpack([{ name, content: 'x' }]);
    const entries = readdirSync(dest, { encoding: 'buffer' });
    expect(entries).toHaveLength(1);
    expect(entries[0]!.equals(name)).toBe(true);
  });

  it('lets a later entry replace an earlier one (file → dir → symlink)', async () => {
    await unpack([
      { name: 'a', content: 'file' },
      { name: 'a', type: 'dir' },
      { name: 'a/inner', content: 'x' },
      { name: 'a', type: 'symlink', linkname: 'elsewhere' },
    ]);
    expect(readlinkSync(join(dest, 'a'))).toBe('elsewhere');
  });

  it('maps ids outside the range to nobody and counts them', async () => {
    const stats = await unpack([{ name: 'f', content: 'x', uid: 1000, gid: 1000 }]);
    expect(stats.clampedIds).toBe(2);
    expect(statSync(join(dest, 'f')).uid).toBe(me);
  });

  it('rejects a corrupt header', async () => {
    const tar = buildTar([{ name: 'f', content: 'x' }]);
    tar[0] = 0x67; // changes the name, not the checksum
    await expect(unpackLayer(chunks(tar), dest, { idMap })).rejects.toThrow(/checksum/);
  });

  it('rejects a truncated archive', async () => {
    const tar = buildTar([{ name: 'f', content: Buffer.alloc(5000, 1) }]);
    await expect(unpackLayer(chunks(tar.subarray(0, 2048)), dest, { idMap })).rejects.toThrow(
      /end of archive/,
    );
  });
});

describe('hostile layers cannot write outside the layer directory', () => {
  afterEach(() => {
    // Whatever the layer did, the world outside is untouched.
    try {
      expect(readdirSync(outside)).toEqual(['target']);
      expect(readFileSync(join(outside, 'target'), 'utf8')).toBe('original');
      expect(readdirSync(work).sort()).toEqual(['layer', 'outside']);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('".." in a name', async () => {
    const e = await unpackError([{ name: '../outside/pwned', content: 'x' }]);
    expect(e.reason).toBe('UnsupportedImage');
    expect(e.message).toMatch(/escapes the layer/);
  });

  it('".." hidden in the middle', async () => {
    await unpackError([{ name: 'a/b/../../../outside/pwned', content: 'x' }]);
  });

  it('".." through a PAX path record', async () => {
    await unpackError([{ name: 'innocent', content: 'x', pax: { path: '../outside/pwned' } }]);
  });

  it('".." through a GNU long name', async () => {
    await unpackError([{ name: `../outside/${'p'.repeat(120)}`, content: 'x', gnuLongName: true }]);
  });

  it('absolute names land inside the layer', async () => {
    await unpack([{ name: `${outside}/pwned`, content: 'x' }]);
    expect(readFileSync(join(dest, outside, 'pwned'), 'utf8')).toBe('x');
  });

  it('writing through a symlink to an absolute path', async () => {
    const e = await unpackError([
      { name: 'evil', type: 'symlink', linkname: outside },
      { name: 'evil/pwned', content: 'x' },
    ]);
    expect(e.message).toMatch(/written through "evil", which is a symlink/);
  });

  it('writing through a relative symlink that climbs out', async () => {
    await unpackError([
      { name: 'a/', type: 'dir' },
      { name: 'a/up', type: 'symlink', linkname: '../../outside' },
      { name: 'a/up/pwned', content: 'x' },
    ]);
  });

  it('a directory replaced by a symlink, then written through', async () => {
    await unpackError([
      { name: 'd/', type: 'dir' },
      { name: 'd', type: 'symlink', linkname: outside },
      { name: 'd/pwned', content: 'x' },
    ]);
  });

  it('overwriting a symlink replaces the link, not its target', async () => {
    await unpack([
      { name: 'f', type: 'symlink', linkname: join(outside, 'target') },
      { name: 'f', content: 'replaced' },
    ]);
    expect(lstatSync(join(dest, 'f')).isFile()).toBe(true);
    expect(readFileSync(join(dest, 'f'), 'utf8')).toBe('replaced');
  });

  it('a hardlink to a file outside (absolute)', async () => {
    const e = await unpackError([{ name: 'h', type: 'hardlink', linkname: join(outside, 'target') }]);
    expect(e.message).toMatch(/not an earlier entry of this layer/);
  });

  it('a hardlink climbing out with ".."', async () => {
    await unpackError([{ name: 'h', type: 'hardlink', linkname: '../outside/target' }]);
  });

  it('a hardlink through a symlinked parent', async () => {
    await unpackError([
      { name: 'evil', type: 'symlink', linkname: outside },
      { name: 'h', type: 'hardlink', linkname: 'evil/target' },
    ]);
  });

  it('a hardlink to a symlink pointing out, then overwritten', async () => {
    await unpack([
      { name: 's', type: 'symlink', linkname: join(outside, 'target') },
      { name: 'h', type: 'hardlink', linkname: 's' },
      { name: 'h', content: 'replaced' },
    ]);
    expect(readFileSync(join(dest, 'h'), 'utf8')).toBe('replaced');
    expect(readlinkSync(join(dest, 's'))).toBe(join(outside, 'target'));
  });

  it('whiteouts naming ".." or nothing', async () => {
    await unpackError([{ name: 'a/.wh...', content: '' }]);
    await unpackError([{ name: '.wh.', content: '' }]);
  });

  it('a whiteout under a symlinked directory', async () => {
    await unpackError([
      { name: 'evil', type: 'symlink', linkname: outside },
      { name: 'evil/.wh.target', content: '' },
    ]);
  });

  it('a hardlink to a directory', async () => {
    const e = await unpackError([
      { name: 'd/', type: 'dir' },
      { name: 'h', type: 'hardlink', linkname: 'd' },
    ]);
    expect(e.message).toMatch(/points to a directory/);
  });
});
