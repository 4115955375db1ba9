import { randomBytes } from 'node:crypto';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ANY_UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A new snapshot/template id: UUIDv7 (RFC 9562), lowercase, so ids sort by creation time. */
export function newSnapshotId(nowMs: number = Date.now()): string {
  const b = randomBytes(16);
  b.writeUIntBE(nowMs, 0, 6);
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = b.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** True for a lowercase UUIDv7, the only id form records are stored under. */
export function isSnapshotId(value: string): boolean {
  return UUID_RE.test(value);
}

/** True for any UUID spelling (any version, any case): such a lookup key is tried as an id first. */
export function looksLikeUuid(value: string): boolean {
  return ANY_UUID_RE.test(value);
}
