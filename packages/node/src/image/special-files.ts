// Filesystem operations Node has no API for: character devices (overlayfs whiteouts), fifos and extended
// attributes (opaque dirs, file capabilities, user.* xattrs).
//
// They run in one python3 process per layer, fed a batch of operations on stdin. python3 (Debian's
// python3-minimal) exposes mknod/mkfifo/setxattr with dir_fd and O_NOFOLLOW, so the helper resolves every path
// component-wise from the layer root without following symlinks, exactly like the Node side. Alternatives
// measured on the project's hosts: setfattr (package `attr`, not installed) only covers xattrs and
// coreutils `mknod` costs one process per whiteout (~13 ms each); a python3 start costs ~45 ms once per layer,
// and only layers that contain such entries pay it.

import { run, CommandError } from '../util/exec.js';
import { ImageError } from './errors.js';

export type SpecialOp =
  | { op: 'whiteout'; path: string }
  | { op: 'fifo'; path: string; mode: number; uid: number; gid: number }
  | { op: 'xattr'; path: string; name: string; value: Buffer }
  | { op: 'opaque'; path: string };

const SCRIPT = String.raw`
import os, sys, stat, base64
root = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
DIRFLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
def walk(rel):
    parts = rel.split(b'/') if rel else []
    fd = os.dup(root)
    for c in parts[:-1]:
        if c in (b'', b'.', b'..'):
            raise ValueError('bad path component %r' % c)
        nfd = os.open(c, DIRFLAGS, dir_fd=fd)
        os.close(fd)
        fd = nfd
    last = parts[-1] if parts else b''
    if last in (b'.', b'..'):
        raise ValueError('bad path component %r' % last)
    return fd, last
def target(rel):
    fd, last = walk(rel)
    if last == b'':
        return fd
    try:
        t = os.open(last, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    m = os.fstat(t).st_mode
    if not (stat.S_ISREG(m) or stat.S_ISDIR(m)):
        os.close(t)
        raise ValueError('xattr target is not a regular file or directory')
    return t
n = 0
for line in sys.stdin.buffer:
    f = line.rstrip(b'\n').split(b'\t')
    op, rel = f[0], base64.b64decode(f[1])
    try:
        if op == b'W' or op == b'F':
            fd, last = walk(rel)
            try:
                if op == b'W':
                    os.mknod(last, stat.S_IFCHR, os.makedev(0, 0), dir_fd=fd)
                else:
                    os.mkfifo(last, 0o600, dir_fd=fd)
                    os.chown(last, int(f[3]), int(f[4]), dir_fd=fd, follow_symlinks=False)
                    os.chmod(last, int(f[2]), dir_fd=fd)
            finally:
                os.close(fd)
        elif op == b'X' or op == b'O':
            t = target(rel)
            try:
                if op == b'O':
                    os.setxattr(t, 'trusted.overlay.opaque', b'y')
                else:
                    os.setxattr(t, base64.b64decode(f[2]).decode('utf-8', 'surrogateescape'), base64.b64decode(f[3]))
            finally:
                os.close(t)
        else:
            raise ValueError('unknown op %r' % op)
    except Exception as e:
        sys.stderr.write('%s %r: %s\n' % (op.decode(), rel, e))
        sys.exit(2)
    n += 1
print('ok %d' % n)
`;

const b64 = (s: string | Buffer): string =>
  (typeof s === 'string' ? Buffer.from(s, 'latin1') : s).toString('base64');

function encode(op: SpecialOp): string {
  switch (op.op) {
    case 'whiteout':
      return `W\t${b64(op.path)}`;
    case 'fifo':
      return `F\t${b64(op.path)}\t${op.mode}\t${op.uid}\t${op.gid}`;
    case 'opaque':
      return `O\t${b64(op.path)}`;
    case 'xattr':
      return `X\t${b64(op.path)}\t${b64(Buffer.from(op.name, 'utf8'))}\t${b64(op.value)}`;
  }
}

/**
 * Applies `ops` under `root` (paths are byte strings relative to it). Fails the whole batch on the first
 * error: the caller throws the unpack directory away.
 */
export async function applySpecialOps(
  root: string,
  ops: readonly SpecialOp[],
  python = '/usr/bin/python3',
): Promise<void> {
  if (ops.length === 0) return;
  const input = ops.map(encode).join('\n') + '\n';
  try {
    const res = await run(python, ['-I', '-S', '-c', SCRIPT, root], { input, timeoutMs: 300_000 });
    if (res.stdout.trim() !== `ok ${ops.length}`)
      throw new Error(`unexpected helper output: ${res.stdout.trim()}`);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new ImageError(
        'Internal',
        `this layer has whiteouts, fifos or xattrs, which need ${python} (Debian package python3-minimal); it is missing`,
      );
    }
    const detail = e instanceof CommandError ? e.stderr.trim() : (e as Error).message;
    throw new ImageError('Internal', `writing whiteouts/xattrs/fifos failed: ${detail}`, { cause: e });
  }
}

/** Reads one xattr (for tests and diagnostics); undefined when absent. */
export async function readXattr(
  path: string,
  name: string,
  python = '/usr/bin/python3',
): Promise<Buffer | undefined> {
  const script = String.raw`
import os, sys, base64
try:
    v = os.getxattr(sys.argv[1], sys.argv[2], follow_symlinks=False)
    print(base64.b64encode(v).decode())
except OSError as e:
    if e.errno == 61:
        print('-')
    else:
        raise
`;
  const res = await run(python, ['-I', '-S', '-c', script, path, name]);
  const out = res.stdout.trim();
  return out === '-' ? undefined : Buffer.from(out, 'base64');
}
