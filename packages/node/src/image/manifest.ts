// OCI / Docker v2 manifests, indexes and image configs: media types, validation, platform choice.

import { ImageError, shownValue } from './errors.js';
import { parseImageDigest } from './digest.js';
import type { ImageConfig } from './types.js';

export const MediaType = {
  OciManifest: 'application/vnd.oci.image.manifest.v1+json',
  OciIndex: 'application/vnd.oci.image.index.v1+json',
  OciConfig: 'application/vnd.oci.image.config.v1+json',
  OciLayer: 'application/vnd.oci.image.layer.v1.tar',
  OciLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  OciLayerZstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
  OciLayerNondistributable: 'application/vnd.oci.image.layer.nondistributable.v1.tar',
  OciLayerNondistributableGzip: 'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
  OciLayerNondistributableZstd: 'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd',
  DockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  DockerManifestList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  DockerManifestV1: 'application/vnd.docker.distribution.manifest.v1+json',
  DockerManifestV1Signed: 'application/vnd.docker.distribution.manifest.v1+prettyjws',
  DockerConfig: 'application/vnd.docker.container.image.v1+json',
  DockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
  DockerLayerForeignGzip: 'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip',
} as const;

/** What a registry is asked for when fetching a manifest by tag or digest. */
export const MANIFEST_ACCEPT = [
  MediaType.OciIndex,
  MediaType.DockerManifestList,
  MediaType.OciManifest,
  MediaType.DockerManifest,
].join(', ');

export type LayerCompression = 'gzip' | 'zstd' | 'none';

const LAYER_TYPES: Record<string, LayerCompression> = {
  [MediaType.OciLayer]: 'none',
  [MediaType.OciLayerGzip]: 'gzip',
  [MediaType.OciLayerZstd]: 'zstd',
  [MediaType.OciLayerNondistributable]: 'none',
  [MediaType.OciLayerNondistributableGzip]: 'gzip',
  [MediaType.OciLayerNondistributableZstd]: 'zstd',
  [MediaType.DockerLayerGzip]: 'gzip',
  [MediaType.DockerLayerForeignGzip]: 'gzip',
};

export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
export const MAX_CONFIG_BYTES = 8 * 1024 * 1024;

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
}

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

export interface ImageManifest {
  kind: 'manifest';
  mediaType: string;
  config: Descriptor;
  layers: (Descriptor & { compression: LayerCompression })[];
}

export interface ImageIndex {
  kind: 'index';
  mediaType: string;
  manifests: Descriptor[];
}

function unsupported(what: string, why: string): ImageError {
  return new ImageError('UnsupportedImage', `${what}: ${why}`);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A media type for a message; anything that is not shaped like one (RFC 6838) is not repeated. */
function mediaTypeText(v: string): string {
  return /^[A-Za-z0-9][\w.+-]{0,126}\/[A-Za-z0-9][\w.+-]{0,126}$/.test(v)
    ? shownValue(v)
    : '(not a media type)';
}

function parseJson(body: Buffer, what: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    // JSON.parse's message quotes the text around the error: the document's content stays out of messages.
    throw unsupported(what, `not valid JSON (${body.length} bytes)`);
  }
  if (!isObject(v)) throw unsupported(what, 'not a JSON object');
  return v;
}

function parseDescriptor(v: unknown, what: string): Descriptor {
  if (!isObject(v)) throw unsupported(what, 'descriptor is not an object');
  const digest = parseImageDigest(v.digest, what).digest;
  const size = v.size;
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
    throw unsupported(what, `descriptor ${digest} has no valid size`);
  }
  const mediaType = typeof v.mediaType === 'string' ? v.mediaType : '';
  const d: Descriptor = { mediaType, digest, size };
  if (isObject(v.platform)) {
    const p = v.platform;
    if (typeof p.os === 'string' && typeof p.architecture === 'string') {
      d.platform = { os: p.os, architecture: p.architecture };
      if (typeof p.variant === 'string' && p.variant) d.platform.variant = p.variant;
    }
  }
  if (isObject(v.annotations)) {
    const a: Record<string, string> = {};
    for (const [k, val] of Object.entries(v.annotations)) if (typeof val === 'string') a[k] = val;
    d.annotations = a;
  }
  return d;
}

