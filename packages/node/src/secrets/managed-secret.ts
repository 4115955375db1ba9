import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  unlinkSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** A secret that cannot be read, created or trusted. The message says which file and why. */
export class SecretError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SecretError';
  }
}

export interface ManagedSecretOptions {
  /** Owner the directory and file must have; default: the effective uid of this process. */
  expectedUid?: number;
}

const DIR_NAME = 'secrets';
const DIR_MODE = 0o700;
const FILE_MODE = 0o600;

/**
 * Reads a server-managed secret (`$AENV_HOME/secrets/<name>`, docs/security.md):
 * the directory must be named "secrets", be a real directory (not a symlink) owned by the
 * expected uid with mode 0700; the file must be a regular file (not a symlink) owned by that uid
 * with mode exactly 0600 and at most `maxBytes` long. Returns undefined when the directory or the
 * file does not exist. Never changes modes: a wrong one is an error for the operator to fix.
 */
export function readManagedSecret(
  path: string,
  maxBytes: number,
  opts: ManagedSecretOptions = {},
): string | undefined {
  const uid = opts.expectedUid ?? process.geteuid!();
  if (checkDirectory(dirname(path), uid) === 'missing') return undefined;
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'ELOOP') throw new SecretError(`managed secret ${path} must not be a symbolic link`);
    throw new SecretError(`cannot open managed secret ${path}: ${(e as Error).message}`);
  }
  try {
    checkFile(path, fstatSync(fd), uid, maxBytes);
    return readBounded(fd, path, maxBytes);
  } finally {
    closeSync(fd);
  }
}

/**
 * Creates a managed secret atomically and without clobbering: temp file (0600) in the same
 * directory → write → fsync → link to the final name (fails if it exists) → fsync the directory.
 * If another process created the file first, that file is read (and validated) instead.
 * Stale temp files of dead processes (from a crash mid-write) are removed first.
 */
