// The volume content layer on real directories, with what a hostile sandbox can plant in a volume: symlinks to
// /etc, to another volume and up the tree, FIFOs, dot-dot paths.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isDomainError } from '@aenv/protocol';
import { VolumeFiles, volumePathParts } from './content.js';
import { forgetSweptDirectories } from './write-leftovers.js';

const OWNER = { hostStart: 1_000_000, size: 65536 };
const asRoot = process.getuid?.() === 0;

async function text(files: VolumeFiles, path: string): Promise<string> {
  const { stream } = await files.readFile(path);
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString();
}

const kindOf = async (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: unknown) => (isDomainError(e) ? e.kind : `not a domain error: ${String(e)}`),
  );

describe.skipIf(!asRoot)('VolumeFiles', () => {
  let dir: string;
  let vol: string;
  let other: string;
  let files: VolumeFiles;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'aenv-volfiles-'));
    vol = join(dir, 'vol');
    other = join(dir, 'other');
    mkdirSync(vol);
    mkdirSync(other);
    writeFileSync(join(other, 'secret'), 'other volume');
    files = new VolumeFiles(vol, OWNER);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('splits paths and refuses dot-dot and NUL', () => {
    expect(volumePathParts('/a/./b//c/')).toEqual(['a', 'b', 'c']);
    expect(volumePathParts('')).toEqual([]);
    for (const p of ['..', '/a/../..', '../x', 'a/..', 'a\0b', 'x'.repeat(4097)])
      expect(() => volumePathParts(p), p).toThrow();
  });

  it('writes, reads, stats, lists, makes dirs and removes, with owners as sandboxes see them', async () => {
    const st = await files.writeFile('/d/f.txt', Readable.from(['hello']), {
      force: true,
      uid: 1000,
      gid: 1001,
      mode: 0o640,
    });
    expect(st).toMatchObject({
      name: 'f.txt',
      path: '/d/f.txt',
      type: 'file',
      size: 5,
      uid: 1000,
      gid: 1001,
      mode: 0o640,
    });
    expect(statSync(join(vol, 'd', 'f.txt')).uid).toBe(OWNER.hostStart + 1000);
    expect(await text(files, 'd/f.txt')).toBe('hello');
    expect(await files.stat('/')).toMatchObject({ type: 'directory', path: '/' });
    await files.writeFile('/d/f.txt', Readable.from(['replaced']));
    expect(await text(files, '/d/f.txt')).toBe('replaced');
    expect(readdirSync(join(vol, 'd'))).toEqual(['f.txt']); // no temporary file left
    await files.makeDir('/d/e/g', { force: true });
    expect(await kindOf(files.makeDir('/d/e'))).toBe('already_exists');
    expect((await files.makeDir('/d/e', { force: true })).type).toBe('directory');
    expect((await files.list('/d')).map((e) => e.path)).toEqual(['/d/e', '/d/f.txt']);
    expect((await files.list('/', 3)).map((e) => e.path)).toEqual(['/d', '/d/e', '/d/e/g', '/d/f.txt']);
    expect(await kindOf(files.list('/nope'))).toBe('not_found');
    expect(await kindOf(files.writeFile('/missing/f', Readable.from(['x'])))).toBe('not_found');
    await files.updateMetadata('/d/f.txt', { mode: 0o600, uid: 5 });
    expect(await files.stat('/d/f.txt')).toMatchObject({ mode: 0o600, uid: 5, gid: 0 });
    for (const own of [{ uid: -1 }, { uid: 65536 }, { mode: 0o4755 }, { gid: 1.5 }])
      expect(await kindOf(files.updateMetadata('/d/f.txt', own)), JSON.stringify(own)).toBe(
        'invalid_argument',
      );
    await files.remove('/d');
    expect(readdirSync(vol)).toEqual([]);
    expect(await kindOf(files.remove('/d'))).toBe('not_found');
    expect(await kindOf(files.remove('/'))).toBe('invalid_argument');
  });

  it('never follows a symlink a sandbox planted: to /etc, to another volume, or up the tree', async () => {
    symlinkSync('/etc', join(vol, 'etc'));
    symlinkSync(other, join(vol, 'other'));
    symlinkSync('/etc/passwd', join(vol, 'passwd'));
    symlinkSync('../other/secret', join(vol, 'up'));
    const passwd = readFileSync('/etc/passwd', 'utf8');

    for (const p of ['/etc/passwd', '/other/secret', '/passwd', '/up'])
      expect(await kindOf(files.readFile(p)), p).toBe('invalid_argument');
    expect(await kindOf(files.list('/etc'))).toBe('invalid_argument');
    expect(await kindOf(files.list('/other'))).toBe('invalid_argument');
    expect(await kindOf(files.stat('/etc/passwd'))).toBe('invalid_argument');
    expect(await kindOf(files.writeFile('/other/secret', Readable.from(['owned'])))).toBe('invalid_argument');
    expect(await kindOf(files.makeDir('/etc/aenv-test', { force: true }))).toBe('invalid_argument');
    expect(await kindOf(files.updateMetadata('/passwd', { mode: 0o777 }))).toBe('invalid_argument');
    expect(await kindOf(files.remove('/etc/passwd'))).toBe('invalid_argument');
    // The link itself is what stat, list, write and remove act on.
    expect(await files.stat('/etc')).toMatchObject({ type: 'symlink', target: '/etc' });
    expect((await files.list('/')).find((e) => e.name === 'other')).toMatchObject({ type: 'symlink' });
    await files.writeFile('/passwd', Readable.from(['mine']));
    expect(lstatSync(join(vol, 'passwd')).isSymbolicLink()).toBe(false);
    await files.remove('/other');
    expect(existsSync(join(other, 'secret'))).toBe(true);
    // A directory holding a link to /etc is removed without touching /etc.
    mkdirSync(join(vol, 'tree'));
    symlinkSync('/etc', join(vol, 'tree', 'etc'));
    await files.remove('/tree');
    expect(readFileSync('/etc/passwd', 'utf8')).toBe(passwd);
    expect(readFileSync(join(other, 'secret'), 'utf8')).toBe('other volume');
  });

  it('refuses FIFOs and devices instead of hanging on them', async () => {
    execFileSync('mkfifo', [join(vol, 'fifo')]);
    expect(await kindOf(files.readFile('/fifo'))).toBe('invalid_argument');
    expect((await files.stat('/fifo')).type).toBe('unknown');
  });

  it('removes the temporaries a crash mid-write left, at the next write into their directory, and nothing else', async () => {
    mkdirSync(join(vol, 'd'));
    const hourAgo = new Date(Date.now() - 3_600_000);
    const plant = (name: string, mode: number, old = true) => {
      const p = join(vol, 'd', name);
      writeFileSync(p, 'partial', { mode });
      chmodSync(p, mode);
      if (old) utimesSync(p, hourAgo, hourAgo);
      return p;
    };
    const leftover = plant('.aenv-write-0123456789abcdef', 0o600);
    // Not ours, or not a crash's: a write in flight now (new), a finished mode, a user's look-alike name.
    const inFlight = plant('.aenv-write-fedcba9876543210', 0o600, false);
    const finished = plant('.aenv-write-00000000000000aa', 0o644);
    const lookalike = plant('.aenv-write-mine', 0o600);
    const elsewhere = join(vol, '.aenv-write-1111111111111111');
    writeFileSync(elsewhere, 'x', { mode: 0o600 });
    utimesSync(elsewhere, hourAgo, hourAgo);
    forgetSweptDirectories(); // earlier tests' directories had this one's inode number
    await files.writeFile('/d/f.txt', Readable.from(['hello']));
    expect(existsSync(leftover)).toBe(false);
    for (const p of [inFlight, finished, lookalike, elsewhere]) expect(existsSync(p), p).toBe(true);
    expect(await text(files, '/d/f.txt')).toBe('hello');
  });
});