/**
 * Parses a manifest or index. `contentType` is the registry's Content-Type (or the descriptor's media type);
 * the body's own mediaType wins when present, and the shape decides when neither is given.
 */
export function parseManifestOrIndex(
  body: Buffer,
  contentType: string | undefined,
  what: string,
): ImageManifest | ImageIndex {
  const doc = parseJson(body, what);
  const declared =
    typeof doc.mediaType === 'string' ? doc.mediaType : (contentType?.split(';')[0]?.trim() ?? '');
  if (
    declared === MediaType.DockerManifestV1 ||
    declared === MediaType.DockerManifestV1Signed ||
    doc.schemaVersion === 1
  ) {
    throw unsupported(
      what,
      'Docker schema 1 manifests are not supported (deprecated; re-push the image with a current client)',
    );
  }
  const isIndex =
    declared === MediaType.OciIndex ||
    declared === MediaType.DockerManifestList ||
    (!declared && Array.isArray(doc.manifests));
  if (isIndex) {
    if (!Array.isArray(doc.manifests)) throw unsupported(what, 'index has no "manifests" array');
    return {
      kind: 'index',
      mediaType: declared || MediaType.OciIndex,
      manifests: doc.manifests.map((m, i) => parseDescriptor(m, `${what} manifests[${i}]`)),
    };
  }
  const isManifest =
    declared === MediaType.OciManifest ||
    declared === MediaType.DockerManifest ||
    ((!declared || declared === 'application/json') && isObject(doc.config) && Array.isArray(doc.layers));
  if (!isManifest)
    throw unsupported(what, `media type ${mediaTypeText(declared)} is not an image manifest or index`);
  if (!Array.isArray(doc.layers)) throw unsupported(what, 'manifest has no "layers" array');
  const config = parseDescriptor(doc.config, `${what} config`);
  if (
    config.mediaType &&
    config.mediaType !== MediaType.OciConfig &&
    config.mediaType !== MediaType.DockerConfig
  ) {
    throw unsupported(
      what,
      `config media type ${mediaTypeText(config.mediaType)} is not a container image (an artifact?)`,
    );
  }
  const layers = doc.layers.map((l, i) => {
    const d = parseDescriptor(l, `${what} layers[${i}]`);
    const compression = LAYER_TYPES[d.mediaType];
    if (compression === undefined)
      throw unsupported(what, `layer ${d.digest} has unsupported media type ${mediaTypeText(d.mediaType)}`);
    return { ...d, compression };
  });
  return { kind: 'manifest', mediaType: declared || MediaType.OciManifest, config, layers };
}

const ARCH_OF_NODE: Record<string, string> = {
  x64: 'amd64',
  arm64: 'arm64',
  arm: 'arm',
  ia32: '386',
  ppc64: 'ppc64le',
  s390x: 's390x',
  riscv64: 'riscv64',
};

/** The OCI platform of this host (Go GOARCH names, as image indexes use). */
export function hostPlatform(): Platform {
  const architecture = ARCH_OF_NODE[process.arch] ?? process.arch;
  const p: Platform = { os: 'linux', architecture };
  if (architecture === 'arm64') p.variant = 'v8';
  else if (architecture === 'arm') {
    const v = (process.config.variables as Record<string, unknown>).arm_version;
    p.variant = `v${typeof v === 'string' || typeof v === 'number' ? v : '7'}`;
  }
  return p;
}

