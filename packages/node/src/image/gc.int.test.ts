// GC of the image cache (as root: layers are unpacked with the real ownership shift). Images come from a local
// OCI layout; time is an injected clock.

import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { metricValue, startHarness, type Harness } from './testing/harness.js';
import { buildImage, writeLayout, type BuiltImage } from './testing/oci-builder.js';
import type { GcConfig } from './gc.js';

const MIN_AGE = 600;
let now = 1_700_000_000_000;
let h: Harness;
let layout: string;

function image(name: string): BuiltImage {
  return buildImage({
    layers: [{ entries: [{ name: `${name}.bin`, content: Buffer.alloc(64 * 1024, name.charCodeAt(0)) }] }],
  });
}

const A = image('a');
const B = image('b');
const C = image('c');
const shared = { entries: [{ name: 'shared.bin', content: Buffer.alloc(8192, 9) }] };
const D = buildImage({ layers: [shared, { entries: [{ name: 'd2', content: 'will be corrupted' }] }] });

async function harness(capacityLayers: number | undefined, gc: GcConfig = {}): Promise<void> {
  // Every test image has one 64 KiB file → 65536 bytes accounted per layer.
  const capacityGb = capacityLayers === undefined ? undefined : (capacityLayers * 65536) / 1024 ** 3;
  h = await startHarness({
    now: () => now,
    ...(capacityGb === undefined ? {} : { capacityGb }),
    gc: { minAgeSecs: MIN_AGE, highWatermarkRatio: 0.95, lowWatermarkRatio: 0.7, ...gc },
  });
  layout = join(h.dir, 'layout');
  writeLayout(layout, [
    { tag: 'a', item: A },
    { tag: 'b', item: B },
    { tag: 'c', item: C },
    { tag: 'd', item: D },
  ]);
}

async function pullAt(tag: string, t: number) {
  now = t;
  return h.service.pull(`oci:${layout}:${tag}`);
}

beforeEach(() => {
  now = 1_700_000_000_000;
});

afterEach(async () => {
  await h?.close();
});

