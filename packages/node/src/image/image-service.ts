// The image subsystem's entry point: resolve → pull (registry or local layout) → unpack layers once into the
// content-addressed cache → hand out overlayfs lowerdirs; leases pin images; GC keeps the cache in budget.

import { randomUUID } from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Registry } from 'prom-client';
import type { StateDb } from '../state/db.js';
import { run } from '../util/exec.js';
import { mapLimit } from '../util/map-limit.js';
import { defaultDockerConfigDir, type BasicCredentials } from './credentials.js';
import { decompressLayer } from './decompress.js';
import { parseDigest, VerifyingStream } from './digest.js';
import { asImageError, ImageError } from './errors.js';
import {
  normalizeGcConfig,
  reconcileAtStartup,
  runGc,
  type GcConfig,
  type GcResult,
  type NormalizedGcConfig,
} from './gc.js';
import { idMapName, LayerStore } from './layer-store.js';
import { unpackLayer, type UnpackStats } from './layer-unpacker.js';
import {
  hostPlatform,
  MAX_CONFIG_BYTES,
  parseImageConfig,
  parseManifestOrIndex,
  selectPlatformManifest,
  type Descriptor,
  type ImageManifest,
  type Platform,
} from './manifest.js';
import { ImageMetadataStore, type Lease, type StoredImage } from './metadata-store.js';
import { ImageMetrics } from './metrics.js';
import { parseLocalReference } from './reference.js';
import { RegistryClient } from './registry-client.js';
import {
  disallowedSearchRegistries,
  normalizeResolverConfig,
  resolveReference,
  type NormalizedResolverConfig,
  type ResolvedReference,
  type ResolverConfig,
} from './resolver.js';
import { DEFAULT_RETRY, isTransient, type RetryPolicy } from './retry.js';
import { SingleFlight } from './single-flight.js';
import { SyncCoalescer } from './sync-coalescer.js';
import {
  extractOciArchive,
  fileStamp,
  OciLayoutSource,
  RegistrySource,
  type ImageSource,
} from './sources.js';
import type { PulledImage } from './types.js';
import type { Logger } from '../util/log.js';

/** The part of the node's logger (util/log.ts) the image service uses; its children log the same way. */
export interface ImageLogger extends Pick<Logger, 'debug' | 'info' | 'warn' | 'error'> {
  child(bindings: Record<string, unknown>): ImageLogger;
}

export interface ImageServiceOptions {
  /** `[image.cache].root_dir`. */
  rootDir: string;
  /** The node's state DB, with `imageMigrations` applied. */
  db: StateDb;
  resolver?: ResolverConfig;
  /** `[image.cache.gc]`. */
  gc?: GcConfig;
  /** `[image.cache].capacity_gb`; undefined = no capacity eviction (unreferenced layers are still deleted). */
  capacityGb?: number;
  /** Registries reached over plain HTTP ("127.0.0.1:5000"). */
  insecureRegistries?: readonly string[];
  /** Registry → API base URL (mirrors, or registries whose API host differs from their name). */
  registryEndpoints?: Readonly<Record<string, string>>;
  /** Where docker's config.json is; default `$DOCKER_CONFIG` or `~/.docker`; null = never read credentials. */
  dockerConfigDir?: string | null;
  /** First host uid/gid of the sandboxes' user-namespace range (`[runtime].uid_map_host_start`). */
  uidShift?: number;
  uidRangeSize?: number;
  logger: ImageLogger;
  metricsRegistry?: Registry;
  /** Layers downloaded and unpacked at once per pull. */
  maxConcurrentLayers?: number;
  retry?: RetryPolicy;
  /** Flush a layer to disk (syncfs) before recording it, so a power loss cannot leave a truncated layer that
   *  the metadata calls complete. Default true. */
  syncLayers?: boolean;
  pythonPath?: string;
  zstdPath?: string;
  /** `[image.limits]`: what one pull may unpack (a zip bomb stops at these, docs/images.md#limits). */
  limits?: ImageLimits;
  /** Platform to pick from multi-platform images; default: this host. */
  platform?: Platform;
  /** Clock (ms since epoch), injectable for GC tests. */
  now?: () => number;
}

