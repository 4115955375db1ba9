// `aenv-idmap fstab` against real mounts and a real network namespace (the driver's sandbox mounts). Root only.
import { chown, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../../util/exec.js';
import { buildIdmapHelper, idmappedMountArgv } from './idmap-helper.js';
import { mountSandbox, unmountTree } from './mounts.js';

const IS_ROOT = process.getuid?.() === 0;

describe.skipIf(!IS_ROOT)('aenv-idmap fstab', () => {
  let dir: string;
  let helper: string;
  let netns: string;
  const nsName = `aenv-fstab-${process.pid}`;

  beforeAll(async () => {
    dir = await mkdtemp('/tmp/aenv-fstab-');
    helper = await buildIdmapHelper(join(dir, 'native'));
    await run('ip', ['netns', 'add', nsName]);
    await run('ip', ['-n', nsName, 'link', 'add', 'probe0', 'type', 'veth', 'peer', 'name', 'probe1']);
    netns = `/run/netns/${nsName}`;
  });
  afterAll(async () => {
    if (dir) await unmountTree(dir).catch(() => undefined);
    await run('ip', ['netns', 'del', nsName], { allowFailure: true });
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('mounts an overlay with relative lower dirs and a sysfs that shows the given netns', async () => {
    const root = join(dir, 'ok');
    for (const d of ['layers/a', 'upper', 'work', 'rootfs', 'sys'])
      await mkdir(join(root, d), { recursive: true });
    await writeFile(join(root, 'layers/a/from-layer'), 'layer\n');
    const fstab = join(root, 'fstab');
    await writeFile(
      fstab,
      `overlay ${root}/rootfs overlay nodev,lowerdir=a,upperdir=${root}/upper,workdir=${root}/work 0 0\n` +
        `sysfs ${root}/sys sysfs ro,nosuid,nodev,noexec 0 0\n`,
    );
    await mountSandbox(helper, netns, fstab, join(root, 'layers'));

    expect(await readFile(join(root, 'rootfs/from-layer'), 'utf8')).toBe('layer\n');
    await writeFile(join(root, 'rootfs/written'), 'x');
    expect(await readdir(join(root, 'upper'))).toEqual(['written']);
    // The netns's own interfaces, not the host's.
    expect((await readdir(join(root, 'sys/class/net'))).sort()).toEqual(['lo', 'probe0', 'probe1']);
    const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
    const line = (target: string) => mountinfo.split('\n').find((l) => l.split(' ')[4] === target) ?? '';
    expect(line(`${root}/sys`)).toMatch(/ ro,nosuid,nodev,noexec/);
    expect(line(`${root}/rootfs`)).toMatch(/ rw,nodev/);
    expect(await unmountTree(root)).toHaveLength(2);
  });

  it('detaches the idmapped layer views once the overlay is made of them: the overlay keeps their owners', async () => {
    const root = join(dir, 'detach');
    for (const d of ['layer', 'l', 'upper', 'work', 'rootfs', 'sys'])
      await mkdir(join(root, d), { recursive: true });
    await writeFile(join(root, 'layer/owned'), 'x');
    await chown(join(root, 'layer/owned'), 100_000 + 7, 100_000 + 7);
    const fstab = join(root, 'fstab');
    await writeFile(
      fstab,
      `overlay ${root}/rootfs overlay nodev,lowerdir=${root}/l/0,upperdir=${root}/upper,workdir=${root}/work 0 0\n` +
        `sysfs ${root}/sys sysfs ro,nosuid,nodev,noexec 0 0\n`,
    );
    const idmap = idmappedMountArgv(
      helper,
      { hostStart: 100_000, size: 65536 },
      { hostStart: 300_000, size: 65536 },
      [join(root, 'layer')],
      [join(root, 'l/0')],
    );
    await mountSandbox(helper, netns, fstab, undefined, idmap, [join(root, 'l/0')]);

    const mounted = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').map((l) => l.split(' ')[4]);
    expect(mounted).not.toContain(`${root}/l/0`);
    expect(await readdir(join(root, 'l/0'))).toEqual([]);
    // Still seen through the view the overlay cloned: the sandbox range's owner, not the layer's.
    expect((await stat(join(root, 'rootfs/owned'))).uid).toBe(300_000 + 7);
    expect(await unmountTree(root)).toHaveLength(2);
  });

  it('fails naming what it could not do, and mounts nothing after the line that failed', async () => {
    const root = join(dir, 'bad');
    await mkdir(join(root, 'sys'), { recursive: true });
    const fstab = join(root, 'fstab');

    await writeFile(fstab, `sysfs ${root}/sys sysfs ro 0 0\n`);
    await expect(mountSandbox(helper, join(dir, 'no-such-netns'), fstab)).rejects.toThrow(
      /open .*no-such-netns: No such file or directory/,
    );

    await writeFile(
      fstab,
      `overlay ${root}/missing overlay lowerdir=x 0 0\nsysfs ${root}/sys sysfs ro 0 0\n`,
    );
    await expect(mountSandbox(helper, netns, fstab)).rejects.toThrow(/mount .*missing: /);
    await writeFile(fstab, `sysfs ${root}/sys\n`);
    await expect(mountSandbox(helper, netns, fstab)).rejects.toThrow(
      /line 1: needs SOURCE TARGET TYPE OPTIONS/,
    );
    await writeFile(fstab, `sysfs ${root}/sys sysfs ro,${'o'.repeat(5000)} 0 0\n`);
    await expect(mountSandbox(helper, netns, fstab)).rejects.toThrow(/line 1: options longer than/);
    expect(await unmountTree(root)).toEqual([]);
  });
});
