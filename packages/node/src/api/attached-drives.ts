// `attachedDrives` of `POST /sandboxes-cold` (AgentENV §2.3 AttachedDrive, docs/volumes.md "Attached drives"):
// every rule of the reference, each refusal a 400 naming the drive and the field.
import type { NewColdSandbox } from '@aenv/protocol';
import { ApiError } from './errors.js';
import type { ColdDriveRequest } from '../template/cold-image.js';

/** AgentENV's `MAX_EXTRA_DRIVES`. */
export const MAX_ATTACHED_DRIVES = 24;

/** A drive as the request asks for it, with the reference's defaults filled in. */
export type AttachedDriveRequest = ColdDriveRequest;

// Mount points a drive may not be at, under, or above: the kernel's, the tools' and envd's.
const RESERVED = ['/proc', '/sys', '/dev', '/run', '/agentenv', '/opt/agentenv'];
const RESERVED_IDS = new Set(['rootfs', 'user_rootfs']);
// Paths end up in mount options and fstab lines, where these separate fields.
const UNSAFE = /[\s,:\\]/;

const under = (path: string, root: string) => path === root || path.startsWith(`${root}/`);

function checkMountPath(what: string, p: string): void {
  const bad = (why: string) => new ApiError(400, `${what}: mountPath ${JSON.stringify(p)} ${why}`);
  if (!p.startsWith('/')) throw bad('must be an absolute path');
  if (p === '/') throw bad('must not be /');
  if (UNSAFE.test(p)) throw bad("must not contain whitespace, ',', ':' or '\\'");
  const parts = p.split('/').slice(1);
  if (parts.some((s) => s === '..')) throw bad("must not contain '..'");
  if (parts.some((s) => s === '' || s === '.') || p.includes('\0'))
    throw bad("must be a normalized path (no '//', '.' or trailing '/')");
  const reserved = RESERVED.find((r) => under(p, r) || r.startsWith(`${p}/`));
  if (reserved) throw bad(`must not be, be under or contain ${reserved}`);
}

function checkSubPath(what: string, s: string): void {
  const bad = (why: string) => new ApiError(400, `${what}: subPath ${JSON.stringify(s)} ${why}`);
  if (!s) throw bad('must not be empty');
  if (s.startsWith('/')) throw bad('must be a relative path');
  if (UNSAFE.test(s)) throw bad("must not contain whitespace, ',', ':' or '\\'");
  const parts = s.split('/');
  if (parts.some((x) => x === '..')) throw bad("must not contain '..'");
  if (parts.some((x) => x === '' || x === '.') || s.includes('\0'))
    throw bad("must be a normalized path (no '//', '.' or trailing '/')");
}

/**
 * Checks `attachedDrives` and fills in the defaults; undefined or empty: no drives. `volumePaths`: the request's
 * `volumeMounts` paths, which a drive may not be at, inside or above (aenv).
 */
export function parseAttachedDrives(
  drives: NewColdSandbox['attachedDrives'],
  volumePaths: readonly string[] = [],
): AttachedDriveRequest[] {
  if (!drives?.length) return [];
  if (drives.length > MAX_ATTACHED_DRIVES)
    throw new ApiError(400, `attachedDrives: at most ${MAX_ATTACHED_DRIVES} drives (got ${drives.length})`);
  const out: AttachedDriveRequest[] = [];
  for (const [i, d] of drives.entries()) {
    const id = d.driveID.trim();
    const what = `attachedDrives[${i}]${id ? ` (driveID ${JSON.stringify(id)})` : ''}`;
    if (!id) throw new ApiError(400, `${what}: driveID must not be empty`);
    if (id.includes('/')) throw new ApiError(400, `${what}: driveID must not contain '/'`);
    if (RESERVED_IDS.has(id)) throw new ApiError(400, `${what}: driveID ${id} is reserved`);
    if (out.some((o) => o.driveID === id)) throw new ApiError(400, `${what}: driveID is not unique`);
    const mountPath = d.mountPath ?? `/mnt/${id}`;
    checkMountPath(what, mountPath);
    const clash = out.find(
      (o) => o.mountPath === mountPath || under(mountPath, o.mountPath) || under(o.mountPath, mountPath),
    );
    if (clash?.mountPath === mountPath) throw new ApiError(400, `${what}: mountPath is not unique`);
    // aenv: drives do not nest (a writable drive's state lies at its mount path on the sandbox's disk).
    if (clash)
      throw new ApiError(400, `${what}: mountPath must not be inside or above drive ${clash.driveID}'s`);
    const volume = volumePaths.find((v) => under(mountPath, v) || under(v, mountPath));
    if (volume !== undefined)
      throw new ApiError(
        400,
        `${what}: mountPath must not be at, inside or above volume mount path ${volume}`,
      );
    if (d.subPath !== undefined) checkSubPath(what, d.subPath);
    if (d.diskSizeMB !== undefined && (d.diskSizeMB < 1024 || d.diskSizeMB % 1024 !== 0))
      throw new ApiError(400, `${what}: diskSizeMB must be at least 1024 and divisible by 1024`);
    const image = d.source.image.trim();
    if (!image) throw new ApiError(400, `${what}: source.image must not be empty`);
    out.push({
      driveID: id,
      readOnly: d.readOnly ?? true,
      mountPath,
      ...(d.subPath !== undefined ? { subPath: d.subPath } : {}),
      ...(d.diskSizeMB !== undefined ? { diskSizeMB: d.diskSizeMB } : {}),
      image,
    });
  }
  return out;
}
