// Ids of aenv objects: sandboxes, templates and snapshots (one repository, one id space), builds, and the cluster
// id of a node. All are UUIDs; aenv makes them as lowercase UUIDv7 so that they sort by creation time.
import { randomBytes } from 'node:crypto';

const UUID_SOURCE = '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
const CANONICAL_UUID = new RegExp(UUID_SOURCE);
const ANY_CASE_UUID = new RegExp(UUID_SOURCE, 'i');
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export const NIL_UUID = '00000000-0000-0000-0000-000000000000';

/** Any UUID in the hyphenated form, of any version, in any case. */
export function isUuid(value: string): boolean {
  return ANY_CASE_UUID.test(value);
}

/** A hyphenated, lowercase UUID of any version: the one spelling aenv writes ids in. */
export function isCanonicalUuid(value: string): boolean {
  return CANONICAL_UUID.test(value);
}

/** A lowercase UUIDv7. */
export function isUuidV7(value: string): boolean {
  return UUID_V7.test(value);
}

/**
 * A sandbox id as paths and data-plane hosts name it: canonical only (another spelling names no sandbox, as in
 * the reference), any version.
 */
export const isSandboxId = isCanonicalUuid;

/** A build id in a path: builds are named by their template's id, so the same spelling. */
export const isBuildId = isCanonicalUuid;

/**
 * A template or snapshot id (both are records of the snapshot repository): records are stored only under
 * lowercase UUIDv7 ids.
 */
export const isSnapshotId = isUuidV7;

let lastMs = -1;
let lastCounter = 0;

/**
 * A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, 12-bit `rand_a`, variant 10, 62 random
 * bits. Within one process ids are strictly increasing: in the same millisecond (or if the clock
 * steps back) `rand_a` is used as a counter, moving to the next millisecond when it overflows.
 */
export function uuidv7(nowMs: number = Date.now()): string {
  const rand = randomBytes(10);
  let ms = Math.max(Math.floor(nowMs), 0);
  let counter: number;
  if (ms > lastMs) {
    counter = rand.readUInt16BE(0) & 0x7ff; // start in the lower half so the counter has room
  } else {
    ms = lastMs;
    counter = lastCounter + 1;
    if (counter > 0xfff) {
      ms += 1;
      counter = 0;
    }
  }
  lastMs = ms;
  lastCounter = counter;

  const b = Buffer.alloc(16);
  b.writeUIntBE(ms, 0, 6);
  b.writeUInt16BE(0x7000 | counter, 6);
  rand.copy(b, 8, 2, 10);
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = b.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Unix milliseconds encoded in a UUIDv7. */
export function uuidv7Timestamp(id: string): number {
  return parseInt(id.replace(/-/g, '').slice(0, 12), 16);
}

/** A new sandbox id. */
export const newSandboxId = (): string => uuidv7();

/** A new template or snapshot id. */
export const newSnapshotId = (nowMs: number = Date.now()): string => uuidv7(nowMs);
