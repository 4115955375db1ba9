import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { httpErrorAnswer } from '@aenv/protocol';
import { createLogger } from '../util/log.js';
import { BuildArtefacts, planPrune, type Artefact, type PrunePolicy } from './build-artefacts.js';
import { BuildCache } from './build-cache.js';
import { TemplateFileStore, UploadError } from './file-store.js';

const silent = createLogger('json', 'info', new Writable({ write: (_c, _e, cb) => cb() }));
const MIB = 1024 * 1024;
const HOUR = 3600_000;
const NOW = Date.parse('2025-01-10T00:00:00.000Z');

const dirs: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'aenv-artefacts-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const item = (kind: Artefact['kind'], name: string, bytes: number, ageMs: number): Artefact => ({
  kind,
  name,
  bytes,
  usedAt: NOW - ageMs,
  remove: async () => {},
});

const policy = (over: Partial<PrunePolicy> = {}): PrunePolicy => ({
  quotaBytes: 0,
  retentionMs: { log: 0, upload: 0, cache: 0 },
  protectMs: 0,
  ...over,
});

describe('planPrune', () => {
  it('removes what passed its kind’s retention, whatever the quota', () => {
    const items = [
      item('log', 'old-log', 1, 31 * 24 * HOUR),
      item('log', 'new-log', 1, HOUR),
      item('upload', 'old-up', 1, 8 * 24 * HOUR),
      item('cache', 'old-cache', 1, 8 * 24 * HOUR),
    ];
    const plan = planPrune(
      items,
      policy({ retentionMs: { log: 30 * 24 * HOUR, upload: 7 * 24 * HOUR, cache: 0 } }),
      NOW,
    );
    expect(plan.remove.map((a) => a.name).sort()).toEqual(['old-log', 'old-up']);
    expect(plan.keptBytes).toBe(2);
  });

  it('past the quota removes the least recently used first, until it fits', () => {
    const items = [
      item('upload', 'u-newest', 4 * MIB, 1 * HOUR),
      item('log', 'l-oldest', 1 * MIB, 5 * HOUR),
      item('cache', 'c-mid', 3 * MIB, 3 * HOUR),
      item('upload', 'u-old', 2 * MIB, 4 * HOUR),
    ];
    const plan = planPrune(items, policy({ quotaBytes: 6 * MIB }), NOW);
    expect(plan.remove.map((a) => a.name)).toEqual(['l-oldest', 'u-old', 'c-mid']);
    expect(plan.keptBytes).toBe(4 * MIB);
  });

  it('never removes recently used artefacts to make room', () => {
    const items = [item('upload', 'fresh-a', 4 * MIB, 60_000), item('upload', 'fresh-b', 4 * MIB, 120_000)];
    const plan = planPrune(items, policy({ quotaBytes: 1 * MIB, protectMs: 10 * 60_000 }), NOW);
    expect(plan.remove).toEqual([]);
    expect(plan.keptBytes).toBe(8 * MIB);
  });

  it('removes nothing without a quota or retention', () => {
    const plan = planPrune([item('log', 'x', 1e12, 1e12)], policy(), NOW);
    expect(plan.remove).toEqual([]);
  });
});

/** A real node layout in a temp dir: build logs, uploads and a build-step cache entry. */
function layout() {
  const home = tmp();
  const logsDir = join(home, 'builds');
  const uploadsDir = join(home, 'template-files');
  const cacheDir = join(home, 'cache');
  mkdirSync(logsDir);
  mkdirSync(uploadsDir);
  const file = (path: string, bytes: number, ageMs: number) => {
    writeFileSync(path, Buffer.alloc(bytes, 1));
    const t = new Date(NOW - ageMs);
    utimesSync(path, t, t);
  };
  return { home, logsDir, uploadsDir, cacheDir, file };
}

