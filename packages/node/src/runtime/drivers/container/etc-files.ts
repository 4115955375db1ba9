import {
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  lstatSync,
  openSync,
  readFileSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import type { Stats } from 'node:fs';
import { chmod, chown, lstat, mkdir, open, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { RuntimeError } from '../../driver.js';

export interface EtcFilesInput {
  upperDir: string;
  /** Bottom layer first. */
  lowerDirs: readonly string[];
  hostname: string;
  nameservers: readonly string[];
  /** Host uid/gid of the sandbox's root (the files must belong to it inside). */
  rootUid: number;
  /** The host id a layer file's owner shows as in the sandbox (its lower dirs are idmapped views). */
  lowerOwner?: (id: number) => number;
}

export function hostsFile(hostname: string): string {
  return [
    '127.0.0.1\tlocalhost',
    '::1\tlocalhost ip6-localhost ip6-loopback',
    `127.0.1.1\t${hostname}`,
    '',
  ].join('\n');
}

export function resolvConf(nameservers: readonly string[]): string {
  if (nameservers.length === 0) return '# aenv: no nameserver is known for this sandbox\n';
  return nameservers.map((ns) => `nameserver ${ns}`).join('\n') + '\n';
}

async function lstatOrNull(path: string): Promise<Stats | null> {
  try {
    return await lstat(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** The image's /etc as the merged view would show it: the top-most layer that has one. */
async function imageEtc(lowerDirs: readonly string[]): Promise<Stats | null> {
  for (let i = lowerDirs.length - 1; i >= 0; i--) {
    const st = await lstatOrNull(join(lowerDirs[i] as string, 'etc'));
    if (st) return st;
  }
  return null;
}

/** Creates or truncates a regular file without ever following a symlink a previous run may have left. */
async function writeRegular(path: string, content: string, uid: number): Promise<void> {
  const st = await lstatOrNull(path);
  if (st && !st.isFile()) await unlink(path);
  // Unchanged files keep their inode and size: a restored process that had one open must find it as it was.
  if (st?.isFile() && st.uid === uid && st.size === Buffer.byteLength(content)) {
    if ((await readFile(path, 'utf8')) === content) return;
  }
  const fh = await open(
    path,
    constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
    0o644,
  );
  try {
    await fh.writeFile(content);
    await fh.chown(uid, uid);
    await fh.chmod(0o644);
  } finally {
    await fh.close();
  }
}

/** `writeRegular`, synchronously (for `rewriteHostnameFiles`). */
function writeRegularSync(path: string, content: string, uid: number): void {
  let st: Stats | null = null;
  try {
    st = lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  if (st && !st.isFile()) unlinkSync(path);
  if (st?.isFile() && st.uid === uid && st.size === Buffer.byteLength(content)) {
    if (readFileSync(path, 'utf8') === content) return;
  }
  const fd = openSync(
    path,
    constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
    0o644,
  );
  try {
    writeFileSync(fd, content);
    fchownSync(fd, uid, uid);
    fchmodSync(fd, 0o644);
  } finally {
    closeSync(fd);
  }
}

/**
 * Rewrites /etc/hostname and /etc/hosts in the upper of a sandbox made by `writeEtcFiles` (a new name).
 * Synchronous on purpose: it runs on every warm-pool hand-out, a dozen calls on two small files in the page
 * cache (microseconds), while each asynchronous call would wait its turn in libuv's pool of 4 threads, which
 * the node's boots and teardowns keep busy (30–60 ms per hand-out measured on a loaded node, docs/benchmarks.md).
 */
export function rewriteHostnameFiles(upperDir: string, hostname: string, rootUid: number): void {
  const etc = join(upperDir, 'etc');
  let st: Stats | null = null;
  try {
    st = lstatSync(etc);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  if (!st?.isDirectory()) throw new RuntimeError('Internal', `${etc} is not a directory`);
  writeRegularSync(join(etc, 'hostname'), `${hostname}\n`, rootUid);
  writeRegularSync(join(etc, 'hosts'), hostsFile(hostname), rootUid);
}

/**
 * Writes /etc/hostname, /etc/hosts and /etc/resolv.conf into the sandbox's upper dir (not bind mounts:
 * every bind mount is one more external mount for CRIU to map on restore). Works on the upper directly,
 * never through the merged view, so a symlink planted in the image cannot redirect the write to the host.
 */
export async function writeEtcFiles(input: EtcFilesInput): Promise<void> {
  const lowerEtc = await imageEtc(input.lowerDirs);
  if (lowerEtc && !lowerEtc.isDirectory()) {
    throw new RuntimeError(
      'InvalidSpec',
      `the image's /etc is not a directory; aenv cannot write its network files`,
    );
  }
  const etc = join(input.upperDir, 'etc');
  const st = await lstatOrNull(etc);
  if (st && !st.isDirectory()) await unlink(etc);
  if (!st || !st.isDirectory()) {
    await mkdir(etc);
    const owner = input.lowerOwner ?? ((id: number) => id);
    await chown(
      etc,
      lowerEtc ? owner(lowerEtc.uid) : input.rootUid,
      lowerEtc ? owner(lowerEtc.gid) : input.rootUid,
    );
    await chmod(etc, lowerEtc ? lowerEtc.mode & 0o7777 : 0o755);
  }
  await writeRegular(join(etc, 'hostname'), `${input.hostname}\n`, input.rootUid);
  await writeRegular(join(etc, 'hosts'), hostsFile(input.hostname), input.rootUid);
  await writeRegular(join(etc, 'resolv.conf'), resolvConf(input.nameservers), input.rootUid);
}
