// Typed access to the image tables (see migrations.ts). Synchronous: better-sqlite3 calls are short, and
// running each compound change in one synchronous block keeps it atomic with respect to the event loop too.

import type { StateDb } from '../state/db.js';
import type { ImageConfig } from './types.js';

export interface StoredLayerRef {
  /** Uncompressed digest (the cache key). */
  diffId: string;
  /** Blob digest in the registry/layout. */
  digest: string;
  mediaType: string;
  /** Compressed size. */
  size: number;
}

export interface StoredImage {
  manifestDigest: string;
  configDigest: string;
  config: ImageConfig;
  rawConfig: string;
  layers: StoredLayerRef[];
  platform: string;
  createdAt: number;
  lastUsedAt: number;
}

export interface StoredLayerRow {
  idMap: string;
  diffId: string;
  diskBytes: number;
}

export interface Lease {
  holder: string;
  manifestDigest: string;
  acquiredAt: number;
}

interface ImageRow {
  manifest_digest: string;
  config_digest: string;
  config_json: string;
  raw_config: string;
  layers_json: string;
  platform: string;
  created_at: number;
  last_used_at: number;
}

function toImage(r: ImageRow): StoredImage {
  return {
    manifestDigest: r.manifest_digest,
    configDigest: r.config_digest,
    config: JSON.parse(r.config_json) as ImageConfig,
    rawConfig: r.raw_config,
    layers: JSON.parse(r.layers_json) as StoredLayerRef[],
    platform: r.platform,
    createdAt: r.created_at,
    lastUsedAt: r.last_used_at,
  };
}

export class ImageMetadataStore {
  constructor(
    readonly db: StateDb,
    /** The id-map variant this process unpacks for ("v1-100000-65536"). */
    readonly idMap: string,
  ) {}

  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn)();
  }

  getImage(manifestDigest: string): StoredImage | undefined {
    const r = this.db
      .prepare('SELECT * FROM image_manifests WHERE manifest_digest = ?')
      .get(manifestDigest) as ImageRow | undefined;
    return r ? toImage(r) : undefined;
  }

  listImages(): StoredImage[] {
    return (this.db.prepare('SELECT * FROM image_manifests').all() as ImageRow[]).map(toImage);
  }

  /** Inserts the image unless it is already known (its content is immutable: same digest, same bytes). */
  putImage(img: StoredImage): void {
    this.db
      .prepare(
        `INSERT OR IGNORE INTO image_manifests
           (manifest_digest, config_digest, config_json, raw_config, layers_json, platform, created_at, last_used_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        img.manifestDigest,
        img.configDigest,
        JSON.stringify(img.config),
        img.rawConfig,
        JSON.stringify(img.layers),
        img.platform,
        img.createdAt,
        img.lastUsedAt,
      );
  }

  deleteImage(manifestDigest: string): void {
    this.db.prepare('DELETE FROM image_refs WHERE manifest_digest = ?').run(manifestDigest);
    this.db.prepare('DELETE FROM image_manifests WHERE manifest_digest = ?').run(manifestDigest);
  }

  touch(manifestDigest: string, now: number): void {
    this.db
      .prepare('UPDATE image_manifests SET last_used_at = MAX(last_used_at, ?) WHERE manifest_digest = ?')
      .run(now, manifestDigest);
  }

  getRef(reference: string): { manifestDigest: string; sourceStamp: string | null } | undefined {
    const r = this.db
      .prepare('SELECT manifest_digest, source_stamp FROM image_refs WHERE reference = ?')
      .get(reference) as { manifest_digest: string; source_stamp: string | null } | undefined;
    return r ? { manifestDigest: r.manifest_digest, sourceStamp: r.source_stamp } : undefined;
  }

  setRef(reference: string, manifestDigest: string, sourceStamp: string | null, now: number): void {
    this.db
      .prepare(
        `INSERT INTO image_refs (reference, manifest_digest, source_stamp, updated_at) VALUES (?, ?, ?, ?)
         ON CONFLICT(reference) DO UPDATE SET manifest_digest = excluded.manifest_digest,
           source_stamp = excluded.source_stamp, updated_at = excluded.updated_at`,
      )
      .run(reference, manifestDigest, sourceStamp, now);
  }

  refsOf(manifestDigest: string): string[] {
    return (
      this.db
        .prepare('SELECT reference FROM image_refs WHERE manifest_digest = ? ORDER BY reference')
        .all(manifestDigest) as {
        reference: string;
      }[]
    ).map((r) => r.reference);
  }

  getLayer(diffId: string): StoredLayerRow | undefined {
    const r = this.db
      .prepare('SELECT id_map, diff_id, disk_bytes FROM image_layers WHERE id_map = ? AND diff_id = ?')
      .get(this.idMap, diffId) as { id_map: string; diff_id: string; disk_bytes: number } | undefined;
    return r ? { idMap: r.id_map, diffId: r.diff_id, diskBytes: r.disk_bytes } : undefined;
  }

  putLayer(diffId: string, diskBytes: number, now: number): void {
    this.db
      .prepare(
        'INSERT OR REPLACE INTO image_layers (id_map, diff_id, disk_bytes, created_at) VALUES (?, ?, ?, ?)',
      )
      .run(this.idMap, diffId, diskBytes, now);
  }

  deleteLayer(idMap: string, diffId: string): void {
    this.db.prepare('DELETE FROM image_layers WHERE id_map = ? AND diff_id = ?').run(idMap, diffId);
  }

  listLayers(): StoredLayerRow[] {
    return (
      this.db.prepare('SELECT id_map, diff_id, disk_bytes FROM image_layers').all() as {
        id_map: string;
        diff_id: string;
        disk_bytes: number;
      }[]
    ).map((r) => ({ idMap: r.id_map, diffId: r.diff_id, diskBytes: r.disk_bytes }));
  }

  acquireLease(holder: string, manifestDigest: string, now: number): void {
    this.db
      .prepare(
        `INSERT INTO image_leases (holder, manifest_digest, acquired_at) VALUES (?, ?, ?)
         ON CONFLICT(holder) DO UPDATE SET manifest_digest = excluded.manifest_digest, acquired_at = excluded.acquired_at`,
      )
      .run(holder, manifestDigest, now);
  }

  /** The digest the holder had leased, if any. */
  releaseLease(holder: string): string | undefined {
    const r = this.db
      .prepare('DELETE FROM image_leases WHERE holder = ? RETURNING manifest_digest')
      .get(holder) as { manifest_digest: string } | undefined;
    return r?.manifest_digest;
  }

  releaseLeasesWithPrefix(prefix: string): number {
    return this.db
      .prepare('DELETE FROM image_leases WHERE substr(holder, 1, length(?)) = ?')
      .run(prefix, prefix).changes;
  }

  listLeases(): Lease[] {
    return (
      this.db
        .prepare('SELECT holder, manifest_digest, acquired_at FROM image_leases ORDER BY holder')
        .all() as {
        holder: string;
        manifest_digest: string;
        acquired_at: number;
      }[]
    ).map((r) => ({ holder: r.holder, manifestDigest: r.manifest_digest, acquiredAt: r.acquired_at }));
  }

  leasedDigests(): Set<string> {
    return new Set(
      (
        this.db.prepare('SELECT DISTINCT manifest_digest FROM image_leases').all() as {
          manifest_digest: string;
        }[]
      ).map((r) => r.manifest_digest),
    );
  }

  isLeased(manifestDigest: string): boolean {
    return (
      this.db.prepare('SELECT 1 FROM image_leases WHERE manifest_digest = ? LIMIT 1').get(manifestDigest) !==
      undefined
    );
  }
}
