// Where a node's volumes are kept: on its own CoW volume (NodeVolumeStore) or on a directory every node shares
// (SharedVolumeStore). VolumeService decides who may do what; a store keeps the volumes and, when shared, the
// leases other nodes see (docs/volumes.md).
import type { IdRange } from '../runtime/driver.js';
import type { VolumeRow } from './types.js';

/** One node's use of a shared volume: its sandboxes mounting it (empty: being mounted, or unreadable). */
export interface Lease {
  node: string;
  sandboxes: string[];
}

export interface VolumeStore {
  readonly kind: 'node' | 'shared_dir';
  readonly ownerRange: IdRange;
  /** Whether `max_size_mb` is enforced on every write (a quota), not only on content-API writes. */
  readonly enforcesLimits: boolean;
  init(): Promise<void>;
  /** Makes the volume; AlreadyExists when the name is taken. */
  create(v: VolumeRow): Promise<void>;
  get(id: string): Promise<VolumeRow | undefined>;
  byName(name: string): Promise<VolumeRow | undefined>;
  list(): Promise<VolumeRow[]>;
  /** The host directory of volume `id` (whether or not it exists); NotFound for an id that cannot be one. */
  dirOf(id: string): string;
  /**
   * Removes volume `id`, which no sandbox of this node uses, unless another node leases it (shared only): then
   * those leases.
   */
  remove(id: string): Promise<{ deleted: true } | { deleted: false; leases: Lease[] }>;
  /** Shared only: records that this node mounts `id` for `sandboxes`; throws when it is gone or being deleted. */
  lease(id: string, sandboxes: readonly string[]): Promise<void>;
  unlease(id: string): Promise<void>;
  /** Volumes this node holds a lease on (none when not shared). */
  myLeases(): Promise<string[]>;
}