export interface ImageLimits {
  /** `max_layer_mb` in bytes: uncompressed size of one layer. */
  maxLayerBytes: number;
  /** `max_image_mb` in bytes: uncompressed size of one image's layers, and of an oci-archive file. */
  maxImageBytes: number;
  /** `max_layer_entries`: files, directories and links of one layer. */
  maxLayerEntries: number;
}

const MIB = 1024 * 1024;
export const DEFAULT_IMAGE_LIMITS: ImageLimits = {
  maxLayerBytes: 16384 * MIB,
  maxImageBytes: 32768 * MIB,
  maxLayerEntries: 500_000,
};

/** Uncompressed bytes a pull may still unpack, shared by its concurrent layer downloads. */
interface ImageBudget {
  remaining: number;
}

export interface PullProgress {
  type: 'resolved' | 'layer-cached' | 'layer-start' | 'layer-done';
  reference: string;
  manifestDigest?: string;
  layerDigest?: string;
  size?: number;
}

export interface PullOptions {
  signal?: AbortSignal;
  onProgress?: (p: PullProgress) => void;
  /** Re-check a tag with the registry even when the cache already has an image for it. */
  refresh?: boolean;
  /** Credentials for this pull (E2B fromImageRegistry {type: "registry"}). */
  credentials?: BasicCredentials;
}

const DEFAULT_UID_SHIFT = 100000;
const DEFAULT_UID_RANGE = 65536;

function layersOf(img: StoredImage, store: LayerStore): PulledImage['layers'] {
  return img.layers.map((l) => ({ diffId: l.diffId, dir: store.layerDir(l.diffId), size: 0 }));
}

function mib(bytes: number): number {
  return Math.round((bytes / MIB) * 100) / 100;
}

function isCodeTransient(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException).code ?? (e as { cause?: NodeJS.ErrnoException }).cause?.code;
  return (
    typeof code === 'string' &&
    [
      'ECONNRESET',
      'EPIPE',
      'ETIMEDOUT',
      'UND_ERR_SOCKET',
      'UND_ERR_BODY_TIMEOUT',
      'UND_ERR_CLOSED',
      'ECONNABORTED',
    ].includes(code)
  );
}

export class ImageService {
  readonly resolverConfig: NormalizedResolverConfig;
  readonly gcConfig: NormalizedGcConfig;
  readonly metrics: ImageMetrics;
  private readonly store: ImageMetadataStore;
  private readonly layers: LayerStore;
  private readonly client: RegistryClient;
  private readonly log: ImageLogger;
  private readonly now: () => number;
  private readonly uidShift: number;
  private readonly uidRange: number;
  private readonly platform: Platform;
  private readonly retry: RetryPolicy;
  private readonly limits: { layerBytes: number; imageBytes: number; layerEntries: number };
  private readonly imageFlights = new SingleFlight<StoredImage>();
  private readonly layerFlights = new SingleFlight<void>();
  private readonly syncer: SyncCoalescer;
  private timer: NodeJS.Timeout | undefined;
  private gcRunning: Promise<GcResult> | undefined;
  private initialized = false;
  private closed = false;

  constructor(private readonly opts: ImageServiceOptions) {
    this.resolverConfig = normalizeResolverConfig(opts.resolver);
    this.gcConfig = normalizeGcConfig(opts.gc);
    this.uidShift = opts.uidShift ?? DEFAULT_UID_SHIFT;
    this.uidRange = opts.uidRangeSize ?? DEFAULT_UID_RANGE;
    if (!Number.isSafeInteger(this.uidShift) || this.uidShift < 0)
      throw new Error(`uidShift must be a non-negative integer`);
    if (!Number.isSafeInteger(this.uidRange) || this.uidRange < 1)
      throw new Error(`uidRangeSize must be a positive integer`);
    if (opts.capacityGb !== undefined && !(opts.capacityGb > 0))
      throw new Error(`image.cache.capacity_gb must be > 0`);
    this.log = opts.logger;
    if (opts.resolver?.convertStandardOci === false) {
      this.log.warn(
        {},
        'image.resolver.convert_standard_oci = false is ignored: the container driver always unpacks standard OCI layers',
      );
    }
    this.now = opts.now ?? Date.now;
    this.platform = opts.platform ?? hostPlatform();
    this.retry = opts.retry ?? DEFAULT_RETRY;
    const limits = opts.limits ?? DEFAULT_IMAGE_LIMITS;
    this.limits = {
      layerBytes: limits.maxLayerBytes,
      imageBytes: limits.maxImageBytes,
      layerEntries: limits.maxLayerEntries,
    };
    this.metrics = new ImageMetrics(opts.metricsRegistry);
    const idMap = idMapName(this.uidShift, this.uidRange);
    this.store = new ImageMetadataStore(opts.db, idMap);
    this.layers = new LayerStore(opts.rootDir, idMap);
    // syncfs of the cache's filesystem (coreutils `sync -f`): one call flushes every finished unpack.
    this.syncer = new SyncCoalescer(async () => {
      await run('sync', ['-f', this.layers.tmpDir], { timeoutMs: 600_000 });
    });
    const dockerConfigDir =
      opts.dockerConfigDir === null ? undefined : (opts.dockerConfigDir ?? defaultDockerConfigDir());
    this.client = new RegistryClient({
      insecureRegistries: opts.insecureRegistries ?? [],
      ...(opts.registryEndpoints ? { endpoints: opts.registryEndpoints } : {}),
      ...(dockerConfigDir ? { dockerConfigDir } : {}),
      retry: this.retry,
      logger: this.log,
    });
  }

