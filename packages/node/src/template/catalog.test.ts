import { describe, expect, it } from 'vitest';
import { hasTag, parseTemplateRef } from './catalog.js';
import type { SnapshotRecord } from '../snapshot/index.js';

describe('template references', () => {
  it('splits ns/name:tag', () => {
    expect(parseTemplateRef('base')).toEqual({ name: 'base' });
    expect(parseTemplateRef('base:v1')).toEqual({ name: 'base', tag: 'v1' });
    expect(parseTemplateRef('team/base:v1.2')).toEqual({ name: 'base', tag: 'v1.2' });
    expect(parseTemplateRef('team/base')).toEqual({ name: 'base' });
  });

  it('every record has the default tag; others only when assigned', () => {
    const r = { tags: [{ tag: 'prod', createdAt: '2026-01-01T00:00:00.000Z' }] } as SnapshotRecord;
    expect(hasTag(r, undefined)).toBe(true);
    expect(hasTag(r, 'default')).toBe(true);
    expect(hasTag(r, 'prod')).toBe(true);
    expect(hasTag(r, 'v2')).toBe(false);
    expect(hasTag({} as SnapshotRecord, 'prod')).toBe(false);
  });
});
