import { lstat, mkdir, mkdtemp, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { DriveSpec } from '../../driver.js';
import { assertDriveSources, driveFstabLines, drivePaths, prepareDriveDirs } from './drives.js';

const image = { reference: 'r/i:1', manifestDigest: 'sha256:1' };
const drive = (o: Partial<DriveSpec>): DriveSpec => ({
  id: 'd',
  image,
  layers: ['/layers/a', '/layers/b'],
  mountPath: '/mnt/d',
  readOnly: true,
  ...o,
});

describe('attached drive mounts', () => {
  let tmp: string | undefined;
  afterEach(async () => {
    if (tmp) await rm(tmp, { recursive: true, force: true });
    tmp = undefined;
  });

  it('a read-only drive is a lower-only overlay (or its one view); a writable one keeps its upper in the disk', () => {
    const ro = drivePaths('/s/x', '/s/x/upper', drive({ subPath: 'bin' }), 0);
    expect(ro).toEqual({
      views: ['/s/x/d/0/0', '/s/x/d/0/1'],
      merged: '/s/x/d/0/m',
      source: '/s/x/d/0/m/bin',
    });
    const one = drivePaths('/s/x', '/s/x/upper', drive({ layers: ['/layers/a'] }), 1);
    expect(one).toEqual({ views: ['/s/x/d/1/0'], merged: '/s/x/d/1/0', source: '/s/x/d/1/0' });
    const rw = drivePaths('/s/x', '/s/x/upper', drive({ readOnly: false, mountPath: '/data/w' }), 2);
    expect(rw).toMatchObject({ upper: '/s/x/upper/data/w', work: '/s/x/dw/2', merged: '/s/x/d/2/m' });
    expect(driveFstabLines([ro, one, rw])).toBe(
      'overlay /s/x/d/0/m overlay nosuid,nodev,index=off,ro,lowerdir=/s/x/d/0/1:/s/x/d/0/0 0 0\n' +
        'overlay /s/x/d/2/m overlay nosuid,nodev,index=off,lowerdir=/s/x/d/2/1:/s/x/d/2/0,upperdir=/s/x/upper/data/w,workdir=/s/x/dw/2 0 0\n',
    );
  });

  it('makes a writable drive its upper without following what the sandbox left on the way', async () => {
    tmp = await mkdtemp(join(tmpdir(), 'drives-'));
    const upper = join(tmp, 'upper');
    const outside = join(tmp, 'outside');
    await mkdir(outside);
    await mkdir(join(upper, 'data'), { recursive: true });
    // The sandbox made /data/w a symlink out of its disk.
    await symlink(outside, join(upper, 'data', 'w'));
    const d = drive({ readOnly: false, mountPath: '/data/w' });
    const paths = [drivePaths(tmp, upper, d, 0)];
    await prepareDriveDirs(tmp, upper, [d], paths, process.getuid?.() ?? 0);
    expect((await lstat(join(upper, 'data', 'w'))).isDirectory()).toBe(true);
    await expect(readlink(join(upper, 'data', 'w'))).rejects.toThrow();
    expect((await lstat(join(tmp, 'dw', '0'))).isDirectory()).toBe(true);
  });

  it("refuses a subPath that is missing, a file, or reached through the image's symlink", async () => {
    tmp = await mkdtemp(join(tmpdir(), 'drives-'));
    const merged = join(tmp, 'm');
    await mkdir(join(merged, 'ok', 'dir'), { recursive: true });
    await writeFile(join(merged, 'file'), '');
    await symlink('/etc', join(merged, 'link'));
    const at = (subPath: string) => {
      const d = drive({ subPath, layers: ['/l'] });
      return assertDriveSources([d], [{ views: [merged], merged, source: join(merged, subPath) }]);
    };
    await expect(at('ok/dir')).resolves.toBeUndefined();
    for (const bad of ['nope', 'file', 'link', 'link/ssl'])
      await expect(at(bad)).rejects.toThrow(`drive d: subPath ${bad} is not a directory of image r/i:1`);
  });
});