  /**
   * Prepares the cache directory, drops leftovers of a previous process (temporary unpacks, pull leases) and
   * reconciles metadata with disk. Call once before anything else.
   */
  async init(): Promise<void> {
    await this.layers.init();
    const stale = this.store.releaseLeasesWithPrefix('pull:');
    if (stale > 0) this.log.info({ leases: stale }, 'released pull leases of a previous run');
    // Metadata rows whose directory vanished are dropped and directories without metadata deleted. A failure
    // is logged, not fatal: pulls still work, and every GC pass reconciles again before deleting anything.
    await reconcileAtStartup({ store: this.store, layers: this.layers, logger: this.log });
    this.initialized = true;
    this.updateCacheBytes();
  }

  /** The image a template build uses when it names none (`default_image`). */
  defaultImage(): string {
    return this.resolverConfig.defaultImage;
  }

  /** The references a pull of `ref` would try, in order; throws InvalidReference when none is allowed. */
  resolve(ref: string): ResolvedReference[] {
    return resolveReference(this.resolverConfig, ref);
  }

  /** Pulls (or finds in the cache) an image and returns its unpacked layers and config. */
  async pull(ref: string, opts: PullOptions = {}): Promise<PulledImage> {
    this.assertInit();
    const started = performance.now();
    try {
      const img = await this.pullResolved(ref, opts);
      this.metrics.pullDuration.observe({ result: 'ok' }, (performance.now() - started) / 1000);
      return img;
    } catch (e) {
      this.metrics.pullDuration.observe({ result: 'error' }, (performance.now() - started) / 1000);
      if (opts.signal?.aborted) throw e;
      throw asImageError(e, `pulling ${ref}`);
    }
  }

  private async pullResolved(ref: string, opts: PullOptions): Promise<PulledImage> {
    const candidates = this.resolve(ref);
    if (!opts.refresh) {
      // Any candidate already in the cache wins before a registry is asked about an earlier one.
      for (const c of candidates) {
        const cached = this.cachedRegistryCandidate(c);
        if (cached) return this.hit(cached, c.canonical);
      }
    }
    if (candidates.length === 1) return this.pullCandidate(candidates[0]!, opts);
    const failures: { registry: string; error: ImageError }[] = [];
    for (const c of candidates) {
      try {
        return await this.pullCandidate(c, opts);
      } catch (e) {
        const err = asImageError(e, `pulling ${c.canonical}`);
        if (opts.signal?.aborted || !['NotFound', 'Unauthorized', 'Unreachable'].includes(err.reason))
          throw err;
        failures.push({
          registry: c.reference.transport === 'registry' ? c.reference.registry : c.canonical,
          error: err,
        });
        this.log.debug(
          { candidate: c.canonical, err: err.message },
          'image candidate failed; trying the next registry',
        );
      }
    }
    const notAllowed = disallowedSearchRegistries(this.resolverConfig);
    const kind = failures.every((f) => f.error.reason === 'Unreachable') ? 'Unreachable' : 'NotFound';
    throw new ImageError(
      kind,
      `image "${ref}" was not found: tried ${failures.map((f) => `${f.registry} (${f.error.reason}: ${f.error.message})`).join('; ')}` +
        (notAllowed.length > 0 ? `; not allowed by allowed_registries: ${notAllowed.join(', ')}` : ''),
    );
  }

