import { uuidv7 } from '../util/uuid.js';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ANY_UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A new snapshot/template id: UUIDv7 (RFC 9562), lowercase, so ids sort by creation time. */
export function newSnapshotId(nowMs: number = Date.now()): string {
  return uuidv7(nowMs);
}

/** True for a lowercase UUIDv7, the only id form records are stored under. */
export function isSnapshotId(value: string): boolean {
  return UUID_RE.test(value);
}

/** True for any UUID spelling (any version, any case): such a lookup key is tried as an id first. */
export function looksLikeUuid(value: string): boolean {
  return ANY_UUID_RE.test(value);
}