describe('BuildArtefacts on disk', () => {
  it('prunes logs, uploads and cache entries oldest first, keeping what builds use; sizes come from disk', async () => {
    const l = layout();
    const cache = new BuildCache({
      dir: l.cacheDir,
      removeDisk: (p) => rm(p),
      diskFilesDir: (d) => join(d, 'upper'),
      maxEntries: 64,
      maxAgeMs: 365 * 24 * HOUR,
      logger: silent,
    });
    await cache.init();
    const key = 'a'.repeat(64);
    await cache.save(
      key,
      1,
      { env: {}, user: 'root', exposedPorts: [], volumes: [], labels: {} },
      async (dest) => {
        mkdirSync(join(dest, 'upper'), { recursive: true });
        writeFileSync(join(dest, 'upper', 'blob'), Buffer.alloc(2 * MIB, 3));
      },
    );
    const meta = join(l.cacheDir, `${key}.json`);
    utimesSync(meta, new Date(NOW - 3 * HOUR), new Date(NOW - 3 * HOUR));
    l.file(join(l.logsDir, 'finished.log'), 1 * MIB, 5 * HOUR);
    l.file(join(l.logsDir, 'running.log'), 1 * MIB, 6 * HOUR);
    const up = (c: string) => c.repeat(64);
    l.file(join(l.uploadsDir, `${up('b')}.tar.gz`), 2 * MIB, 4 * HOUR);
    l.file(join(l.uploadsDir, `${up('c')}.tar`), 2 * MIB, 7 * HOUR); // needed by a queued build
    l.file(join(l.uploadsDir, `${up('d')}.tar`), 1 * MIB, 1 * HOUR);
    l.file(join(l.uploadsDir, 'not-an-upload'), 1 * MIB, 9 * HOUR);

    const artefacts = new BuildArtefacts(
      {
        logsDir: l.logsDir,
        uploadsDir: l.uploadsDir,
        activeBuilds: () => new Set(['running']),
        uploadsInUse: () => new Set([up('c')]),
        cacheEntries: () => cache.artefacts(),
      },
      policy({ quotaBytes: 2.5 * MIB, protectMs: 30 * 60_000 }),
      silent,
    );
    const listed = await artefacts.list();
    expect(listed.map((a) => `${a.kind}:${a.name}`).sort()).toEqual([
      `cache:${key}`,
      'log:finished',
      `upload:${up('b')}`,
      `upload:${up('d')}`,
    ]);
    expect(listed.find((a) => a.kind === 'cache')!.bytes).toBeGreaterThanOrEqual(2 * MIB);

    const kept = await artefacts.prune(NOW);
    expect(existsSync(join(l.logsDir, 'finished.log'))).toBe(false);
    expect(existsSync(join(l.uploadsDir, `${up('b')}.tar.gz`))).toBe(false);
    expect(existsSync(join(l.cacheDir, key))).toBe(false);
    expect(await cache.get(key)).toBeUndefined();
    // Kept: the newest upload (fits), and everything in use (not counted, never removed).
    expect(existsSync(join(l.uploadsDir, `${up('d')}.tar`))).toBe(true);
    expect(existsSync(join(l.uploadsDir, `${up('c')}.tar`))).toBe(true);
    expect(existsSync(join(l.logsDir, 'running.log'))).toBe(true);
    expect(existsSync(join(l.uploadsDir, 'not-an-upload'))).toBe(true);
    expect(kept).toBeLessThanOrEqual(2.5 * MIB);

    // A new instance (a restart) counts the same from disk.
    const again = new BuildArtefacts(
      {
        logsDir: l.logsDir,
        uploadsDir: l.uploadsDir,
        activeBuilds: () => new Set(),
        uploadsInUse: () => new Set(),
        cacheEntries: () => cache.artefacts(),
      },
      policy({ quotaBytes: 2.5 * MIB }),
      silent,
    );
    const total = (await again.list()).reduce((n, a) => n + a.bytes, 0);
    expect(total).toBe(4 * MIB); // running.log, c and d: nothing in use any more
    expect(await again.prune(NOW)).toBe(2 * MIB);
    expect(existsSync(join(l.uploadsDir, `${up('c')}.tar`))).toBe(false);
    expect(existsSync(join(l.uploadsDir, `${up('d')}.tar`))).toBe(true);
  });
});

describe('uploads under the artefact quota', () => {
  function archive(bytes: number): Buffer {
    const ctx = tmp();
    writeFileSync(join(ctx, 'data.bin'), Buffer.alloc(bytes, 5));
    return execFileSync('tar', ['-C', ctx, '-cf', '-', 'data.bin'], { maxBuffer: 64 * MIB });
  }

  it('refuses with 507 naming the key an upload that does not fit, declared or streamed; stores nothing', async () => {
    const dir = tmp();
    let room = 1 * MIB;
    const store = new TemplateFileStore({
      dir,
      secret: 'k',
      maxUploadBytes: 64 * MIB,
      room: async () => room,
    });
    await store.init();
    const body = archive(2 * MIB);
    const declared = await store
      .store('e'.repeat(64), Readable.from([body]), body.length)
      .catch((e: unknown) => e);
    expect(declared).toBeInstanceOf(UploadError);
    expect(httpErrorAnswer((declared as UploadError).kind).status).toBe(507);
    expect((declared as UploadError).message).toContain('template_build.artefacts_quota_mb');
    const streamed = await store.store('e'.repeat(64), Readable.from([body])).catch((e: unknown) => e);
    expect(httpErrorAnswer((streamed as UploadError).kind).status).toBe(507);
    expect(await store.get('e'.repeat(64))).toBeUndefined();
    room = 8 * MIB;
    expect((await store.store('e'.repeat(64), Readable.from([body]), body.length)).size).toBe(body.length);
  });
});

async function rm(p: string): Promise<void> {
  rmSync(p, { recursive: true, force: true });
}