  private async pullCandidate(c: ResolvedReference, opts: PullOptions): Promise<PulledImage> {
    const ref = c.reference;
    if (ref.transport === 'registry') {
      const source = new RegistrySource(this.client, ref, opts.credentials, c.canonical);
      return this.pullFromSource(source, c.canonical, null, opts);
    }
    const local = c.local!;
    if (ref.transport === 'oci') {
      return this.pullFromSource(new OciLayoutSource(local, ref.tag, c.canonical), c.canonical, null, opts);
    }
    // oci-archive: unpacking the archive to read its index is costly, so a cached pull of the same file
    // (same inode, size and mtime) is reused without opening it.
    const stamp = await fileStamp(local).catch((e: unknown) => {
      throw e instanceof ImageError ? new ImageError(e.reason, `${c.canonical}: ${e.message}`) : e;
    });
    if (!opts.refresh) {
      const cached = this.cachedByRef(c.canonical, stamp);
      if (cached) return this.hit(cached, c.canonical);
    }
    const tmp = await this.layers.makeTmp('oci-archive');
    try {
      await extractOciArchive(local, c.canonical, tmp, this.limits.imageBytes, opts.signal);
      return await this.pullFromSource(
        new OciLayoutSource({ root: tmp, components: [] }, ref.tag, c.canonical),
        c.canonical,
        stamp,
        opts,
      );
    } finally {
      await this.layers.removeTmp(tmp);
    }
  }

  private cachedRegistryCandidate(c: ResolvedReference): StoredImage | undefined {
    const ref = c.reference;
    if (ref.transport !== 'registry') return undefined;
    // A digest reference may name an index; its platform manifest was recorded under the reference.
    return this.cachedByRef(c.canonical, null) ?? (ref.digest ? this.completeImage(ref.digest) : undefined);
  }

  private hit(img: StoredImage, reference: string): PulledImage {
    this.store.touch(img.manifestDigest, this.now());
    this.metrics.hits.inc({ kind: 'image' });
    return this.toPulled(img, reference);
  }

  private cachedByRef(reference: string, stamp: string | null): StoredImage | undefined {
    const r = this.store.getRef(reference);
    if (!r || (stamp !== null && r.sourceStamp !== stamp)) return undefined;
    return this.completeImage(r.manifestDigest);
  }

  /** The stored image if all of its layers are on disk for this id-map. */
  private completeImage(manifestDigest: string): StoredImage | undefined {
    const img = this.store.getImage(manifestDigest);
    if (!img) return undefined;
    return img.layers.every((l) => this.layerPresent(l.diffId)) ? img : undefined;
  }

  private layerPresent(diffId: string): boolean {
    return this.store.getLayer(diffId) !== undefined && this.layers.has(diffId);
  }

  private async pullFromSource(
    source: ImageSource,
    canonical: string,
    stamp: string | null,
    opts: PullOptions,
  ): Promise<PulledImage> {
    const root = await source.fetchRoot(opts.signal);
    let doc = parseManifestOrIndex(root.body, root.contentType, source.name);
    let manifestDigest = root.digest;
    if (doc.kind === 'index') {
      const d = selectPlatformManifest(doc, this.platform, source.name);
      const body = await source.fetchManifest(d, opts.signal);
      doc = parseManifestOrIndex(body, d.mediaType || undefined, `${source.name} (${d.digest})`);
      if (doc.kind !== 'manifest')
        throw new ImageError('UnsupportedImage', `${source.name}: nested image indexes are not supported`);
      manifestDigest = d.digest;
    }
    const manifest = doc;
    opts.onProgress?.({ type: 'resolved', reference: canonical, manifestDigest });
    const img = await this.imageFlights.run(
      manifestDigest,
      (signal) => this.ensureImage(source, manifestDigest, manifest, signal, canonical, opts.onProgress),
      opts.signal,
    );
    const now = this.now();
    this.store.setRef(canonical, manifestDigest, stamp, now);
    this.store.touch(manifestDigest, now);
    return this.toPulled(img, canonical);
  }

