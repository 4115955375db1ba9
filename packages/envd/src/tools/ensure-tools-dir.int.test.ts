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
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestRootfs } from '../testing/rootfs.js';
import { AGENTENV_MOUNT } from '../version.js';
import { COMPACT_MMAP_LIB, ensureToolsDir, type ToolsDir } from '@aenv/node';

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

/** Runs `script` with the tools' node from /agentenv, chrooted into `rootfs` (with a /proc), in a mount namespace. */
function nodeInRootfs(rootfs: string, script: string, nodeFlags = '') {
  return spawnSync(
    'unshare',
    [
      '--mount',
      '--',
      '/bin/sh',
      '-c',
      `mount --make-rprivate / && mount --bind "$1" "$2/agentenv" && mkdir -p "$2/proc" && ` +
        `mount -t proc proc "$2/proc" && chroot "$2" /agentenv/bin/node ${nodeFlags} -e "$3"`,
      'sh',
      tools.dir,
      rootfs,
      script,
    ],
    { encoding: 'utf8', env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } },
  );
}

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
      `lib/${COMPACT_MMAP_LIB}`,
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
    // First, so its mmap is the one node's V8 binds to rather than libc's.
    const needed = execFileSync('patchelf', ['--print-needed', join(tools.dir, 'bin/node')], {
      encoding: 'utf8',
    });
    expect(needed.split('\n')[0]).toBe(COMPACT_MMAP_LIB);
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
      const r = nodeInRootfs(rootfs, script);
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

  it('compact mmap: anonymous hints are dropped; fixed and file mappings keep their address; errors stay errors', () => {
    const dir = mkdtempSync('/tmp/aenv-tools-test-mmap-');
    try {
      const src = join(dir, 't.c');
      writeFileSync(
        src,
        [
          '#define _GNU_SOURCE',
          '#include <errno.h>',
          '#include <fcntl.h>',
          '#include <stdio.h>',
          '#include <sys/mman.h>',
          'int main(void) {',
          '  void *hint = (void *)0x100000000000;',
          '  void *anon = mmap(hint, 1 << 18, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);',
          '  void *fixedAt = (void *)0x300000000000;',
          '  void *fixed = mmap(fixedAt, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);',
          '  int fd = open("/proc/self/exe", O_RDONLY);',
          '  void *hint2 = (void *)0x200000000000;',
          '  void *file = mmap(hint2, 4096, PROT_READ, MAP_PRIVATE, fd, 0);',
          '  errno = 0;',
          '  void *bad = mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);',
          '  printf("%d %d %d %d %d\\n", anon != MAP_FAILED && anon != hint, fixed == fixedAt, file == hint2,',
          '         bad == MAP_FAILED, errno == EINVAL);',
          '  return 0;',
          '}',
        ].join('\n'),
      );
      const lib = join(tools.dir, 'lib');
      const withLib = join(dir, 'with');
      const without = join(dir, 'without');
      execFileSync('gcc', ['-o', withLib, src, `-L${lib}`, `-l:${COMPACT_MMAP_LIB}`, `-Wl,-rpath,${lib}`]);
      execFileSync('gcc', ['-o', without, src]);
      expect(execFileSync(withLib, { encoding: 'utf8' })).toBe('1 1 1 1 1\n');
      // Without it the kernel honours the free hint: the first column is what the library changes.
      expect(execFileSync(without, { encoding: 'utf8' })).toBe('0 1 1 1 1\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("places V8's heap pages together in the sandbox's node, and its children do not load the library", () => {
    const rootfs = mkdtempSync('/tmp/aenv-tools-test-rootfs-');
    try {
      buildTestRootfs(rootfs, { hostBash: false });
      // V8 asks for each 256 KB heap page at a random address; what that costs is page tables (VmPTE).
      const script = [
        'const fs = require("fs"); const keep = [];',
        'for (let i = 0; i < 300000; i++) keep.push({ i, s: "x" + i });',
        'const maps = fs.readFileSync("/proc/self/maps", "utf8");',
        'const pte = Number(/VmPTE:\\s+(\\d+)/.exec(fs.readFileSync("/proc/self/status", "utf8"))[1]);',
        'const child = require("child_process").spawnSync("/bin/cat", ["/proc/self/maps"]).stdout.toString();',
        `console.log(JSON.stringify({ pte, loaded: maps.includes("${COMPACT_MMAP_LIB}"), childLoaded: child.includes("${COMPACT_MMAP_LIB}"),`,
        '  childMaps: child.length > 0, preload: process.env.LD_PRELOAD ?? null, keep: keep.length }));',
      ].join(' ');
      const inSandbox = nodeInRootfs(rootfs, script, '--max-semi-space-size=1');
      expect(inSandbox.stderr).toBe('');
      const r = JSON.parse(inSandbox.stdout) as Record<string, unknown>;
      expect(r).toMatchObject({ loaded: true, childLoaded: false, childMaps: true, preload: null });
      // The same script under the host's own node (the same binary, unpatched): the pages scatter.
      const host = JSON.parse(
        execFileSync(process.execPath, ['--max-semi-space-size=1', '-e', script], { encoding: 'utf8' }),
      ) as Record<string, number | boolean>;
      expect(host.loaded).toBe(false);
      expect(r.pte as number).toBeLessThan((host.pte as number) * 0.6);
    } finally {
      rmSync(rootfs, { recursive: true, force: true });
    }
  });
});
