import { lstatSync, realpathSync, statSync, type BigIntStats } from 'node:fs';
import { posix } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { EntryInfoSchema, FileType, type EntryInfo } from '@aenv/protocol/envd';
import type { NativeApi } from '../native.js';
import type { UserDb } from '../users/user-db.js';
import { goFileModeString } from './file-mode.js';

export const METADATA_XATTR_PREFIX = 'user.e2b.';

export interface EntryInfoDeps {
  users: UserDb;
  native: NativeApi | undefined;
}

function fileType(st: BigIntStats): FileType {
  if (st.isFile()) return FileType.FILE;
  if (st.isDirectory()) return FileType.DIRECTORY;
  if (st.isSymbolicLink()) return FileType.SYMLINK;
  return FileType.UNSPECIFIED;
}

export function readMetadata(native: NativeApi | undefined, path: string): Record<string, string> {
  if (!native) return {};
  try {
    return native.getXattrs(path, METADATA_XATTR_PREFIX);
  } catch {
    return {};
  }
}

/**
 * EntryInfo of path without following a final symlink (E2B semantics): a symlink is reported as
 * SYMLINK with its absolute, fully resolved target and the target's permission bits in `mode`.
 * Must run inside asUser (synchronous fs only).
 */
export function entryInfo(
  path: string,
  deps: EntryInfoDeps,
  st: BigIntStats = lstatSync(path, { bigint: true }),
): EntryInfo {
  let symlinkTarget: string | undefined;
  let mode = Number(st.mode) & 0o777;
  if (st.isSymbolicLink()) {
    try {
      symlinkTarget = realpathSync(path);
      mode = Number(statSync(symlinkTarget, { bigint: true }).mode) & 0o777;
    } catch {
      symlinkTarget ??= path;
    }
  }
  const mtimeNs = st.mtimeNs;
  return create(EntryInfoSchema, {
    name: posix.basename(path) || '/',
    type: fileType(st),
    path,
    size: st.size,
    mode,
    permissions: goFileModeString(Number(st.mode)),
    owner: deps.users.userName(Number(st.uid)),
    group: deps.users.groupName(Number(st.gid)),
    modifiedTime: { seconds: mtimeNs / 1_000_000_000n, nanos: Number(mtimeNs % 1_000_000_000n) },
    symlinkTarget,
    metadata: readMetadata(deps.native, path),
  });
}