  private async ensureImage(
    source: ImageSource,
    manifestDigest: string,
    manifest: ImageManifest,
    signal: AbortSignal,
    reference: string,
    onProgress: PullOptions['onProgress'],
  ): Promise<StoredImage> {
    const complete = this.completeImage(manifestDigest);
    if (complete) {
      this.metrics.hits.inc({ kind: 'image' });
      return complete;
    }
    this.metrics.misses.inc({ kind: 'image' });
    let stored = this.store.getImage(manifestDigest);
    const existed = stored !== undefined;
    if (!stored) {
      const raw = await source.fetchBlob(manifest.config, MAX_CONFIG_BYTES, signal);
      const parsed = parseImageConfig(raw, `${source.name} config ${manifest.config.digest}`);
      if (parsed.diffIds.length !== manifest.layers.length) {
        throw new ImageError(
          'UnsupportedImage',
          `${source.name}: config lists ${parsed.diffIds.length} diff ids for ${manifest.layers.length} layers`,
        );
      }
      if (parsed.platform.architecture && parsed.platform.architecture !== this.platform.architecture) {
        throw new ImageError(
          'UnsupportedImage',
          `${source.name}: image is for ${parsed.platform.os}/${parsed.platform.architecture}, this host runs ${this.platform.os}/${this.platform.architecture}`,
        );
      }
      const now = this.now();
      stored = {
        manifestDigest,
        configDigest: manifest.config.digest,
        config: parsed.config,
        rawConfig: raw.toString('utf8'),
        layers: manifest.layers.map((l, i) => ({
          diffId: parsed.diffIds[i]!,
          digest: l.digest,
          mediaType: l.mediaType,
          size: l.size,
        })),
        platform: `${parsed.platform.os}/${parsed.platform.architecture}${parsed.platform.variant ? `/${parsed.platform.variant}` : ''}`,
        createdAt: now,
        lastUsedAt: now,
      };
    }
    const image = stored;
    const holder = `pull:${randomUUID()}`;
    // Record the image (so GC sees its layers as referenced) and pin it, before touching any layer.
    this.store.transaction(() => {
      this.store.putImage(image);
      this.store.acquireLease(holder, manifestDigest, this.now());
    });
    let ok = false;
    const cachedBytes = image.layers.reduce(
      (sum, l) => sum + (this.layerPresent(l.diffId) ? (this.store.getLayer(l.diffId)?.diskBytes ?? 0) : 0),
      0,
    );
    const budget: ImageBudget = { remaining: this.limits.imageBytes - cachedBytes };
    try {
      await mapLimit(image.layers, this.opts.maxConcurrentLayers ?? 3, async (l, i) => {
        const desc = manifest.layers[i]!;
        if (this.layerPresent(l.diffId)) {
          this.metrics.hits.inc({ kind: 'layer' });
          onProgress?.({
            type: 'layer-cached',
            reference,
            manifestDigest,
            layerDigest: desc.digest,
            size: desc.size,
          });
          return;
        }
        await this.layerFlights.run(
          l.diffId,
          (s) => this.downloadLayer(source, desc, l.diffId, s, reference, manifestDigest, onProgress, budget),
          signal,
        );
      });
      ok = true;
    } finally {
      this.store.releaseLease(holder);
      if (!ok && !existed && !this.store.isLeased(manifestDigest)) {
        // Leave no half-pulled image behind; layers finished so far stay until GC (a retry reuses them).
        this.store.deleteImage(manifestDigest);
      }
      this.updateCacheBytes();
    }
    return image;
  }

