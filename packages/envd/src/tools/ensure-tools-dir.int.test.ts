// The tools dir builder: layout, patchelf'd portable node, static aenv-init, versioning, atomic and
// idempotent builds, crash leftovers, and that the result runs in a rootfs without any libc.
import { execFileSync, spawnSync } from 'node:child_process';
import {
  appendFileSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestRootfs } from '../testing/rootfs.js';
import { AGENTENV_MOUNT } from '../version.js';
import { ensureToolsDir, type ToolsDir } from '@aenv/node';

let deps: string;
let bundle: string;
let tools: ToolsDir;

beforeAll(async () => {
  deps = mkdtempSync('/tmp/aenv-tools-test-');
  bundle = join(deps, 'envd.cjs');
  execFileSync(
    process.execPath,
    [new URL('../../scripts/bundle.mjs', import.meta.url).pathname, '--out', bundle],
    { stdio: 'pipe' },
  );
  tools = await ensureToolsDir({ depsPath: deps, bundlePath: bundle });
});
afterAll(() => rmSync(deps, { recursive: true, force: true }));

describe('ensureToolsDir', () => {
  it('lays out node, its libraries, aenv-init and the envd bundle', () => {
    expect(tools.dir).toBe(join(deps, 'tools', tools.version));
    expect(tools.version).toMatch(/^[0-9a-f]{12}$/);
    expect(readFileSync(join(tools.dir, 'VERSION'), 'utf8')).toBe(`${tools.version}\n`);
    for (const f of [
      'bin/node',
      'bin/aenv-init',
      'lib/ld-linux-x86-64.so.2',
      'lib/libc.so.6',
      'lib/libstdc++.so.6',
      'envd/envd.cjs',
      'envd/aenv_native.node',
      'envd/node-flags',
      'envd/node_modules/node-pty/lib/index.js',
      'envd/node_modules/node-pty/build/Release/pty.node',
    ]) {
      expect(existsSync(join(tools.dir, f)), f).toBe(true);
    }
    expect(statSync(join(tools.dir, 'bin/node')).mode & 0o777).toBe(0o755);
    expect(statSync(join(tools.dir, 'envd/envd.cjs')).mode & 0o777).toBe(0o644);
  });

  it("patchelf's node to the mounted loader and libraries; aenv-init is static", () => {
    const interp = execFileSync('patchelf', ['--print-interpreter', join(tools.dir, 'bin/node')], {
      encoding: 'utf8',
    }).trim();
    expect(interp).toBe(`${AGENTENV_MOUNT}/lib/ld-linux-x86-64.so.2`);
    expect(
      execFileSync('patchelf', ['--print-rpath', join(tools.dir, 'bin/node')], { encoding: 'utf8' }).trim(),
    ).toBe(`${AGENTENV_MOUNT}/lib`);
    const headers = execFileSync('readelf', ['-lW', join(tools.dir, 'bin/aenv-init')], { encoding: 'utf8' });
    expect(headers).not.toContain('INTERP');
    expect(
      execFileSync('readelf', ['-dW', join(tools.dir, 'bin/aenv-init')], { encoding: 'utf8' }),
    ).not.toContain('NEEDED');
  });

  it('is idempotent, and a changed bundle yields a new version', async () => {
    const before = statSync(join(tools.dir, 'VERSION')).mtimeMs;
    const again = await ensureToolsDir({ depsPath: deps, bundlePath: bundle });
    expect(again).toEqual(tools);
    expect(statSync(join(tools.dir, 'VERSION')).mtimeMs).toBe(before);

    const changed = join(deps, 'changed.cjs');
    copyFileSync(bundle, changed);
    appendFileSync(changed, '\n// changed\n');
    const other = await ensureToolsDir({ depsPath: deps, bundlePath: changed });
    expect(other.version).not.toBe(tools.version);
    rmSync(other.dir, { recursive: true, force: true });
  });

  it('agrees under concurrent builds and cleans up after crashed builders', async () => {
    const fresh = mkdtempSync('/tmp/aenv-tools-test-concurrent-');
    try {
      mkdirSync(join(fresh, 'tools', '.stage-abcdef012345-999999-deadbeef'), { recursive: true });
      const [a, b] = await Promise.all([
        ensureToolsDir({ depsPath: fresh, bundlePath: bundle }),
        ensureToolsDir({ depsPath: fresh, bundlePath: bundle }),
      ]);
      expect(a).toEqual(b);
      expect(a.version).toBe(tools.version);
      expect(
        readdirSync(join(fresh, 'tools')).filter((n) => n.startsWith('.stage') || n.startsWith('.build')),
      ).toEqual([]);
    } finally {
      rmSync(fresh, { recursive: true, force: true });
    }
  });

  it('rejects a missing bundle with a clear error', async () => {
    await expect(ensureToolsDir({ depsPath: deps, bundlePath: join(deps, 'missing.cjs') })).rejects.toThrow(
      /bundle .* is missing/,
    );
  });

  it('runs node from /agentenv in a busybox rootfs that has no libc', () => {
    const rootfs = mkdtempSync('/tmp/aenv-tools-test-rootfs-');
    try {
      buildTestRootfs(rootfs, { hostBash: false });
      expect(existsSync(join(rootfs, 'lib'))).toBe(false);
      const script = [
        'const cp = require("child_process");',
        'const forked = cp.spawnSync(process.execPath, ["-e", "process.stdout.write(String(1 + 1))"]).stdout.toString();',
        'console.log(JSON.stringify({ version: process.version, execPath: process.execPath, forked, intl: new Intl.DateTimeFormat("de-DE", { month: "long" }).format(new Date(2020, 0, 1)) }));',
      ].join(' ');
      const r = spawnSync(
        'unshare',
        [
          '--mount',
          '--',
          '/bin/sh',
          '-c',
          `mount --make-rprivate / && mount --bind "$1" "$2/agentenv" && chroot "$2" /agentenv/bin/node -e "$3"`,
          'sh',
          tools.dir,
          rootfs,
          script,
        ],
        { encoding: 'utf8', env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } },
      );
      expect(r.stderr).toBe('');
      expect(JSON.parse(r.stdout)).toEqual({
        version: process.version,
        execPath: '/agentenv/bin/node',
        forked: '2',
        intl: 'Januar',
      });
    } finally {
      rmSync(rootfs, { recursive: true, force: true });
    }
  });
});