describe('image cache GC', () => {
  it('evicts least-recently-used images idle for min_age down to the low watermark, then deletes their layers', async () => {
    await harness(2.5); // high = 2.375 layers, low = 1.75 layers
    const a = await pullAt('a', now);
    const b = await pullAt('b', now + 1000);
    const c = await pullAt('c', now + 1000);
    expect(h.service.cacheBytes()).toBe(3 * 65536);

    // Over the high watermark, but everything was used within min_age: nothing goes.
    now += (MIN_AGE - 10) * 1000;
    let r = await h.service.gcOnce();
    expect(r.ran).toBe(true);
    expect(r.evicted).toEqual([]);

    // A use of A makes B the least recently used.
    now += 500;
    h.service.get(a.manifestDigest);
    now += (MIN_AGE + 1) * 1000;
    r = await h.service.gcOnce();
    expect(r.evicted).toEqual([B.manifest.digest, C.manifest.digest]);
    expect(r.deletedLayers).toBe(2);
    expect(existsSync(b.layers[0]!.dir)).toBe(false);
    expect(existsSync(c.layers[0]!.dir)).toBe(false);
    expect(existsSync(a.layers[0]!.dir)).toBe(true);
    expect(h.service.get(`oci:${layout}:b`)).toBeUndefined();
    expect(h.service.get(a.manifestDigest)).toBeDefined();
    expect(h.service.cacheBytes()).toBe(65536);
    expect(await metricValue(h.metrics, 'aenv_image_cache_evictions_total')).toBe(2);
    expect(await metricValue(h.metrics, 'aenv_image_cache_bytes')).toBe(65536);
    expect(await metricValue(h.metrics, 'aenv_image_gc_runs_total', { result: 'ok' })).toBe(2);
  });

  it('never evicts a leased image; a released one is idle from the release', async () => {
    await harness(2); // high = 1.9 layers, low = 1.4 layers
    const a = await pullAt('a', now);
    await pullAt('b', now + 1000);
    await pullAt('c', now + 1000);
    h.service.acquireLease('sandbox:s1', a.manifestDigest);
    h.service.acquireLease('template:t1', `oci:${layout}:b`);
    expect(h.service.listLeases().map((l) => l.holder)).toEqual(['sandbox:s1', 'template:t1']);
    now += (MIN_AGE + 1) * 1000;
    let r = await h.service.gcOnce();
    expect(r.evicted).toEqual([C.manifest.digest]);
    expect(existsSync(a.layers[0]!.dir)).toBe(true);

    h.service.releaseLease('template:t1');
    h.service.releaseLease('template:t1'); // idempotent
    r = await h.service.gcOnce(); // still 2 layers > high, but B was just released (idle < min_age)
    expect(r.evicted).toEqual([]);
    now += (MIN_AGE + 1) * 1000;
    r = await h.service.gcOnce();
    expect(r.evicted).toEqual([B.manifest.digest]);
    expect(h.service.get(a.manifestDigest)).toBeDefined();
  });

  it('acquireLease on an unknown image fails, and rejects odd holders', async () => {
    await harness(undefined);
    expect(() => h.service.acquireLease('sandbox:x', `sha256:${'0'.repeat(64)}`)).toThrow(/not in the cache/);
    await pullAt('a', now);
    expect(() => h.service.acquireLease('', A.manifest.digest)).toThrow(/invalid lease holder/);
  });

  it('without capacity, only unreferenced layers go; a failed pull leaves no image, and GC is fail-closed', async () => {
    await harness(undefined);
    await pullAt('a', now);
    // D's second layer is corrupt in the layout: the pull fails after the shared layer was unpacked.
    const bad = join(layout, 'blobs', 'sha256', D.layers[1]!.digest.slice(7));
    writeFileSync(bad, Buffer.concat([readFileSync(bad), Buffer.from('junk')]));
    await expect(h.service.pull(`oci:${layout}:d`)).rejects.toMatchObject({ reason: 'DigestMismatch' });
    expect(h.service.get(`oci:${layout}:d`)).toBeUndefined();
    const sharedDir = join(h.rootDir, 'layers', 'v1-100000-65536', D.layers[0]!.diffId.slice(7));
    expect(existsSync(sharedDir)).toBe(true);

    // Reconcile cannot read the layer tree → nothing is deleted.
    const layersDir = join(h.rootDir, 'layers');
    renameSync(layersDir, `${layersDir}.moved`);
    writeFileSync(layersDir, 'not a directory');
    let r = await h.service.gcOnce();
    expect(r.ran).toBe(false);
    expect(r.error).toMatch(/ENOTDIR/);
    expect(await metricValue(h.metrics, 'aenv_image_gc_runs_total', { result: 'reconcile_failed' })).toBe(1);
    rmSync(layersDir);
    renameSync(`${layersDir}.moved`, layersDir);
    expect(existsSync(sharedDir)).toBe(true);

    r = await h.service.gcOnce();
    expect(r.ran).toBe(true);
    expect(r.evicted).toEqual([]);
    expect(r.deletedLayers).toBe(1);
    expect(existsSync(sharedDir)).toBe(false);
    expect(h.service.get(`oci:${layout}:a`)).toBeDefined();
  });

  it('reconcile drops rows of vanished layers and deletes directories without metadata', async () => {
    await harness(undefined);
    const a = await pullAt('a', now);
    const orphan = join(h.rootDir, 'layers', 'v1-100000-65536', 'e'.repeat(64));
    mkdirSync(orphan);
    const otherMap = join(h.rootDir, 'layers', 'v1-200000-65536', 'd'.repeat(64));
    mkdirSync(otherMap, { recursive: true });
    rmSync(a.layers[0]!.dir, { recursive: true });
    const r = await h.service.gcOnce();
    expect(r.droppedRows).toBe(1);
    expect(r.orphanDirs).toBe(2);
    expect(existsSync(orphan)).toBe(false);
    expect(existsSync(otherMap)).toBe(false);
    expect(h.service.get(a.manifestDigest)).toBeUndefined();
    expect(h.service.cacheBytes()).toBe(0);
  });

  it('runs in the background every interval_secs until stopped', async () => {
    await harness(undefined, { intervalSecs: 1 });
    h.service.start();
    h.service.start(); // idempotent
    for (
      let i = 0;
      i < 100 && (await metricValue(h.metrics, 'aenv_image_gc_runs_total', { result: 'ok' })) < 1;
      i++
    ) {
      await new Promise((res) => setTimeout(res, 50));
    }
    expect(await metricValue(h.metrics, 'aenv_image_gc_runs_total', { result: 'ok' })).toBeGreaterThanOrEqual(
      1,
    );
    await h.service.stop();
  });

  it('disabled GC never starts a timer', async () => {
    await harness(undefined, { enabled: false, intervalSecs: 1 });
    h.service.start();
    await new Promise((res) => setTimeout(res, 1300));
    expect(await metricValue(h.metrics, 'aenv_image_gc_runs_total')).toBe(0);
  });
});