  private async downloadLayer(
    source: ImageSource,
    desc: Descriptor,
    diffId: string,
    signal: AbortSignal,
    reference: string,
    manifestDigest: string,
    onProgress: PullOptions['onProgress'],
    budget: ImageBudget,
  ): Promise<void> {
    if (this.layerPresent(diffId)) return;
    this.metrics.misses.inc({ kind: 'layer' });
    onProgress?.({
      type: 'layer-start',
      reference,
      manifestDigest,
      layerDigest: desc.digest,
      size: desc.size,
    });
    const log = this.log.child({ layer: desc.digest, image: reference });
    for (let attempt = 0; ; attempt++) {
      const blob = await source.openBlob(desc, signal);
      const tmp = await this.layers.makeTmp(parseDigest(diffId).hex.slice(0, 16));
      const unpacked = { bytes: 0 };
      try {
        let stats: UnpackStats | undefined;
        await pipeline(
          blob,
          new VerifyingStream(
            { digest: desc.digest, size: desc.size },
            `layer ${desc.digest} of ${source.name}`,
          ),
          (src: AsyncIterable<Buffer>) =>
            decompressLayer(src, this.opts.zstdPath ? { zstdPath: this.opts.zstdPath } : {}),
          (src: AsyncIterable<Buffer>) =>
            this.capUncompressed(src, budget, unpacked, `layer ${desc.digest} of ${source.name}`),
          new VerifyingStream(
            { digest: diffId },
            `uncompressed layer ${desc.digest} of ${source.name} (diff id)`,
          ),
          async (src: AsyncIterable<Buffer>) => {
            stats = await unpackLayer(src, tmp, {
              idMap: { hostStart: this.uidShift, size: this.uidRange },
              maxEntries: this.limits.layerEntries,
              signal,
              ...(this.opts.pythonPath ? { python: this.opts.pythonPath } : {}),
              onWarning: (m) => log.warn({}, m),
            });
          },
          { signal },
        );
        if (this.opts.syncLayers ?? true) await this.syncer.sync();
        // Rename and record in one tick: GC never sees a committed directory without its row.
        this.layers.commitSync(tmp, diffId);
        this.store.putLayer(diffId, stats!.diskBytes, this.now());
        log.debug({ entries: stats!.entries, bytes: stats!.diskBytes }, 'layer unpacked');
        onProgress?.({
          type: 'layer-done',
          reference,
          manifestDigest,
          layerDigest: desc.digest,
          size: desc.size,
        });
        return;
      } catch (e) {
        blob.destroy();
        budget.remaining += unpacked.bytes; // a retry counts its bytes again
        await this.layers.removeTmp(tmp).catch(() => {});
        if (signal.aborted) throw signal.reason ?? e;
        const err =
          e instanceof ImageError
            ? e
            : isCodeTransient(e)
              ? new ImageError(
                  'Unreachable',
                  `layer ${desc.digest} of ${source.name}: download interrupted: ${(e as Error).message}`,
                  {
                    cause: e,
                    transient: true,
                  },
                )
              : asImageError(e, `unpacking layer ${desc.digest} of ${source.name}`);
        if (!isTransient(err) || attempt >= this.retry.retries) throw err;
        const delay = Math.round(this.retry.baseDelayMs * 2 ** attempt * (1 + Math.random() * 0.5));
        log.warn(
          { err: err.message, attempt: attempt + 1, delayMs: delay },
          'layer download failed; retrying',
        );
        await sleep(delay, undefined, { signal });
      }
    }
  }

  /** Passes a layer's uncompressed tar through, failing (TooLarge) once it exceeds a layer or image limit. */
  private async *capUncompressed(
    src: AsyncIterable<Buffer>,
    budget: ImageBudget,
    unpacked: { bytes: number },
    what: string,
  ): AsyncGenerator<Buffer> {
    for await (const chunk of src) {
      unpacked.bytes += chunk.length;
      budget.remaining -= chunk.length;
      if (unpacked.bytes > this.limits.layerBytes) {
        throw new ImageError(
          'TooLarge',
          `${what} is larger than ${mib(this.limits.layerBytes)} MiB uncompressed (image.limits.max_layer_mb)`,
        );
      }
      if (budget.remaining < 0) {
        throw new ImageError(
          'TooLarge',
          `the image's layers are larger than ${mib(this.limits.imageBytes)} MiB uncompressed (image.limits.max_image_mb)`,
        );
      }
      yield chunk;
    }
  }

  private toPulled(img: StoredImage, reference: string): PulledImage {
    const sizes = new Map<string, number>();
    for (const l of img.layers) sizes.set(l.diffId, this.store.getLayer(l.diffId)?.diskBytes ?? 0);
    return {
      reference,
      manifestDigest: img.manifestDigest,
      configDigest: img.configDigest,
      platform: img.platform,
      layers: layersOf(img, this.layers).map((l) => ({ ...l, size: sizes.get(l.diffId) ?? 0 })),
      config: img.config,
    };
  }

