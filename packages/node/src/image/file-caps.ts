// File capabilities (security.capability) for files that run inside a user namespace.
//
// A v2 capability xattr carries no root id and the kernel honours it only for the initial user namespace's
// root, so inside a sandbox whose root is host uid <shift> it would be silently ignored. A v3 xattr names the
// namespace root (rootid) for which the capabilities apply: we write v3 with rootid = the shifted root.

const VFS_CAP_REVISION_MASK = 0xff000000;
const VFS_CAP_REVISION_1 = 0x01000000;
const VFS_CAP_REVISION_2 = 0x02000000;
const VFS_CAP_REVISION_3 = 0x03000000;
const VFS_CAP_FLAGS_EFFECTIVE = 0x000001;

/**
 * Rewrites a security.capability value so that it applies to the container root mapped by `shiftId`
 * (container id → host id). Returns undefined for values that are not a capability set (they are dropped).
 */
export function shiftFileCapability(
  value: Buffer,
  shiftId: (containerId: number) => number,
): Buffer | undefined {
  if (value.length < 4) return undefined;
  const magic = value.readUInt32LE(0);
  const revision = (magic & VFS_CAP_REVISION_MASK) >>> 0;
  const flags = magic & VFS_CAP_FLAGS_EFFECTIVE;
  let permLo: number;
  let inhLo: number;
  let permHi = 0;
  let inhHi = 0;
  let rootid = 0;
  if (revision === VFS_CAP_REVISION_1 && value.length === 12) {
    permLo = value.readUInt32LE(4);
    inhLo = value.readUInt32LE(8);
  } else if (
    (revision === VFS_CAP_REVISION_2 && value.length === 20) ||
    (revision === VFS_CAP_REVISION_3 && value.length === 24)
  ) {
    permLo = value.readUInt32LE(4);
    inhLo = value.readUInt32LE(8);
    permHi = value.readUInt32LE(12);
    inhHi = value.readUInt32LE(16);
    if (revision === VFS_CAP_REVISION_3) rootid = value.readUInt32LE(20);
  } else {
    return undefined;
  }
  const out = Buffer.alloc(24);
  out.writeUInt32LE((VFS_CAP_REVISION_3 | flags) >>> 0, 0);
  out.writeUInt32LE(permLo, 4);
  out.writeUInt32LE(inhLo, 8);
  out.writeUInt32LE(permHi, 12);
  out.writeUInt32LE(inhHi, 16);
  out.writeUInt32LE(shiftId(rootid), 20);
  return out;
}
