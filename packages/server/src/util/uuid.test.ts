import { describe, expect, it } from 'vitest';
import { isUuid, isUuidV7, NIL_UUID, uuidv7, uuidv7Timestamp } from './uuid.js';

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
