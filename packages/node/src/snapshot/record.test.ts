import { describe, expect, it } from 'vitest';
import type { RepositoryError } from './errors.js';
import { isRepositoryError } from './errors.js';
import { isSnapshotId, isUuid, newSnapshotId } from '@aenv/protocol';
import {
  assertValidAlias,
  commitMarkerSchema,
  compareCatalogOrder,
  isValidAlias,
  parseStored,
  storedRecordSchema,
  type SnapshotRecord,
} from './record.js';

const record = (over: Partial<SnapshotRecord> = {}): SnapshotRecord => ({
  version: 1,
  id: newSnapshotId(),
  source: { kind: 'sandbox', sourceSandboxId: 'sbx' },
  resources: { cpuCount: 1, memoryMB: 128, diskSizeMB: 1024 },
  createdAt: '2025-01-01T00:00:00.000Z',
  updatedAt: '2025-01-01T00:00:00.000Z',
  ...over,
});

describe('aliases (docs/snapshots.md)', () => {
  it('accepts [A-Za-z0-9_-]+ and nothing else', () => {
    for (const ok of ['a', 'My_template-2', '0', '-', '_', 'x'.repeat(255)])
      expect(isValidAlias(ok), ok).toBe(true);
    for (const bad of ['', 'a/b', 'a:b', 'a.b', 'a b', 'é', 'team/name:tag', 'x'.repeat(256)]) {
      expect(isValidAlias(bad), bad).toBe(false);
      expect(() => assertValidAlias(bad)).toThrow(/invalid snapshot alias/);
    }
  });

  it('reports a 400-class InvalidRequest', () => {
    try {
      assertValidAlias('a.b');
      expect.unreachable();
    } catch (err) {
      expect(isRepositoryError(err, 'InvalidRequest')).toBe(true);
      expect((err as RepositoryError).kind).toBe('invalid_argument');
    }
  });
});

describe('ids', () => {
  it('are lowercase UUIDv7 that sort by creation time', () => {
    const a = newSnapshotId(1_700_000_000_000);
    const b = newSnapshotId(1_700_000_000_001);
    expect(isSnapshotId(a)).toBe(true);
    expect(a < b).toBe(true);
    expect(isSnapshotId(a.toUpperCase())).toBe(false);
    expect(isUuid(a.toUpperCase())).toBe(true);
    expect(isSnapshotId('00000000-0000-4000-8000-000000000000')).toBe(false);
  });
});

describe('stored record validation', () => {
  it('round-trips a valid record and rejects damaged ones with a Backend error naming the object', () => {
    const r = record({ alias: 'x' });
    expect(parseStored(storedRecordSchema, JSON.stringify(r), 'record r')).toEqual(r);
    const bad = [
      '{',
      JSON.stringify({ ...r, version: 2 }),
      JSON.stringify({ ...r, id: 'nope' }),
      JSON.stringify({ ...r, createdAt: '2025-01-01' }),
      JSON.stringify({ ...r, source: { kind: 'vm' } }),
      JSON.stringify({ ...r, alias: 'a/b' }),
    ];
    for (const text of bad) {
      expect(() => parseStored(storedRecordSchema, text, 'record r')).toThrow(/record r/);
      try {
        parseStored(storedRecordSchema, text, 'record r');
      } catch (err) {
        expect((err as RepositoryError).reason).toBe('Backend');
      }
    }
  });

  it('validates commit markers including layer digests', () => {
    const marker = {
      version: 1,
      id: newSnapshotId(),
      committedAt: '2025-01-01T00:00:00.000Z',
      committed: {
        context: { envVars: {}, workdir: '/', exposedPorts: [], volumes: [], labels: {} },
        runtimeVersions: { envd: '0.5.15' },
        virtualizationMode: 'container',
        layers: [{ digest: `sha256:${'a'.repeat(64)}`, size: 1, mediaType: 'l' }],
        artifacts: { memory: { digest: `sha256:${'b'.repeat(64)}`, size: 2, mediaType: 'm' } },
      },
    };
    expect(parseStored(commitMarkerSchema, JSON.stringify(marker), 'm').committed.layers).toHaveLength(1);
    const badDigest = structuredClone(marker);
    badDigest.committed.layers[0]!.digest = 'sha256:XYZ';
    expect(() => parseStored(commitMarkerSchema, JSON.stringify(badDigest), 'm')).toThrow(/layers.0.digest/);
  });
});

describe('catalog order', () => {
  it('is createdAt descending, then id ascending', () => {
    const old = record({ id: '01900000-0000-7000-8000-000000000003', createdAt: '2025-01-01T00:00:00.000Z' });
    const newA = record({
      id: '01900000-0000-7000-8000-000000000002',
      createdAt: '2025-01-02T00:00:00.000Z',
    });
    const newB = record({
      id: '01900000-0000-7000-8000-000000000001',
      createdAt: '2025-01-02T00:00:00.000Z',
    });
    expect([old, newA, newB].sort(compareCatalogOrder).map((r) => r.id)).toEqual([newB.id, newA.id, old.id]);
  });
});
