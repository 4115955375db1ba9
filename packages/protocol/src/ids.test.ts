import { describe, expect, it } from 'vitest';
import {
  isBuildId,
  isCanonicalUuid,
  isSandboxId,
  isSnapshotId,
  isUuid,
  isUuidV7,
  NIL_UUID,
  newSandboxId,
  newSnapshotId,
  uuidv7,
  uuidv7Timestamp,
} from './ids.js';

describe('uuidv7', () => {
  it('has the RFC 9562 layout and encodes the time', () => {
    const t = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
    const id = uuidv7(t);
    expect(isUuidV7(id)).toBe(true);
    expect(id[14]).toBe('7');
    expect('89ab').toContain(id[19]);
    expect(uuidv7Timestamp(id)).toBe(t);
  });

  it('is strictly increasing within a process, also within one millisecond and when the clock steps back', () => {
    const t = Date.UTC(2030, 5, 1);
    const ids = [uuidv7(t)];
    for (let i = 0; i < 5000; i++) ids.push(uuidv7(t));
    ids.push(uuidv7(t - 1000));
    for (let i = 1; i < ids.length; i++)
      expect(ids[i]! > ids[i - 1]!, `${ids[i - 1]} < ${ids[i]}`).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    // 5000 ids in one millisecond overflow the 12-bit counter into the following milliseconds.
    expect(uuidv7Timestamp(ids[ids.length - 1]!)).toBeGreaterThan(t);
    expect(ids.every(isUuidV7)).toBe(true);
  });
});

describe('isUuid', () => {
  it('accepts canonical UUIDs of any version and case only', () => {
    expect(isUuid(NIL_UUID)).toBe(true);
    expect(isUuid('01936F8E-72F5-7000-8000-000000000001')).toBe(true);
    expect(isUuid('01936f8e72f570008000000000000001')).toBe(false);
    expect(isUuid('01936f8e-72f5-7000-8000-00000000000')).toBe(false);
    expect(isUuidV7('01936F8E-72F5-7000-8000-000000000001')).toBe(false);
  });
});

describe('ids of aenv objects', () => {
  const v7 = '01936f8e-72f5-7000-8000-000000000001';
  const v4 = '9b2c4a1e-3f5d-4c6b-8a7e-1d2f3a4b5c6d';

  it('names sandboxes and builds by canonical (lowercase) UUIDs of any version only', () => {
    for (const ok of [v7, v4, NIL_UUID]) {
      expect(isSandboxId(ok)).toBe(true);
      expect(isBuildId(ok)).toBe(true);
    }
    // Another spelling names no sandbox (a 404 on the wire, as in the reference).
    for (const bad of [v7.toUpperCase(), `${v7} `, v7.replace(/-/g, ''), `{${v7}}`, '', 'base']) {
      expect(isSandboxId(bad), bad).toBe(false);
      expect(isBuildId(bad), bad).toBe(false);
    }
  });

  it('stores templates and snapshots under lowercase UUIDv7 ids only', () => {
    expect(isSnapshotId(v7)).toBe(true);
    expect(isSnapshotId(v7.toUpperCase())).toBe(false);
    expect(isSnapshotId(v4)).toBe(false);
    expect(isSnapshotId(newSnapshotId())).toBe(true);
    expect(isSandboxId(newSandboxId())).toBe(true);
  });

  it('tells any-case UUIDs from canonical ones', () => {
    expect(isUuid(v4.toUpperCase())).toBe(true);
    expect(isCanonicalUuid(v4.toUpperCase())).toBe(false);
    expect(isCanonicalUuid(v4)).toBe(true);
  });
});
