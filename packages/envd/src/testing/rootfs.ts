import { chmodSync, chownSync, copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';

export interface TestRootfsOptions {
  /** Copy the host's bash and its libraries (a "Debian-like" rootfs); otherwise /bin/bash wraps busybox sh. */
  hostBash: boolean;
}

export const TEST_USER_UID = 1000;
export const TEST_EXTRA_GID = 2000;

/**
 * A tiny rootfs for running envd the way a sandbox does: busybox applets, /etc/passwd with root and
 * `user` (1000, home /home/user, also member of `sudo` (27) and `extra` (2000)), empty device nodes to
 * bind over, an /agentenv mount point and /small (a tiny tmpfs in run-in-sandbox.sh).
 */
export function buildTestRootfs(dir: string, opts: TestRootfsOptions): void {
  chmodSync(dir, 0o755); // mkdtemp makes it 0700, which would lock non-root users out of "/"
  for (const d of [
    'bin',
    'sbin',
    'usr/bin',
    'usr/sbin',
    'etc',
    'root',
    'home/user',
    'dev/pts',
    'proc',
    'run',
    'agentenv',
    'var/tmp',
    'small',
  ]) {
    mkdirSync(join(dir, d), { recursive: true, mode: 0o755 });
  }
  mkdirSync(join(dir, 'tmp'), { mode: 0o1777 });
  chmodSync(join(dir, 'tmp'), 0o1777);
  chmodSync(join(dir, 'root'), 0o700);
  chownSync(join(dir, 'home/user'), TEST_USER_UID, TEST_USER_UID);
  for (const dev of ['null', 'zero', 'random', 'urandom', 'tty', 'ptmx'])
    writeFileSync(join(dir, 'dev', dev), '');

  copyFileSync('/bin/busybox', join(dir, 'bin/busybox'));
  chmodSync(join(dir, 'bin/busybox'), 0o755);
  execFileSync('chroot', [dir, '/bin/busybox', '--install', '-s']);

  if (opts.hostBash) {
    copyWithLibs('/bin/bash', dir);
  } else {
    writeFileSync(join(dir, 'bin/bash'), '#!/bin/sh\nexec /bin/sh "$@"\n', { mode: 0o755 });
  }
  writeFileSync(
    join(dir, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
  );
  writeFileSync(
    join(dir, 'etc/group'),
    'root:x:0:\nsudo:x:27:user\nuser:x:1000:\nextra:x:2000:user\nnogroup:x:65534:\n',
  );
  writeFileSync(join(dir, 'etc/hostname'), 'sandbox\n');
}

/** Copies a dynamically linked host binary with the libraries ldd reports (and the loader). */
function copyWithLibs(binary: string, root: string): void {
  const target = join(root, binary);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(binary, target);
  chmodSync(target, 0o755);
  const ldd = execFileSync('ldd', [binary], { encoding: 'utf8' });
  for (const m of ldd.matchAll(/(\/\S+\.so[^\s]*)/g)) {
    const lib = m[1]!;
    const dest = join(root, lib);
    mkdirSync(dirname(dest), { recursive: true });
    copyFileSync(lib, dest);
  }
}
