// Needs root: makes overlay whiteouts (0/0 character devices), trusted.* xattrs and files of other owners.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  createReadStream,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  linkSync,
  writeFileSync,
  existsSync,
  statSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { unpackLayer } from '../image/layer-unpacker.js';
import { readTar } from '../image/tar-reader.js';
import { exportUpperAsLayer } from './layer-export.js';

const SHIFT = { hostStart: 100000, size: 65536 };
const OTHER = { hostStart: 300000, size: 65536 };
const work = mkdtempSync(join(tmpdir(), 'layer-export-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function py(code: string, ...args: string[]): string {
  return execFileSync('python3', ['-c', code, ...args]).toString();
}

/** An overlay upper as a sandbox leaves it: shifted owners, a whiteout, an opaque dir, links, a fifo. */
function makeUpper(): string {
  const u = join(work, 'upper');
  mkdirSync(join(u, 'etc'), { recursive: true });
  mkdirSync(join(u, 'opq'));
  mkdirSync(join(u, 'home', 'alice'), { recursive: true });
  writeFileSync(join(u, 'etc', 'app.conf'), 'conf\n');
  writeFileSync(join(u, 'etc', 'hosts'), '127.0.0.1 runtime-written\n');
  writeFileSync(join(u, 'opq', 'inside'), 'x');
  writeFileSync(join(u, 'home', 'alice', 'notes'), 'n');
  linkSync(join(u, 'home', 'alice', 'notes'), join(u, 'home', 'alice', 'notes-link'));
  symlinkSync('../etc/app.conf', join(u, 'home', 'conf'));
  py('import os,sys; os.mknod(sys.argv[1], 0o20000, os.makedev(0, 0))', join(u, 'gone'));
  py('import os,sys; os.mkfifo(sys.argv[1], 0o600)', join(u, 'pipe'));
  py('import os,sys; os.setxattr(sys.argv[1], "trusted.overlay.opaque", b"y")', join(u, 'opq'));
  for (const p of ['', 'etc', 'etc/app.conf', 'etc/hosts', 'opq', 'opq/inside', 'home', 'pipe'])
    chownSync(join(u, p), SHIFT.hostStart, SHIFT.hostStart);
  for (const p of ['home/alice', 'home/alice/notes'])
    chownSync(join(u, p), SHIFT.hostStart + 1000, SHIFT.hostStart + 1000);
  py(
    'import os,sys; os.lchown(sys.argv[1], sys.argv[2] and int(sys.argv[2]), int(sys.argv[2]))',
    join(u, 'home', 'conf'),
    String(SHIFT.hostStart),
  );
  chmodSync(join(u, 'etc', 'app.conf'), 0o640);
  return u;
}

async function sha(path: string): Promise<string> {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

describe('exportUpperAsLayer', () => {
  const upper = makeUpper();

  it('writes an OCI layer with container owners and OCI whiteouts, deterministically', async () => {
    const a = join(work, 'a.tar');
    const b = join(work, 'b.tar');
    const stats = await exportUpperAsLayer(upper, a, { idMap: SHIFT });
    expect(stats).toMatchObject({ whiteouts: 1, opaqueDirs: 1, skippedDevices: 0, clampedIds: 0 });
    await exportUpperAsLayer(upper, b, { idMap: SHIFT });
    expect(await sha(a)).toBe(await sha(b));

    const entries = new Map<string, { type: string; uid: number; mode: number }>();
    for await (const e of readTar(createReadStream(a))) entries.set(e.header.name, e.header);
    expect([...entries.keys()].sort()).toEqual(
      [
        '.wh.gone',
        'etc',
        'etc/app.conf',
        'home',
        'home/alice',
        'home/alice/notes',
        'home/alice/notes-link',
        'home/conf',
        'opq',
        'opq/.wh..wh..opq',
        'opq/inside',
        'pipe',
      ].sort(),
    );
    expect(entries.get('etc/app.conf')).toMatchObject({ type: 'file', uid: 0, mode: 0o640 });
    expect(entries.get('home/alice/notes')).toMatchObject({ uid: 1000 });
    expect(entries.get('home/alice/notes-link')).toMatchObject({ type: 'hardlink' });
    await expect(exportUpperAsLayer(upper, a, { idMap: SHIFT })).rejects.toThrow(/EEXIST/);
  });

  it('unpacks (image cache unpacker) into an equivalent lower dir for another uid range', async () => {
    const layer = join(work, 'layer.tar');
    await exportUpperAsLayer(upper, layer, { idMap: SHIFT });
    const dest = join(work, 'lower');
    mkdirSync(dest);
    await unpackLayer(createReadStream(layer), dest, { idMap: OTHER });
    const st = lstatSync(join(dest, 'etc', 'app.conf'));
    expect([st.uid, st.mode & 0o7777]).toEqual([OTHER.hostStart, 0o640]);
    expect(lstatSync(join(dest, 'home', 'alice', 'notes')).uid).toBe(OTHER.hostStart + 1000);
    expect(statSync(join(dest, 'home', 'alice', 'notes')).ino).toBe(
      statSync(join(dest, 'home', 'alice', 'notes-link')).ino,
    );
    expect(readlinkSync(join(dest, 'home', 'conf'))).toBe('../etc/app.conf');
    const gone = lstatSync(join(dest, 'gone'));
    expect(gone.isCharacterDevice() && gone.rdev === 0).toBe(true);
    expect(lstatSync(join(dest, 'pipe')).isFIFO()).toBe(true);
    expect(
      py(
        'import os,sys; print(os.getxattr(sys.argv[1], "trusted.overlay.opaque").decode())',
        join(dest, 'opq'),
      ).trim(),
    ).toBe('y');
    expect(existsSync(join(dest, 'etc', 'hosts'))).toBe(false);
  });

  it('maps owners outside the sandbox range to nobody', async () => {
    const u = join(work, 'upper2');
    mkdirSync(u);
    writeFileSync(join(u, 'foreign'), 'f');
    chownSync(u, SHIFT.hostStart, SHIFT.hostStart);
    chownSync(join(u, 'foreign'), 5, 5);
    const out = join(work, 'foreign.tar');
    const stats = await exportUpperAsLayer(u, out, { idMap: SHIFT });
    expect(stats.clampedIds).toBe(2);
    for await (const e of readTar(createReadStream(out))) expect(e.header.uid).toBe(65534);
  });
});
