// The node's egress CA in a sandbox's trust store (docs/networking.md#credentials-at-the-edge): at every boot
// each CA bundle the image has gets the CA appended, in the sandbox's upper dir (the image layers stay shared
// and untouched), and a Debian-style `update-ca-certificates` source is dropped beside the image's, so a bundle
// the sandbox regenerates keeps it. Like etc-files.ts, it works on the upper directly and never follows a
// symlink, in the upper or in a layer: a link planted in the image or by the sandbox cannot redirect a write
// (or a read) to the host.

import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  fstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  type Stats,
} from 'node:fs';
import { join } from 'node:path';
import { lstatOrNull, writeRegular } from './etc-files.js';

/** Bundles TLS clients read (Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE, Alpine's and macOS-style alias). */
export const CA_BUNDLE_PATHS = [
  'etc/ssl/certs/ca-certificates.crt',
  'etc/pki/tls/certs/ca-bundle.crt',
  'etc/ssl/ca-bundle.pem',
  'etc/ssl/cert.pem',
] as const;
/** `update-ca-certificates` reads local CAs from here (written only when the image has the directory). */
const LOCAL_CA_DIR = 'usr/local/share/ca-certificates';
/** Also the CA alone, for NODE_EXTRA_CA_CERTS and the like (documented). */
export const CA_FILE = 'etc/ssl/certs/aenv-egress-ca.pem';

const MARK = '# aenv egress CA (docs/networking.md#credentials-at-the-edge)\n';
const MAX_BUNDLE_BYTES = 8 * 1024 * 1024;

export interface TrustFilesInput {
  upperDir: string;
  /** Bottom layer first. */
  lowerDirs: readonly string[];
  /** The CA certificate, PEM. */
  caPem: string;
  /** Host uid of the sandbox's root. */
  rootUid: number;
  /** The host id a layer file's owner shows as in the sandbox. */
  lowerOwner?: (id: number) => number;
}

/** `rel` under `root` when every component is a real directory and the last one of `kind`; null otherwise. */
function realPath(root: string, rel: string, kind: 'file' | 'dir'): Stats | null {
  const parts = rel.split('/');
  let path = root;
  for (const [i, part] of parts.entries()) {
    path = join(path, part);
    const st = lstatOrNull(path);
    if (!st) return null;
    const last = i === parts.length - 1;
    if (last && kind === 'file') return st.isFile() ? st : null;
    if (!st.isDirectory()) return null;
    if (last) return st;
  }
  return null;
}

/** The top-most layer holding `rel` as `kind` (its stats), null when none does. */
function inImage(
  lowers: readonly string[],
  rel: string,
  kind: 'file' | 'dir',
): { dir: string; st: Stats } | null {
  for (let i = lowers.length - 1; i >= 0; i--) {
    const st = realPath(lowers[i] as string, rel, kind);
    if (st) return { dir: lowers[i] as string, st };
  }
  return null;
}

/**
 * Makes the directories of `rel` in the upper (owners and modes as the image has them), refusing any component
 * that exists there as something else (a symlink the sandbox made). False: leave this path alone.
 */
function upperDirs(input: TrustFilesInput, rel: string): boolean {
  const parts = rel.split('/');
  const owner = input.lowerOwner ?? ((id: number) => id);
  for (let i = 1; i <= parts.length; i++) {
    const sub = parts.slice(0, i).join('/');
    const path = join(input.upperDir, sub);
    const st = lstatOrNull(path);
    if (st) {
      if (!st.isDirectory()) return false;
      continue;
    }
    const image = inImage(input.lowerDirs, sub, 'dir');
    mkdirSync(path);
    chownSync(path, image ? owner(image.st.uid) : input.rootUid, image ? owner(image.st.gid) : input.rootUid);
    chmodSync(path, image ? image.st.mode & 0o7777 : 0o755);
  }
  return true;
}

/** The bundle without a CA block an earlier boot appended. */
function withoutMark(bundle: string): string {
  const at = bundle.indexOf(MARK);
  if (at < 0) return bundle;
  const end = bundle.indexOf('-----END CERTIFICATE-----', at);
  const after = end < 0 ? bundle.length : bundle.indexOf('\n', end) + 1 || bundle.length;
  return withoutMark(bundle.slice(0, at) + bundle.slice(after));
}

function readBounded(path: string): string | null {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > MAX_BUNDLE_BYTES) return null;
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * Adds the CA to every bundle the sandbox has (see the top of this file). Synchronous: a few dozen calls on
 * files in the page cache, on every start, resume and fork child, where each asynchronous call would wait its
 * turn in libuv's thread pool (5–6 ms in all on a loaded node).
 */
export function writeTrustFiles(input: TrustFilesInput): void {
  const pem = input.caPem.endsWith('\n') ? input.caPem : `${input.caPem}\n`;
  let anyBundle = false;
  for (const rel of CA_BUNDLE_PATHS) {
    // The sandbox's own copy (an earlier boot's, or one it regenerated) wins over the image's.
    const upper = realPath(input.upperDir, rel, 'file');
    const image = upper ? null : inImage(input.lowerDirs, rel, 'file');
    if (!upper && !image) continue;
    const dir = rel.slice(0, rel.lastIndexOf('/'));
    if (!upperDirs(input, dir)) continue;
    const base = readBounded(upper ? join(input.upperDir, rel) : join(image!.dir, rel));
    if (base === null) continue;
    const kept = withoutMark(base);
    const content = `${kept}${kept === '' || kept.endsWith('\n') ? '' : '\n'}${MARK}${pem}`;
    writeRegular(join(input.upperDir, rel), content, input.rootUid, 0o644);
    anyBundle = true;
  }
  if (anyBundle && upperDirs(input, 'etc/ssl/certs'))
    writeRegular(join(input.upperDir, CA_FILE), pem, input.rootUid, 0o644);
  if (inImage(input.lowerDirs, LOCAL_CA_DIR, 'dir') && upperDirs(input, LOCAL_CA_DIR))
    writeRegular(join(input.upperDir, LOCAL_CA_DIR, 'aenv-egress-ca.crt'), pem, input.rootUid, 0o644);
}
