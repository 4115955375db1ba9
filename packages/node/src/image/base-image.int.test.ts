// The default `base` image (scripts/build-base-image.sh → /var/cache/aenv/images/base), pulled through the
// local `oci:` transport and through a real registry (pushed with skopeo, as an operator would).
// Skipped when the image has not been built on this machine.

import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../util/exec.js';
import { startHarness, type Harness } from './testing/harness.js';
import { startRegistry, type TestRegistry } from './testing/registry.js';

const BASE = process.env.AENV_BASE_IMAGE_DIR ?? '/var/cache/aenv/images/base';
const TAG = process.env.AENV_BASE_IMAGE_TAG ?? 'latest';
const haveBase = existsSync(join(BASE, 'index.json'));

describe.skipIf(!haveBase)('base image', () => {
  let h: Harness;
  let reg: TestRegistry;

  beforeAll(async () => {
    reg = await startRegistry();
    await run(
      'skopeo',
      [
        'copy',
        '--quiet',
        '--dest-tls-verify=false',
        `oci:${BASE}:${TAG}`,
        `docker://${reg.host}/aenv/base:${TAG}`,
      ],
      {
        timeoutMs: 300_000,
      },
    );
    h = await startHarness({ insecureRegistries: [reg.host] });
  });

  afterAll(async () => {
    await h?.close();
    await reg?.stop();
  });

  function checkRootfs(layers: { dir: string }[]): void {
    // Files may sit in any layer; look them up top-down like overlayfs does.
    const find = (p: string): string => {
      for (const l of [...layers].reverse()) if (existsSync(join(l.dir, p))) return join(l.dir, p);
      throw new Error(`${p} not in any layer`);
    };
    expect(readFileSync(find('etc/os-release'), 'utf8')).toMatch(/bookworm/);
    expect(readFileSync(find('etc/passwd'), 'utf8')).toMatch(/^user:x:1000:1000:/m);
    const home = statSync(find('home/user'));
    expect(home.uid).toBe(100000 + 1000);
    const sudo = statSync(find('usr/bin/sudo'));
    expect(sudo.uid).toBe(100000);
    expect(sudo.mode & 0o4000).toBe(0o4000);
  }

  it('pulls through oci:', async () => {
    const img = await h.service.pull(`oci:${BASE}:${TAG}`);
    expect(img.layers.length).toBeGreaterThan(0);
    expect(img.config.env.some((e) => e.startsWith('PATH='))).toBe(true);
    checkRootfs(img.layers);
  });

  it('pulls through a local registry and shares the layers with the oci: pull', async () => {
    const viaOci = await h.service.pull(`oci:${BASE}:${TAG}`);
    const img = await h.service.pull(`${reg.host}/aenv/base:${TAG}`);
    expect(img.layers.map((l) => l.diffId)).toEqual(viaOci.layers.map((l) => l.diffId));
    expect(img.layers.map((l) => l.dir)).toEqual(viaOci.layers.map((l) => l.dir));
    checkRootfs(img.layers);
  });

  it('unpacks from the registry into an empty cache', async () => {
    const fresh = await startHarness({ insecureRegistries: [reg.host] });
    try {
      const img = await fresh.service.pull(`${reg.host}/aenv/base:${TAG}`);
      checkRootfs(img.layers);
    } finally {
      await fresh.close();
    }
  });
});
