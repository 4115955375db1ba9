// Host fixtures for the runtime's integration tests and benchmark (root only): a busybox rootfs shifted
// into the sandbox uid range, a minimal tools dir, and plain netns files. Not used by the server.
import {
  chmod,
  copyFile,
  lchown,
  lstat,
  mkdir,
  readFile,
  readdir,
  rename,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../../../util/exec.js';

const BUSYBOX = '/bin/busybox';

/** lchown every entry below `dir` (and `dir`) by +shift, as the image cache does when it unpacks layers. */
export async function shiftOwnership(dir: string, shift: number): Promise<void> {
  const shiftOne = async (p: string) => {
    const s = await lstat(p);
    await lchown(p, s.uid + shift, s.gid + shift);
    // chown clears setuid/setgid bits on regular files; put them back (sudo must stay setuid).
    if (!s.isSymbolicLink() && s.mode & 0o6000) await chmod(p, s.mode & 0o7777);
  };
  await shiftOne(dir);
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      await shiftOne(p);
      if (e.isDirectory()) await walk(p);
    }
  };
  await walk(dir);
}

/** A busybox-only root filesystem owned by the mapped root (host uid `shift`). */
export async function buildBusyboxLower(dir: string, shift: number): Promise<void> {
  for (const d of [
    'bin',
    'sbin',
    'etc',
    'proc',
    'sys',
    'dev',
    'tmp',
    'root',
    'usr/bin',
    'usr/sbin',
    'run',
    'var',
    'home/user',
  ]) {
    await mkdir(join(dir, d), { recursive: true });
  }
  await copyFile(BUSYBOX, join(dir, 'bin/busybox'));
  await chmod(join(dir, 'bin/busybox'), 0o755);
  const { stdout } = await run(BUSYBOX, ['--list']);
  for (const applet of stdout.split('\n').filter(Boolean)) {
    if (applet !== 'busybox') await symlink('busybox', join(dir, 'bin', applet)).catch(() => {});
  }
  await writeFile(
    join(dir, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n',
  );
  await writeFile(join(dir, 'etc/group'), 'root:x:0:\nuser:x:1000:\n');
  await writeFile(join(dir, 'etc/hosts'), '127.0.0.1 image-hosts-file\n');
  await chmod(join(dir, 'tmp'), 0o1777);
  await run('chown', ['-R', '1000:1000', join(dir, 'home/user')]);
  await shiftOwnership(dir, shift);
}

// The test init: starts $AENV_TEST_CMD in the background, then runs every command the host drops as
// /run/aenv-test/req.<n> in its upper, as its own child — so with the sandbox's namespaces, cgroups,
// capabilities and seccomp filter. (`runc exec` cannot join a netns its user namespace does not own, and
// a FIFO in the upper is a different pipe than the same FIFO seen through the overlay.)
const TEST_INIT = `#!/agentenv/bin/busybox sh
B=/agentenv/bin/busybox
D=/run/aenv-test
$B mkdir -p $D
if [ -n "$AENV_TEST_CMD" ]; then $B sh -c "$AENV_TEST_CMD" & fi
while :; do
  for f in $D/req.*; do
    [ -e "$f" ] || continue
    n=\${f##*/req.}
    cmd=$($B cat "$f")
    $B rm -f "$f"
    ( $B sh -c "$cmd" > $D/out.$n 2>&1; echo $? > $D/rc.$n.tmp; $B mv $D/rc.$n.tmp $D/rc.$n ) &
  done
  $B usleep 20000
done
`;

/** A stand-in for the real tools dir (tools/ensure-tools-dir.ts): busybox and the test init above. */
export async function buildTestTools(dir: string): Promise<{ dir: string; version: string }> {
  await mkdir(join(dir, 'bin'), { recursive: true });
  await copyFile(BUSYBOX, join(dir, 'bin/busybox'));
  await chmod(join(dir, 'bin/busybox'), 0o755);
  await writeFile(join(dir, 'bin/aenv-init'), TEST_INIT, { mode: 0o755 });
  await chmod(dir, 0o755);
  return { dir, version: 'test-tools-1' };
}

let execCounter = 0;

/** Hands a sandbox started with the test init a command to run, without waiting for it (or its answer). */
export async function launchInSandbox(upperDir: string, command: string): Promise<void> {
  const d = join(upperDir, 'run/aenv-test');
  const n = `${process.pid}-${++execCounter}`;
  await writeFile(join(d, `.req.${n}`), command, { mode: 0o644 });
  await rename(join(d, `.req.${n}`), join(d, `req.${n}`));
}

/** Runs a shell command inside a sandbox started with the test init; waits for it to finish. */
export async function execInSandbox(
  upperDir: string,
  command: string,
  timeoutMs = 30_000,
): Promise<{ code: number; output: string }> {
  const d = join(upperDir, 'run/aenv-test');
  const n = `${process.pid}-${++execCounter}`;
  const deadline = Date.now() + timeoutMs;
  while (!(await lstat(d).catch(() => null))) {
    if (Date.now() > deadline) throw new Error(`sandbox test init never created ${d}`);
    await sleep(5);
  }
  await writeFile(join(d, `.req.${n}`), command, { mode: 0o644 });
  await rename(join(d, `.req.${n}`), join(d, `req.${n}`));
  for (;;) {
    try {
      const rc = await readFile(join(d, `rc.${n}`), 'utf8');
      const output = await readFile(join(d, `out.${n}`), 'utf8');
      await rm(join(d, `rc.${n}`), { force: true });
      await rm(join(d, `out.${n}`), { force: true });
      return { code: Number(rc.trim()), output };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || Date.now() > deadline) {
        throw new Error(`command ${JSON.stringify(command)} did not finish in ${timeoutMs} ms`, { cause: e });
      }
      await sleep(5);
    }
  }
}
/** A network namespace bound to a file (what the network module hands the driver). */
export async function createNetnsFile(path: string): Promise<void> {
  await writeFile(path, '');
  await run('unshare', [`--net=${path}`, 'true']);
  // Loopback up, so listeners on 127.0.0.1 work inside (as they do in a real slot).
  await run('nsenter', [`--net=${path}`, 'ip', 'link', 'set', 'lo', 'up']);
}

export async function removeNetnsFile(path: string): Promise<void> {
  await run('umount', [path], { allowFailure: true });
  await rm(path, { force: true });
}

/** Unpacks an OCI image layout's layers (bottom first) into `dest/<n>` dirs with shifted ownership. */
export async function unpackOciLayout(
  layout: string,
  tag: string,
  dest: string,
  shift: number,
): Promise<string[]> {
  const index = JSON.parse(await readFile(join(layout, 'index.json'), 'utf8')) as {
    manifests: { digest: string; annotations?: Record<string, string> }[];
  };
  const desc =
    index.manifests.find((m) => m.annotations?.['org.opencontainers.image.ref.name'] === tag) ??
    index.manifests[0];
  if (!desc) throw new Error(`no manifest in ${layout}`);
  const blob = (digest: string) => join(layout, 'blobs', ...digest.split(':'));
  const manifest = JSON.parse(await readFile(blob(desc.digest), 'utf8')) as { layers: { digest: string }[] };
  const dirs: string[] = [];
  for (const [i, layer] of manifest.layers.entries()) {
    const d = join(dest, String(i));
    await mkdir(d, { recursive: true });
    await run('tar', [
      '--numeric-owner',
      '--xattrs',
      '--xattrs-include=*',
      '-xf',
      blob(layer.digest),
      '-C',
      d,
    ]);
    await shiftOwnership(d, shift);
    dirs.push(d);
  }
  return dirs;
}