function variantRank(want: Platform, have: Platform): number {
  // Exact variant first; arm64 images often omit "v8"; for 32-bit arm an older variant still runs.
  if ((have.variant ?? '') === (want.variant ?? '')) return 0;
  if (want.architecture === 'arm64' && (have.variant === undefined || have.variant === 'v8')) return 1;
  if (want.architecture === 'arm' && want.variant && have.variant) {
    const w = Number(want.variant.slice(1));
    const h = Number(have.variant.slice(1));
    if (Number.isFinite(w) && Number.isFinite(h) && h < w) return 2 + (w - h);
  }
  if (have.variant === undefined) return 10;
  return -1;
}

/** Picks the manifest for `platform` from an index (ignoring attestations), or throws UnsupportedImage. */
export function selectPlatformManifest(index: ImageIndex, platform: Platform, what: string): Descriptor {
  let best: { d: Descriptor; rank: number } | undefined;
  for (const d of index.manifests) {
    if (d.mediaType && d.mediaType !== MediaType.OciManifest && d.mediaType !== MediaType.DockerManifest)
      continue;
    const p = d.platform;
    if (!p || p.os !== platform.os || p.architecture !== platform.architecture) continue;
    const rank = variantRank(platform, p);
    if (rank < 0) continue;
    if (!best || rank < best.rank) best = { d, rank };
  }
  if (best) return best.d;
  const available = index.manifests
    .filter((d) => d.platform && d.platform.os !== 'unknown')
    .map(
      (d) =>
        `${d.platform!.os}/${d.platform!.architecture}${d.platform!.variant ? `/${d.platform!.variant}` : ''}`,
    );
  const want = `${platform.os}/${platform.architecture}${platform.variant ? `/${platform.variant}` : ''}`;
  throw unsupported(what, `no manifest for platform ${want} (available: ${available.join(', ') || 'none'})`);
}

/** The image config fields aenv uses, plus the rootfs diff ids. */
export interface ParsedImageConfig {
  config: ImageConfig;
  diffIds: string[];
  platform: Platform;
}

function stringArray(v: unknown): string[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v.filter((x): x is string => typeof x === 'string');
}

function keysOf(v: unknown): string[] {
  return isObject(v) ? Object.keys(v) : [];
}

export function parseImageConfig(body: Buffer, what: string): ParsedImageConfig {
  const doc = parseJson(body, what);
  const rootfs = doc.rootfs;
  if (!isObject(rootfs) || rootfs.type !== 'layers' || !Array.isArray(rootfs.diff_ids)) {
    throw unsupported(what, 'config has no rootfs.diff_ids of type "layers"');
  }
  const diffIds = rootfs.diff_ids.map((d, i) => parseImageDigest(d, `${what} rootfs.diff_ids[${i}]`).digest);
  const os = typeof doc.os === 'string' ? doc.os : 'linux';
  if (os !== 'linux')
    throw unsupported(
      what,
      `image OS is ${/^[\w.-]{1,32}$/.test(os) ? shownValue(os) : '(invalid)'}; only linux images can run`,
    );
  const platform: Platform = {
    os,
    architecture: typeof doc.architecture === 'string' ? doc.architecture : '',
  };
  if (typeof doc.variant === 'string' && doc.variant) platform.variant = doc.variant;
  const c = isObject(doc.config) ? doc.config : {};
  const labels: Record<string, string> = {};
  if (isObject(c.Labels))
    for (const [k, v] of Object.entries(c.Labels)) if (typeof v === 'string') labels[k] = v;
  const config: ImageConfig = {
    env: stringArray(c.Env) ?? [],
    exposedPorts: keysOf(c.ExposedPorts),
    volumes: keysOf(c.Volumes),
    labels,
  };
  if (typeof c.WorkingDir === 'string' && c.WorkingDir) config.workingDir = c.WorkingDir;
  if (typeof c.User === 'string' && c.User) config.user = c.User;
  const entrypoint = stringArray(c.Entrypoint);
  if (entrypoint) config.entrypoint = entrypoint;
  const cmd = stringArray(c.Cmd);
  if (cmd) config.cmd = cmd;
  return { config, diffIds, platform };
}
