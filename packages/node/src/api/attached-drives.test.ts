import { describe, expect, it } from 'vitest';
import { MAX_ATTACHED_DRIVES, parseAttachedDrives } from './attached-drives.js';
import { ApiError } from './errors.js';

type Drive = Parameters<typeof parseAttachedDrives>[0] extends (infer T)[] | undefined ? T : never;
const drive = (o: Partial<Drive> = {}): Drive => ({ driveID: 'd', source: { image: 'aenv/busybox' }, ...o });

function refusal(drives: Drive[]): string | undefined {
  try {
    parseAttachedDrives(drives);
    return undefined;
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).status).toBe(400);
    return (e as ApiError).message;
  }
}

describe('attachedDrives of POST /sandboxes-cold', () => {
  it('fills in the reference defaults and keeps what is given', () => {
    expect(parseAttachedDrives(undefined)).toEqual([]);
    expect(parseAttachedDrives([])).toEqual([]);
    expect(
      parseAttachedDrives([
        drive({ driveID: ' a ' }),
        drive({ driveID: 'b', readOnly: false, mountPath: '/srv/b', subPath: 'x/y', diskSizeMB: 2048 }),
      ]),
    ).toEqual([
      { driveID: 'a', readOnly: true, mountPath: '/mnt/a', image: 'aenv/busybox' },
      {
        driveID: 'b',
        readOnly: false,
        mountPath: '/srv/b',
        subPath: 'x/y',
        diskSizeMB: 2048,
        image: 'aenv/busybox',
      },
    ]);
  });

  it.each([
    [drive({ driveID: '' }), /^attachedDrives\[0\]: driveID must not be empty$/],
    [drive({ driveID: '   ' }), /^attachedDrives\[0\]: driveID must not be empty$/],
    [drive({ driveID: 'a/b' }), /\(driveID "a\/b"\): driveID must not contain '\/'/],
    [drive({ driveID: 'rootfs' }), /\(driveID "rootfs"\): driveID rootfs is reserved/],
    [drive({ driveID: 'user_rootfs' }), /driveID user_rootfs is reserved/],
    [drive({ mountPath: 'mnt/d' }), /\(driveID "d"\): mountPath "mnt\/d" must be an absolute path/],
    [drive({ mountPath: '/' }), /mountPath "\/" must not be \//],
    [drive({ mountPath: '/mnt/a b' }), /mountPath "\/mnt\/a b" must not contain whitespace/],
    [drive({ mountPath: '/mnt/a\tb' }), /must not contain whitespace/],
    [drive({ mountPath: '/mnt/a,b' }), /must not contain whitespace, ','/],
    [drive({ mountPath: '/mnt/a:b' }), /must not contain whitespace, ',', ':'/],
    [drive({ mountPath: '/mnt/../etc' }), /must not contain '\.\.'/],
    [drive({ mountPath: '/mnt//x' }), /must be a normalized path/],
    [drive({ mountPath: '/mnt/x/' }), /must be a normalized path/],
    [drive({ mountPath: '/proc' }), /must not be, be under or contain \/proc/],
    [drive({ mountPath: '/sys/x' }), /contain \/sys/],
    [drive({ mountPath: '/dev/shm' }), /contain \/dev/],
    [drive({ mountPath: '/run' }), /contain \/run/],
    [drive({ mountPath: '/agentenv/x' }), /contain \/agentenv/],
    [drive({ mountPath: '/opt/agentenv' }), /contain \/opt\/agentenv/],
    [drive({ mountPath: '/opt' }), /contain \/opt\/agentenv/],
    [drive({ subPath: '' }), /\(driveID "d"\): subPath "" must not be empty/],
    [drive({ subPath: '/abs' }), /subPath "\/abs" must be a relative path/],
    [drive({ subPath: 'a b' }), /subPath "a b" must not contain whitespace/],
    [drive({ subPath: 'a,b' }), /subPath "a,b" must not contain/],
    [drive({ subPath: 'a:b' }), /subPath "a:b" must not contain/],
    [drive({ subPath: '../x' }), /subPath "\.\.\/x" must not contain '\.\.'/],
    [drive({ subPath: 'a/./b' }), /subPath "a\/\.\/b" must be a normalized path/],
    [drive({ diskSizeMB: 512 }), /\(driveID "d"\): diskSizeMB must be at least 1024 and divisible by 1024/],
    [drive({ diskSizeMB: 1536 }), /diskSizeMB must be at least 1024 and divisible by 1024/],
    [drive({ source: { image: '' } }), /\(driveID "d"\): source.image must not be empty/],
    [drive({ source: { image: '  ' } }), /source.image must not be empty/],
  ])('%j is a 400 naming the drive and the field', (d, message) => {
    expect(refusal([d])).toMatch(message);
  });

  it('refuses duplicates, nesting and more than 24 drives', () => {
    expect(refusal([drive({ driveID: 'a' }), drive({ driveID: 'a' })])).toMatch(
      /^attachedDrives\[1\] \(driveID "a"\): driveID is not unique/,
    );
    expect(refusal([drive({ driveID: 'a' }), drive({ driveID: 'b', mountPath: '/mnt/a' })])).toMatch(
      /^attachedDrives\[1\] \(driveID "b"\): mountPath is not unique/,
    );
    expect(refusal([drive({ driveID: 'a' }), drive({ driveID: 'b', mountPath: '/mnt/a/b' })])).toMatch(
      /\(driveID "b"\): mountPath must not be inside or above drive a's/,
    );
    expect(
      refusal([drive({ driveID: 'a', mountPath: '/mnt/a/b' }), drive({ driveID: 'b', mountPath: '/mnt' })]),
    ).toMatch(/inside or above drive a's/);
    // aenv: not at, inside or above a volumeMounts path.
    const onVolume = (mountPath: string, volume: string) => {
      try {
        parseAttachedDrives([drive({ mountPath })], [volume]);
        return undefined;
      } catch (e) {
        return (e as ApiError).message;
      }
    };
    for (const [p, v] of [
      ['/data', '/data'],
      ['/data/x', '/data'],
      ['/data', '/data/x'],
    ])
      expect(onVolume(p!, v!)).toMatch(/mountPath must not be at, inside or above volume mount path \/data/);
    expect(onVolume('/data2', '/data')).toBeUndefined();
    // Siblings sharing a name prefix are not nested.
    expect(refusal([drive({ driveID: 'a' }), drive({ driveID: 'ab' })])).toBeUndefined();
    const many = Array.from({ length: MAX_ATTACHED_DRIVES + 1 }, (_, i) => drive({ driveID: `d${i}` }));
    expect(refusal(many)).toBe('attachedDrives: at most 24 drives (got 25)');
    expect(refusal(many.slice(0, MAX_ATTACHED_DRIVES))).toBeUndefined();
  });
});
