// Builds OCI / Docker v2 images in memory for tests (layers from TarSpec lists), writes them as OCI image
// layouts and oci-archives. Not used by the server itself.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { MediaType } from '../manifest.js';
import { buildTar, type TarSpec } from './tar-builder.js';

export type Compression = 'gzip' | 'zstd' | 'none';

export interface LayerSpec {
  entries: TarSpec[];
  compression?: Compression;
}

export interface ImageSpec {
  layers: LayerSpec[];
  config?: {
    Env?: string[];
    Cmd?: string[];
    Entrypoint?: string[];
    WorkingDir?: string;
    User?: string;
    ExposedPorts?: Record<string, object>;
    Volumes?: Record<string, object>;
    Labels?: Record<string, string>;
  };
  architecture?: string;
  os?: string;
  variant?: string;
  /** Docker v2 schema2 media types instead of OCI ones. */
  docker?: boolean;
}

export interface Blob {
  digest: string;
  data: Buffer;
  mediaType: string;
}

export interface BuiltImage {
  kind: 'image';
  manifest: Blob;
  config: Blob;
  layers: (Blob & { diffId: string })[];
  platform: { os: string; architecture: string; variant?: string };
}

export interface BuiltIndex {
  kind: 'index';
  index: Blob;
  images: BuiltImage[];
}

export function sha256(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

function compress(tar: Buffer, c: Compression): Buffer {
  if (c === 'gzip') return gzipSync(tar);
  if (c === 'zstd') return execFileSync('zstd', ['-q', '-c', '-3'], { input: tar, maxBuffer: 1 << 30 });
  return tar;
}

function layerMediaType(c: Compression, docker: boolean): string {
  if (docker) {
    if (c !== 'gzip') throw new Error('Docker schema2 layers are gzip');
    return MediaType.DockerLayerGzip;
  }
  return c === 'gzip' ? MediaType.OciLayerGzip : c === 'zstd' ? MediaType.OciLayerZstd : MediaType.OciLayer;
}

export function buildImage(spec: ImageSpec): BuiltImage {
  const docker = spec.docker ?? false;
  const layers = spec.layers.map((l) => {
    const tar = buildTar(l.entries);
    const c = l.compression ?? 'gzip';
    const data = compress(tar, c);
    return { digest: sha256(data), data, mediaType: layerMediaType(c, docker), diffId: sha256(tar) };
  });
  return imageOfLayers(layers, spec);
}

/** An image over ready-made layer blobs (e.g. a hostile layer built by streaming). */
export function imageOfLayers(
  layers: (Blob & { diffId: string })[],
  spec: Omit<ImageSpec, 'layers'> = {},
): BuiltImage {
  const docker = spec.docker ?? false;
  const platform = {
    os: spec.os ?? 'linux',
    architecture: spec.architecture ?? 'amd64',
    ...(spec.variant ? { variant: spec.variant } : {}),
  };
  const configDoc = {
    created: '2024-01-01T00:00:00Z',
    ...platform,
    config: spec.config ?? {},
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
    history: layers.map(() => ({ created: '2024-01-01T00:00:00Z', created_by: 'aenv test' })),
  };
  const configData = Buffer.from(JSON.stringify(configDoc));
  const config = {
    digest: sha256(configData),
    data: configData,
    mediaType: docker ? MediaType.DockerConfig : MediaType.OciConfig,
  };
  const manifestDoc = {
    schemaVersion: 2,
    mediaType: docker ? MediaType.DockerManifest : MediaType.OciManifest,
    config: { mediaType: config.mediaType, digest: config.digest, size: config.data.length },
    layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.data.length })),
  };
  const manifestData = Buffer.from(JSON.stringify(manifestDoc));
  return {
    kind: 'image',
    manifest: { digest: sha256(manifestData), data: manifestData, mediaType: manifestDoc.mediaType },
    config,
    layers,
    platform,
  };
}

/** An image index over `images` (each with its platform), optionally with an attestation-like entry. */
export function buildIndex(
  images: BuiltImage[],
  opts: { docker?: boolean; withUnknownPlatform?: boolean } = {},
): BuiltIndex {
  const manifests: object[] = images.map((i) => ({
    mediaType: i.manifest.mediaType,
    digest: i.manifest.digest,
    size: i.manifest.data.length,
    platform: i.platform,
  }));
  if (opts.withUnknownPlatform && images[0]) {
    manifests.push({
      mediaType: images[0].manifest.mediaType,
      digest: images[0].manifest.digest,
      size: images[0].manifest.data.length,
      platform: { os: 'unknown', architecture: 'unknown' },
    });
  }
  const mediaType = opts.docker ? MediaType.DockerManifestList : MediaType.OciIndex;
  const data = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType, manifests }));
  return { kind: 'index', index: { digest: sha256(data), data, mediaType }, images };
}

export function blobsOf(x: BuiltImage | BuiltIndex): Blob[] {
  const images = x.kind === 'image' ? [x] : x.images;
  const out: Blob[] = [];
  for (const i of images) out.push(...i.layers, i.config, i.manifest);
  if (x.kind === 'index') out.push(x.index);
  return out;
}

/** Writes an OCI image layout with the given tagged images/indexes. */
export function writeLayout(dir: string, entries: { tag?: string; item: BuiltImage | BuiltIndex }[]): void {
  mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
  writeFileSync(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const manifests: object[] = [];
  for (const { tag, item } of entries) {
    for (const b of blobsOf(item)) writeFileSync(join(dir, 'blobs', 'sha256', b.digest.slice(7)), b.data);
    const top = item.kind === 'image' ? item.manifest : item.index;
    manifests.push({
      mediaType: top.mediaType,
      digest: top.digest,
      size: top.data.length,
      ...(tag ? { annotations: { 'org.opencontainers.image.ref.name': tag } } : {}),
    });
  }
  writeFileSync(
    join(dir, 'index.json'),
    JSON.stringify({ schemaVersion: 2, mediaType: MediaType.OciIndex, manifests }),
  );
}

/** Tars a layout directory into an oci-archive file (GNU tar, as skopeo's archives are plain tars). */
export function writeArchive(layoutDir: string, file: string): void {
  execFileSync('tar', ['-C', layoutDir, '-cf', file, '.']);
}
