// `[image.cache.gc]`: reconcile metadata with disk (fail closed), evict least-recently-used unleased images
// when over capacity, then delete layers that no image references.
//
// Every decision and the matching metadata change + rename-to-trash happen in one synchronous block, so a pull
// running concurrently (which records its image row before it looks at layers) can never lose a layer it is
// about to use. The slow recursive deletes happen afterwards, on directories already out of the cache.

import type { ImageMetadataStore } from './metadata-store.js';
import type { LayerStore } from './layer-store.js';
import type { ImageMetrics } from './metrics.js';

export interface GcConfig {
  enabled?: boolean;
  /** 0 means the default (1800), as in the reference. */
  intervalSecs?: number;
  minAgeSecs?: number;
  highWatermarkRatio?: number;
  lowWatermarkRatio?: number;
}

export type NormalizedGcConfig = Required<GcConfig>;

export function normalizeGcConfig(cfg: GcConfig = {}): NormalizedGcConfig {
  const high = cfg.highWatermarkRatio ?? 0.95;
  const low = cfg.lowWatermarkRatio ?? 0.7;
  for (const [k, v] of [
    ['high_watermark_ratio', high],
    ['low_watermark_ratio', low],
  ] as const) {
    if (!Number.isFinite(v) || v <= 0 || v > 1)
      throw new Error(`image.cache.gc.${k} must be in (0, 1], got ${v}`);
  }
  if (low > high)
    throw new Error(`image.cache.gc.low_watermark_ratio (${low}) must be <= high_watermark_ratio (${high})`);
  const minAge = cfg.minAgeSecs ?? 600;
  if (!Number.isFinite(minAge) || minAge < 0)
    throw new Error(`image.cache.gc.min_age_secs must be >= 0, got ${minAge}`);
  const interval = cfg.intervalSecs ?? 1800;
  if (!Number.isFinite(interval) || interval < 0)
    throw new Error(`image.cache.gc.interval_secs must be >= 0, got ${interval}`);
  return {
    enabled: cfg.enabled ?? true,
    intervalSecs: interval === 0 ? 1800 : interval,
    minAgeSecs: minAge,
    highWatermarkRatio: high,
    lowWatermarkRatio: low,
  };
}

export interface GcResult {
  /** False when reconcile failed and nothing was deleted. */
  ran: boolean;
  error?: string;
  /** Layer rows whose directory had disappeared (metadata fixed). */
  droppedRows: number;
  /** Directories under layers/ with no metadata (deleted). */
  orphanDirs: number;
  /** Manifest digests of evicted images, least recently used first. */
  evicted: string[];
  deletedLayers: number;
  usageBefore: number;
  usageAfter: number;
}

interface GcDeps {
  store: ImageMetadataStore;
  layers: LayerStore;
  cfg: NormalizedGcConfig;
  capacityBytes: number | undefined;
  now: number;
  metrics: ImageMetrics;
  logger: {
    info(o: object, m?: string): void;
    warn(o: object, m?: string): void;
    error(o: object, m?: string): void;
  };
}

/** Bytes of layers that images keep alive; `images` is the set that would remain. */
function referencedBytes(deps: GcDeps, keep: (digest: string) => boolean): number {
  const sizes = new Map(
    deps.store
      .listLayers()
      .filter((l) => l.idMap === deps.store.idMap)
      .map((l) => [l.diffId, l.diskBytes]),
  );
  const seen = new Set<string>();
  let total = 0;
  for (const img of deps.store.listImages()) {
    if (!keep(img.manifestDigest)) continue;
    for (const l of img.layers) {
      if (seen.has(l.diffId)) continue;
      seen.add(l.diffId);
      total += sizes.get(l.diffId) ?? 0;
    }
  }
  return total;
}

function totalBytes(deps: GcDeps): number {
  return deps.store.listLayers().reduce((s, l) => s + l.diskBytes, 0);
}

/**
 * Compares layer rows with layer directories (synchronously, so no pull can commit in between). Rows without a
 * directory are dropped; directories without a row are returned as orphans. Throws if the disk cannot be read.
 */
export function reconcile(
  store: ImageMetadataStore,
  layers: LayerStore,
): { droppedRows: number; orphans: string[] } {
  const rows = store.listLayers();
  const disk = layers.listOnDiskSync();
  const onDisk = new Set(disk.filter((d) => d.layer).map((d) => `${d.idMap}/${d.name}`));
  const rowKeys = new Set<string>();
  let droppedRows = 0;
  for (const r of rows) {
    const key = `${r.idMap}/${layers.dirName(r.diffId)}`;
    if (onDisk.has(key)) rowKeys.add(key);
    else {
      store.deleteLayer(r.idMap, r.diffId);
      droppedRows++;
    }
  }
  const orphans = disk.filter((d) => !d.layer || !rowKeys.has(`${d.idMap}/${d.name}`)).map((d) => d.path);
  return { droppedRows, orphans };
}

/** Startup reconcile: fixes metadata and deletes orphan directories (left by a crash between rename and
 *  metadata write, or by deletes interrupted before their rename). Never throws; returns false on failure. */