  /**
   * A cached, complete image by manifest digest ("sha256:…") or reference (resolved like pull, without
   * network); undefined when not cached. Counts as a use for LRU.
   */
  get(refOrDigest: string): PulledImage | undefined {
    this.assertInit();
    const img = this.lookup(refOrDigest);
    if (!img) return undefined;
    this.store.touch(img.image.manifestDigest, this.now());
    return this.toPulled(img.image, img.reference);
  }

  private lookup(refOrDigest: string): { image: StoredImage; reference: string } | undefined {
    const s = refOrDigest.trim();
    if (/^[a-z0-9]+:[0-9a-f]+$/.test(s) && !parseLocalReference(s)) {
      try {
        parseDigest(s);
      } catch (e) {
        throw new ImageError('InvalidReference', `invalid digest "${s}": ${(e as Error).message}`);
      }
      const image = this.completeImage(s);
      return image ? { image, reference: this.store.refsOf(s)[0] ?? s } : undefined;
    }
    for (const c of this.resolve(s)) {
      if (c.reference.transport === 'registry' && c.reference.digest) {
        const image = this.completeImage(c.reference.digest);
        if (image) return { image, reference: c.canonical };
        continue;
      }
      const r = this.store.getRef(c.canonical);
      const image = r ? this.completeImage(r.manifestDigest) : undefined;
      if (image) return { image, reference: c.canonical };
    }
    return undefined;
  }

  /**
   * Pins an image (by manifest digest or reference) for `holder` ("sandbox:<id>", "template:<id>"): a leased
   * image is never evicted and its layers never deleted. A holder holds one lease; acquiring again moves it.
   * Returns the image; throws NotFound when it is not in the cache.
   */
  acquireLease(holder: string, manifestDigestOrRef: string): PulledImage {
    this.assertInit();
    if (!/^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,255}$/.test(holder)) {
      throw new ImageError('Internal', `invalid lease holder "${holder}" (use e.g. "sandbox:<id>")`);
    }
    const found = this.lookup(manifestDigestOrRef);
    if (!found)
      throw new ImageError('NotFound', `image ${manifestDigestOrRef} is not in the cache; pull it first`);
    const now = this.now();
    this.store.acquireLease(holder, found.image.manifestDigest, now);
    this.store.touch(found.image.manifestDigest, now);
    return this.toPulled(found.image, found.reference);
  }

  /** Drops the holder's lease (no-op when it has none). The image's idle time starts now. */
  releaseLease(holder: string): void {
    this.assertInit();
    const digest = this.store.releaseLease(holder);
    if (digest) this.store.touch(digest, this.now());
  }

  listLeases(): Lease[] {
    return this.store.listLeases();
  }

  /** One GC pass now (waits for a running one instead of starting a second). */
  async gcOnce(): Promise<GcResult> {
    this.assertInit();
    if (this.gcRunning) return this.gcRunning;
    this.gcRunning = runGc({
      store: this.store,
      layers: this.layers,
      cfg: this.gcConfig,
      capacityBytes: this.opts.capacityGb === undefined ? undefined : this.opts.capacityGb * 1024 ** 3,
      now: this.now(),
      metrics: this.metrics,
      logger: this.log,
    }).finally(() => {
      this.gcRunning = undefined;
    });
    return this.gcRunning;
  }

  /** Starts the background GC timer (when `[image.cache.gc].enabled`); it does not keep the process alive. */
  start(): void {
    this.assertInit();
    if (!this.gcConfig.enabled || this.timer) return;
    this.timer = setInterval(() => {
      this.gcOnce().catch((e: unknown) =>
        this.log.error({ err: (e as Error).message }, 'image cache GC failed'),
      );
    }, this.gcConfig.intervalSecs * 1000);
    this.timer.unref();
  }

  /** Stops the GC timer, waits for a running pass, and closes registry connections. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.gcRunning) await this.gcRunning.catch(() => {});
    if (!this.closed) {
      this.closed = true;
      await this.client.close();
    }
  }

  /** Sum of the cached layers' sizes (bytes). */
  cacheBytes(): number {
    return this.store.listLayers().reduce((s, l) => s + l.diskBytes, 0);
  }

  private updateCacheBytes(): void {
    this.metrics.cacheBytes.set(this.cacheBytes());
  }

  private assertInit(): void {
    if (!this.initialized) throw new Error('ImageService.init() must be called first');
  }
}
