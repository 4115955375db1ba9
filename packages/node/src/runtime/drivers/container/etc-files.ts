import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import type { Stats } from 'node:fs';
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

/** `lstat`, or null when nothing is there. */
export function lstatOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** The image's /etc as the merged view would show it: the top-most layer that has one. */
function imageEtc(lowerDirs: readonly string[]): Stats | null {
  for (let i = lowerDirs.length - 1; i >= 0; i--) {
    const st = lstatOrNull(join(lowerDirs[i] as string, 'etc'));
    if (st) return st;
  }
  return null;
}

/**
 * Creates or truncates a regular file owned by `uid` without ever following a symlink a previous run (or the
 * sandbox, in its upper) may have left there.
 */
export function writeRegular(path: string, content: string, uid: number, mode = 0o644): void {
  const st = lstatOrNull(path);
  if (st && !st.isFile()) unlinkSync(path);
  // Unchanged files keep their inode and size: a restored process that had one open must find it as it was.
  if (st?.isFile() && st.uid === uid && st.size === Buffer.byteLength(content)) {
    if (readFileSync(path, 'utf8') === content) return;
  }
  const fd = openSync(
    path,
    constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
    mode,
  );
  try {
    writeFileSync(fd, content);
    fchownSync(fd, uid, uid);
    fchmodSync(fd, mode);
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
  if (!lstatOrNull(etc)?.isDirectory()) throw new RuntimeError('Internal', `${etc} is not a directory`);
  writeRegular(join(etc, 'hostname'), `${hostname}\n`, rootUid);
  writeRegular(join(etc, 'hosts'), hostsFile(hostname), rootUid);
}

/**
 * Writes /etc/hostname, /etc/hosts and /etc/resolv.conf into the sandbox's upper dir (not bind mounts:
 * every bind mount is one more external mount for CRIU to map on restore). Works on the upper directly,
 * never through the merged view, so a symlink planted in the image cannot redirect the write to the host.
 * Synchronous, like `rewriteHostnameFiles`: it runs on every start, resume and fork child.
 */
export function writeEtcFiles(input: EtcFilesInput): void {
  const lowerEtc = imageEtc(input.lowerDirs);
  if (lowerEtc && !lowerEtc.isDirectory()) {
    throw new RuntimeError(
      'InvalidSpec',
      `the image's /etc is not a directory; aenv cannot write its network files`,
    );
  }
  const etc = join(input.upperDir, 'etc');
  const st = lstatOrNull(etc);
  if (st && !st.isDirectory()) unlinkSync(etc);
  if (!st || !st.isDirectory()) {
    mkdirSync(etc);
    const owner = input.lowerOwner ?? ((id: number) => id);
    chownSync(
      etc,
      lowerEtc ? owner(lowerEtc.uid) : input.rootUid,
      lowerEtc ? owner(lowerEtc.gid) : input.rootUid,
    );
    chmodSync(etc, lowerEtc ? lowerEtc.mode & 0o7777 : 0o755);
  }
  writeRegular(join(etc, 'hostname'), `${input.hostname}\n`, input.rootUid);
  writeRegular(join(etc, 'hosts'), hostsFile(input.hostname), input.rootUid);
  writeRegular(join(etc, 'resolv.conf'), resolvConf(input.nameservers), input.rootUid);
}
