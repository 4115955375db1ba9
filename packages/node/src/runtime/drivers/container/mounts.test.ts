import { describe, expect, it } from 'vitest';
import { overlayOptions, sandboxFstab } from './mounts.js';
import { mountsUnder, parseMountInfo } from './mountinfo.js';

describe('overlayOptions', () => {
  it('lists lower layers top-first', () => {
    expect(overlayOptions(['/l/base', '/l/mid', '/l/top'], '/s/u', '/s/w')).toEqual({
      options: 'lowerdir=/l/top:/l/mid:/l/base,upperdir=/s/u,workdir=/s/w',
    });
  });

  it('falls back to paths relative to their common parent when the options would not fit a page', () => {
    const layers = Array.from(
      { length: 60 },
      (_, i) => `/var/lib/aenv/image-cache/layers/sha256/${'a'.repeat(60)}${i}`,
    );
    const r = overlayOptions(layers, '/s/u', '/s/w');
    expect(r.cwd).toBe('/var/lib/aenv/image-cache/layers/sha256');
    expect(r.options.startsWith(`lowerdir=${'a'.repeat(60)}59:`)).toBe(true);
    expect(r.options.length).toBeLessThan(4000);
  });

  it('refuses a layer list that cannot fit at all', () => {
    const layers = Array.from({ length: 200 }, (_, i) => `/x${i}/${'b'.repeat(60)}`);
    expect(() => overlayOptions(layers, '/u', '/w')).toThrow(/layers/);
  });
});

describe('sandboxFstab', () => {
  it('mounts the overlay nodev (setuid kept for sudo) and the sysfs read-only, nosuid, nodev, noexec', () => {
    const { text } = sandboxFstab({
      lowerDirsBottomFirst: ['/l/a'],
      upperDir: '/s/u',
      workDir: '/s/w',
      rootfsDir: '/s/rootfs',
      sysDir: '/s/sys',
    });
    expect(text).toBe(
      'overlay /s/rootfs overlay nodev,lowerdir=/l/a,upperdir=/s/u,workdir=/s/w 0 0\n' +
        'sysfs /s/sys sysfs ro,nosuid,nodev,noexec 0 0\n',
    );
  });
});

describe('parseMountInfo', () => {
  const text = [
    '22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard',
    '80 22 0:50 / /h/sandboxes rw,noatime - btrfs /dev/loop0 rw,space_cache=v2',
    '81 80 0:51 / /h/sandboxes/sb1/rootfs rw - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w',
    '82 80 0:22 / /h/sandboxes/sb1/sys ro - sysfs sysfs ro',
    '83 22 0:52 / /mnt/with\\040space rw - tmpfs tmpfs rw',
    '30 22 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory',
  ].join('\n');
  const mounts = parseMountInfo(text);

  it('reads mount point, type, source and super options, unescaping octal', () => {
    expect(mounts).toHaveLength(6);
    expect(mounts[2]).toMatchObject({
      mountPoint: '/h/sandboxes/sb1/rootfs',
      fsType: 'overlay',
      source: 'overlay',
    });
    expect(mounts[2]?.superOptions).toContain('lowerdir=/l');
    expect(mounts[4]?.mountPoint).toBe('/mnt/with space');
    expect(mounts[5]?.superOptions).toEqual(['rw', 'memory']);
    expect(mounts[1]?.mountOptions).toEqual(['rw', 'noatime']);
  });

  it('lists mounts below a dir deepest first, not prefix lookalikes', () => {
    expect(mountsUnder(mounts, '/h/sandboxes/sb1').map((m) => m.mountPoint)).toEqual([
      '/h/sandboxes/sb1/rootfs',
      '/h/sandboxes/sb1/sys',
    ]);
    expect(mountsUnder(mounts, '/h/sandboxes/sb').length).toBe(0);
  });
});
