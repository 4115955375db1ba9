import { describe, expect, it } from 'vitest';
import { ImageError } from './errors.js';
import {
  MediaType,
  parseImageConfig,
  parseManifestOrIndex,
  selectPlatformManifest,
  type ImageIndex,
} from './manifest.js';

const d = (c: string) => `sha256:${c.repeat(64)}`;
const entry = (digest: string, os: string, architecture: string, variant?: string) => ({
  mediaType: MediaType.OciManifest,
  digest,
  size: 10,
  platform: { os, architecture, ...(variant ? { variant } : {}) },
});

function index(...manifests: object[]): ImageIndex {
  const r = parseManifestOrIndex(
    Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MediaType.OciIndex, manifests })),
    undefined,
    'i',
  );
  if (r.kind !== 'index') throw new Error('not an index');
  return r;
}

describe('platform selection', () => {
  const idx = index(
    entry(d('1'), 'linux', 'arm64'),
    entry(d('2'), 'linux', 'amd64'),
    entry(d('3'), 'unknown', 'unknown'),
    entry(d('4'), 'linux', 'arm', 'v6'),
    entry(d('5'), 'linux', 'arm', 'v7'),
  );
  it('picks the host platform', () => {
    expect(selectPlatformManifest(idx, { os: 'linux', architecture: 'amd64' }, 'x').digest).toBe(d('2'));
  });
  it('accepts arm64 without a variant for arm64/v8', () => {
    expect(
      selectPlatformManifest(idx, { os: 'linux', architecture: 'arm64', variant: 'v8' }, 'x').digest,
    ).toBe(d('1'));
  });
  it('prefers the exact arm variant, else an older one', () => {
    expect(selectPlatformManifest(idx, { os: 'linux', architecture: 'arm', variant: 'v7' }, 'x').digest).toBe(
      d('5'),
    );
    const old = index(entry(d('4'), 'linux', 'arm', 'v6'));
    expect(selectPlatformManifest(old, { os: 'linux', architecture: 'arm', variant: 'v7' }, 'x').digest).toBe(
      d('4'),
    );
    expect(() =>
      selectPlatformManifest(idx, { os: 'linux', architecture: 'arm', variant: 'v5' }, 'x'),
    ).toThrow(ImageError);
  });
  it('explains what is available', () => {
    expect(() => selectPlatformManifest(idx, { os: 'linux', architecture: 'riscv64' }, 'x')).toThrow(
      /no manifest for platform linux\/riscv64 \(available: linux\/arm64, linux\/amd64, linux\/arm\/v6, linux\/arm\/v7\)/,
    );
  });
});

describe('manifest parsing', () => {
  it('rejects schema 1, artifacts and unknown layer types', () => {
    const schema1 = Buffer.from(JSON.stringify({ schemaVersion: 1, name: 'x', fsLayers: [] }));
    expect(() => parseManifestOrIndex(schema1, MediaType.DockerManifestV1Signed, 'm')).toThrow(/schema 1/);
    const artifact = {
      schemaVersion: 2,
      mediaType: MediaType.OciManifest,
      config: { mediaType: 'application/vnd.cncf.helm.config.v1+json', digest: d('a'), size: 1 },
      layers: [],
    };
    expect(() => parseManifestOrIndex(Buffer.from(JSON.stringify(artifact)), undefined, 'm')).toThrow(
      /artifact/,
    );
    const weird = {
      ...artifact,
      config: { mediaType: MediaType.OciConfig, digest: d('a'), size: 1 },
      layers: [{ mediaType: 'application/x-foo', digest: d('b'), size: 1 }],
    };
    expect(() => parseManifestOrIndex(Buffer.from(JSON.stringify(weird)), undefined, 'm')).toThrow(
      /unsupported media type "application\/x-foo"/,
    );
    expect(() => parseManifestOrIndex(Buffer.from('{'), undefined, 'm')).toThrow(/not valid JSON/);
    const badDigest = {
      ...weird,
      layers: [{ mediaType: MediaType.OciLayerGzip, digest: 'sha256:zz', size: 1 }],
    };
    expect(() => parseManifestOrIndex(Buffer.from(JSON.stringify(badDigest)), undefined, 'm')).toThrow(
      /hex digits/,
    );
  });

  it('reads the config fields aenv uses', () => {
    const cfg = parseImageConfig(
      Buffer.from(
        JSON.stringify({
          architecture: 'amd64',
          os: 'linux',
          config: { Env: ['A=1'], Cmd: ['sh'], ExposedPorts: { '80/tcp': {} }, Labels: { a: 'b', n: 1 } },
          rootfs: { type: 'layers', diff_ids: [d('c')] },
        }),
      ),
      'c',
    );
    expect(cfg.config).toEqual({
      env: ['A=1'],
      cmd: ['sh'],
      exposedPorts: ['80/tcp'],
      volumes: [],
      labels: { a: 'b' },
    });
    expect(cfg.diffIds).toEqual([d('c')]);
    expect(() =>
      parseImageConfig(
        Buffer.from(JSON.stringify({ os: 'windows', rootfs: { type: 'layers', diff_ids: [] } })),
        'c',
      ),
    ).toThrow(/only linux/);
  });

  it("never quotes a document in an error message (a manifest may be a host file or a registry's bait)", () => {
    const shadow = 'root:$6$c2VjcmV0:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n';
    const messages: string[] = [];
    for (const body of [shadow, `{"mediaType": ${JSON.stringify(shadow.repeat(50))}}`, '{"a":']) {
      try {
        parseManifestOrIndex(Buffer.from(body), undefined, 'm');
      } catch (e) {
        messages.push((e as Error).message);
      }
    }
    expect(messages).toHaveLength(3);
    for (const m of messages) {
      expect(m).not.toContain('c2VjcmV0');
      expect(m.length).toBeLessThan(200);
    }
  });
});