export function createManagedSecret(
  path: string,
  contents: string,
  maxBytes: number,
  opts: ManagedSecretOptions = {},
): { created: boolean; contents: string } {
  const uid = opts.expectedUid ?? process.geteuid!();
  const dir = dirname(path);
  checkDirectoryName(dir);
  mkdirSync(dirname(dir), { recursive: true });
  try {
    mkdirSync(dir, { mode: DIR_MODE });
    chmodSync(dir, DIR_MODE); // our own new directory: undo the umask, never an existing one
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') {
      throw new SecretError(`cannot create managed secret directory ${dir}: ${(e as Error).message}`);
    }
  }
  checkDirectory(dir, uid);
  removeStaleTempFiles(dir, basename(path));

  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  let linked = false;
  try {
    const fd = openSync(
      tmp,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      FILE_MODE,
    );
    try {
      fchmodSync(fd, FILE_MODE);
      const data = Buffer.from(contents);
      let off = 0;
      while (off < data.length) off += writeSync(fd, data, off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    try {
      linkSync(tmp, path);
      linked = true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  } catch (e) {
    throw e instanceof SecretError
      ? e
      : new SecretError(`cannot write managed secret ${path}: ${(e as Error).message}`);
  } finally {
    try {
      unlinkSync(tmp);
    } catch {
      // Already gone or never created.
    }
  }
  fsyncDirectory(dir);
  if (linked) return { created: true, contents };
  const existing = readManagedSecret(path, maxBytes, { expectedUid: uid });
  if (existing === undefined)
    throw new SecretError(`managed secret ${path} disappeared while it was being created`);
  return { created: false, contents: existing };
}

function checkDirectoryName(dir: string): void {
  if (basename(dir) !== DIR_NAME) {
    throw new SecretError(`managed secret directory ${dir} must be named "${DIR_NAME}"`);
  }
}

function checkDirectory(dir: string, uid: number): 'ok' | 'missing' {
  checkDirectoryName(dir);
  let st: Stats;
  try {
    st = lstatSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw new SecretError(`cannot inspect managed secret directory ${dir}: ${(e as Error).message}`);
  }
  if (st.isSymbolicLink() || !st.isDirectory()) {
    throw new SecretError(
      `managed secret directory ${dir} must be a directory, not a symbolic link or a file`,
    );
  }
  if (st.uid !== uid) {
    throw new SecretError(`managed secret directory ${dir} must be owned by uid ${uid}, found uid ${st.uid}`);
  }
  const mode = st.mode & 0o7777;
  if (mode !== DIR_MODE) {
    throw new SecretError(
      `managed secret directory ${dir} must have mode 0700, found ${octal(mode)}; refusing to use it (fix: chmod 700 ${dir})`,
    );
  }
  return 'ok';
}

function checkFile(path: string, st: Stats, uid: number, maxBytes: number): void {
  if (!st.isFile()) throw new SecretError(`managed secret ${path} must be a regular file`);
  const mode = st.mode & 0o7777;
  if (mode !== FILE_MODE) {
    throw new SecretError(
      `managed secret ${path} must have mode 0600, found ${octal(mode)}; refusing to use it (fix: chmod 600 ${path})`,
    );
  }
  if (st.uid !== uid)
    throw new SecretError(`managed secret ${path} must be owned by uid ${uid}, found uid ${st.uid}`);
  if (st.size > maxBytes) throw new SecretError(`managed secret ${path} must be at most ${maxBytes} bytes`);
}

/** Reads at most `maxBytes` from `fd`; more is an error (the file may have grown since fstat). */
export function readBounded(fd: number, path: string, maxBytes: number): string {
  const buf = Buffer.alloc(maxBytes + 1);
  let len = 0;
  for (;;) {
    const n = readSync(fd, buf, len, buf.length - len, null);
    if (n === 0) break;
    len += n;
    if (len > maxBytes) throw new SecretError(`secret file ${path} must be at most ${maxBytes} bytes`);
  }
  return buf.subarray(0, len).toString('utf8');
}

function removeStaleTempFiles(dir: string, name: string): void {
  const pattern = new RegExp(`^\\.${escapeRegExp(name)}\\.(\\d+)\\.[0-9a-f]+\\.tmp$`);
  for (const entry of readdirSync(dir)) {
    const m = pattern.exec(entry);
    if (!m || isAlive(Number(m[1]))) continue;
    try {
      unlinkSync(join(dir, entry));
    } catch {
      // Removed concurrently.
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function fsyncDirectory(dir: string): void {
  const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function octal(mode: number): string {
  return `0${mode.toString(8).padStart(3, '0')}`;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

const MANAGED_HEX_KEY = /^[0-9a-f]{64}$/;

/**
 * A 32-byte key kept as 64 lowercase hex digits (and a newline) in a managed 0600 file: read when it is there,
 * else generated. `what` names the key in the error a malformed file gives.
 */
export function managedHexKey(
  path: string,
  what: string,
  opts: ManagedSecretOptions,
): { hex: string; source: 'managed-file' | 'generated' } {
  const maxBytes = 65;
  const stored = readManagedSecret(path, maxBytes, opts);
  if (stored !== undefined) return { hex: validHexKey(stored, path, what), source: 'managed-file' };
  const created = createManagedSecret(path, `${randomBytes(32).toString('hex')}\n`, maxBytes, opts);
  return {
    hex: validHexKey(created.contents, path, what),
    source: created.created ? 'generated' : 'managed-file',
  };
}

function validHexKey(contents: string, path: string, what: string): string {
  // Written by earlier versions with or without the newline; other whitespace is not ours.
  const hex = contents.endsWith('\n') ? contents.slice(0, -1) : contents;
  if (!MANAGED_HEX_KEY.test(hex))
    throw new SecretError(
      `managed ${what} ${path} must contain exactly 64 lowercase hexadecimal characters, optionally followed by a newline`,
    );
  return hex;
}
