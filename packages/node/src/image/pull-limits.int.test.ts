// `[image.limits]` against hostile images from a registry on loopback, as root: a gzip bomb, a layer with too
// many entries and an image whose layers add up past the image limit fail with TooLarge (413), and nothing
// half-written stays in the layer cache; an oci-archive over the limit is refused before it is read.

import { existsSync, readdirSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpErrorAnswer } from '@aenv/protocol';
import { ImageError } from './errors.js';
import { startHarness, type Harness } from './testing/harness.js';
import {
  gzipBombLayer,
  manyEntriesLayer,
  startHostileRegistry,
  type HostileRegistry,
} from './testing/hostile-registry.js';
import { imageOfLayers } from './testing/oci-builder.js';
import { buildImage } from './testing/oci-builder.js';

const MIB = 1024 * 1024;
let reg: HostileRegistry;
let h: Harness;

beforeAll(async () => {
  reg = await startHostileRegistry();
  h = await startHarness({
    insecureRegistries: [reg.host],
    limits: { maxLayerBytes: 32 * MIB, maxImageBytes: 48 * MIB, maxLayerEntries: 1000 },
  });
});

afterAll(async () => {
  await h?.close();
  await reg?.stop();
});

async function pullError(ref: string): Promise<ImageError> {
  const e = await h.service.pull(ref).then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(ImageError);
  return e as ImageError;
}

/** Nothing of a failed pull in the cache: no temporary unpack, no layer directory, no image. */
function expectNothingLeft(diffIds: string[], ref: string): void {
  expect(readdirSync(join(h.rootDir, 'tmp'))).toEqual([]);
  const layers = readdirSync(join(h.rootDir, 'layers'));
  for (const idMap of layers)
    for (const d of diffIds) expect(existsSync(join(h.rootDir, 'layers', idMap, d.slice(7)))).toBe(false);
  expect(h.service.get(ref)).toBeUndefined();
}

describe('image.limits', () => {
  it('a gzip bomb stops at max_layer_mb with a clear 413', async () => {
    const bomb = await gzipBombLayer(256 * MIB);
    expect(bomb.data.length).toBeLessThan(2 * MIB);
    reg.serve('bomb/zip', 'v1', imageOfLayers([bomb]));
    const ref = `${reg.host}/bomb/zip:v1`;
    const e = await pullError(ref);
    expect(e.reason).toBe('TooLarge');
    expect(httpErrorAnswer(e.kind).status).toBe(413);
    expect(e.userError).toBe(true);
    expect(e.message).toMatch(/larger than 32 MiB uncompressed \(image\.limits\.max_layer_mb\)/);
    expectNothingLeft([bomb.diffId], ref);
  });

  it('a layer with more entries than max_layer_entries is refused', async () => {
    const many = manyEntriesLayer(3000);
    reg.serve('bomb/entries', 'v1', imageOfLayers([many]));
    const ref = `${reg.host}/bomb/entries:v1`;
    const e = await pullError(ref);
    expect(e.reason).toBe('TooLarge');
    expect(e.message).toMatch(/more than 1000 entries \(image\.limits\.max_layer_entries\)/);
    expectNothingLeft([many.diffId], ref);
  });

  it('layers each under max_layer_mb that add up past max_image_mb are refused', async () => {
    const layers = [
      await gzipBombLayer(20 * MIB),
      await gzipBombLayer(20 * MIB + 512),
      await gzipBombLayer(20 * MIB + 1024),
    ];
    reg.serve('bomb/sum', 'v1', imageOfLayers(layers));
    const ref = `${reg.host}/bomb/sum:v1`;
    const e = await pullError(ref);
    expect(e.reason).toBe('TooLarge');
    expect(e.message).toMatch(/image\.limits\.max_image_mb/);
    expect(readdirSync(join(h.rootDir, 'tmp'))).toEqual([]);
    expect(h.service.get(ref)).toBeUndefined();
  });

  it('an image within the limits still pulls', async () => {
    const ok = buildImage({ layers: [{ entries: [{ name: 'x', content: 'y' }] }] });
    reg.serve('fine/app', 'v1', ok);
    expect((await h.service.pull(`${reg.host}/fine/app:v1`)).manifestDigest).toBe(ok.manifest.digest);
  });

  it('an oci-archive larger than max_image_mb is refused without being read', async () => {
    const file = join(h.dir, 'huge.tar');
    writeFileSync(file, '');
    truncateSync(file, 4 * 1024 * MIB);
    const e = await pullError(`oci-archive:${file}`);
    expect(e.reason).toBe('TooLarge');
    expect(readdirSync(join(h.rootDir, 'tmp'))).toEqual([]);
  });
});
