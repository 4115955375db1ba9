// `[snapshot].unsigned_records`: records written before signing are signed once on a local posix_fs store and
// refused afterwards; a shared store's are refused unless the operator asks for a signing start.

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { newSnapshotId } from '@aenv/protocol';
import { createSnapshotRepository, type SnapshotRepository } from './index.js';
import { signUnsignedAtStartup, type UnsignedRecordsPolicy } from './unsigned-records.js';

const logger = pino({ level: 'silent' });
const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function setup() {
  const dir = await mkdtemp(join(tmpdir(), 'aenv-unsigned-'));
  dirs.push(dir);
  const open = (): SnapshotRepository =>
    createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'store') },
      localCachePath: join(dir, 'cache'),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      signing: { secret: 'unit' },
      logger,
    });
  const recordsDir = join(dir, 'store', 'repository', 'catalog', 'records');
  /** A record as a version without signing wrote it. */
  const plantUnsigned = () => {
    const id = newSnapshotId();
    const now = new Date().toISOString();
    writeFileSync(
      join(recordsDir, `${id}.json`),
      JSON.stringify({
        version: 1,
        id,
        source: { kind: 'template', build: { status: 'waiting' } },
        resources: { cpuCount: 1, memoryMB: 128, diskSizeMB: 1024 },
        createdAt: now,
        updatedAt: now,
      }),
    );
    return id;
  };
  const start = async (policy: UnsignedRecordsPolicy, backend: 'posix_fs' | 'oss' = 'posix_fs') => {
    const repo = open();
    await repo.list();
    await signUnsignedAtStartup(repo, { policy, backend, markerPath: join(dir, 'marker'), logger });
    return repo;
  };
  return { dir, plantUnsigned, start, marker: join(dir, 'marker') };
}

describe('unsigned records at startup', () => {
  it('auto on posix_fs: the first start signs existing records; records planted later are refused', async () => {
    const s = await setup();
    await (await s.start('refuse')).list(); // creates the directories
    const existing = s.plantUnsigned();
    const repo = await s.start('auto');
    expect((await repo.get(existing)).id).toBe(existing);
    expect(existsSync(s.marker)).toBe(true);
    expect(JSON.parse(readFileSync(s.marker, 'utf8'))).toMatchObject({ signed: 1 });
    const planted = s.plantUnsigned();
    const again = await s.start('auto');
    await expect(again.get(planted)).rejects.toMatchObject({ reason: 'IntegrityMismatch' });
    expect((await again.get(existing)).id).toBe(existing);
  });

  it('auto on oss and refuse never sign; sign_at_startup signs at every start', async () => {
    const s = await setup();
    await (await s.start('refuse')).list();
    const a = s.plantUnsigned();
    for (const [policy, backend] of [
      ['auto', 'oss'],
      ['refuse', 'posix_fs'],
    ] as const) {
      const repo = await s.start(policy, backend);
      await expect(repo.get(a)).rejects.toMatchObject({ reason: 'IntegrityMismatch' });
    }
    expect(existsSync(s.marker)).toBe(false);
    await s.start('sign_at_startup', 'oss');
    const b = s.plantUnsigned();
    const repo = await s.start('sign_at_startup', 'oss');
    expect((await repo.get(a)).id).toBe(a);
    expect((await repo.get(b)).id).toBe(b);
  });
});