export async function reconcileAtStartup(deps: {
  store: ImageMetadataStore;
  layers: LayerStore;
  logger: { warn(o: object, m?: string): void; error(o: object, m?: string): void };
}): Promise<boolean> {
  let orphans: string[];
  try {
    const r = reconcile(deps.store, deps.layers);
    orphans = r.orphans;
    if (r.droppedRows > 0)
      deps.logger.warn(
        { rows: r.droppedRows },
        'image cache: layer directories were missing; metadata dropped',
      );
  } catch (e) {
    deps.logger.error(
      { err: (e as Error).message },
      'image cache: startup reconcile failed; GC stays off until it succeeds',
    );
    return false;
  }
  const trash = orphans
    .map((p) => deps.layers.moveToTrashSync(p))
    .filter((p): p is string => p !== undefined);
  if (trash.length > 0)
    deps.logger.warn({ dirs: trash.length }, 'image cache: deleting layer directories without metadata');
  for (const t of trash) await deps.layers.removeTrash(t).catch(() => {});
  return true;
}

export async function runGc(deps: GcDeps): Promise<GcResult> {
  const { store, layers, cfg, logger } = deps;
  const result: GcResult = {
    ran: false,
    droppedRows: 0,
    orphanDirs: 0,
    evicted: [],
    deletedLayers: 0,
    usageBefore: 0,
    usageAfter: 0,
  };

  // 1. Reconcile (fail closed: any error here and nothing is deleted).
  let orphans: string[];
  try {
    const r = reconcile(store, layers);
    result.droppedRows = r.droppedRows;
    orphans = r.orphans;
  } catch (e) {
    result.error = (e as Error).message;
    deps.metrics.gcRuns.inc({ result: 'reconcile_failed' });
    logger.error({ err: result.error }, 'image cache GC: reconcile failed; nothing deleted');
    return result;
  }
  if (result.droppedRows > 0)
    logger.warn(
      { rows: result.droppedRows },
      'image cache GC: layer directories were missing; metadata dropped',
    );

  const trash: string[] = [];
  try {
    result.usageBefore = totalBytes(deps);

    // 2. Capacity eviction, LRU, never leased or recently used images.
    if (
      deps.capacityBytes !== undefined &&
      result.usageBefore > deps.capacityBytes * cfg.highWatermarkRatio
    ) {
      const target = deps.capacityBytes * cfg.lowWatermarkRatio;
      const leased = store.leasedDigests();
      const idleBefore = deps.now - cfg.minAgeSecs * 1000;
      const candidates = store
        .listImages()
        .filter((i) => !leased.has(i.manifestDigest) && i.lastUsedAt <= idleBefore)
        .sort((a, b) => a.lastUsedAt - b.lastUsedAt || a.createdAt - b.createdAt);
      const removed = new Set<string>();
      const otherMaps = store
        .listLayers()
        .filter((l) => l.idMap !== store.idMap)
        .reduce((s, l) => s + l.diskBytes, 0);
      let projected = referencedBytes(deps, () => true) + otherMaps;
      for (const img of candidates) {
        if (projected <= target) break;
        removed.add(img.manifestDigest);
        store.deleteImage(img.manifestDigest);
        result.evicted.push(img.manifestDigest);
        deps.metrics.evictions.inc();
        projected = referencedBytes(deps, (d) => !removed.has(d)) + otherMaps;
      }
      if (projected > target) {
        logger.warn(
          { usage: result.usageBefore, capacity: deps.capacityBytes, projected },
          'image cache GC: still above the low watermark; remaining images are leased or used within min_age_secs',
        );
      }
    }

    // 3. Sweep: layers no image references (layers of another id-map only while a leased image uses them).
    const leased = store.leasedDigests();
    const current = new Set<string>();
    const other = new Set<string>();
    for (const img of store.listImages()) {
      for (const l of img.layers) {
        current.add(l.diffId);
        if (leased.has(img.manifestDigest)) other.add(l.diffId);
      }
    }
    for (const row of store.listLayers()) {
      const keep = row.idMap === store.idMap ? current.has(row.diffId) : other.has(row.diffId);
      if (keep) continue;
      store.deleteLayer(row.idMap, row.diffId);
      const moved = layers.moveToTrashSync(layers.layerDir(row.diffId, row.idMap));
      if (moved) trash.push(moved);
      result.deletedLayers++;
      deps.metrics.layersDeleted.inc();
    }
    for (const path of orphans) {
      const moved = layers.moveToTrashSync(path);
      if (moved) {
        trash.push(moved);
        result.orphanDirs++;
      }
    }
    result.usageAfter = totalBytes(deps);
    deps.metrics.cacheBytes.set(result.usageAfter);
    result.ran = true;
  } catch (e) {
    result.error = (e as Error).message;
    deps.metrics.gcRuns.inc({ result: 'error' });
    logger.error({ err: result.error }, 'image cache GC failed');
  }

  for (const t of trash) {
    try {
      await layers.removeTrash(t);
    } catch (e) {
      logger.warn(
        { err: (e as Error).message, path: t },
        'image cache GC: could not delete; retried at next start',
      );
    }
  }
  if (result.ran) {
    deps.metrics.gcRuns.inc({ result: 'ok' });
    if (result.evicted.length > 0 || result.deletedLayers > 0 || result.orphanDirs > 0) {
      logger.info(
        {
          evicted: result.evicted.length,
          deletedLayers: result.deletedLayers,
          orphanDirs: result.orphanDirs,
          usageBefore: result.usageBefore,
          usageAfter: result.usageAfter,
        },
        'image cache GC',
      );
    }
  }
  return result;
}
