// Volumes on this node's CoW volume, catalogued in its state database (`[volume].storage = "node"`).
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { VolumeDisks } from '../runtime/driver.js';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import { VolumeCatalog } from './catalog.js';
import type { VolumeStore } from './store.js';
import type { VolumeRow } from './types.js';

export class NodeVolumeStore implements VolumeStore {
  readonly kind = 'node';
  private readonly catalog: VolumeCatalog;

  constructor(
    db: StateDb,
    private readonly disks: VolumeDisks,
    private readonly logger: Logger,
  ) {
    this.catalog = new VolumeCatalog(db);
  }

  get ownerRange() {
    return this.disks.ownerRange;
  }

  get enforcesLimits(): boolean {
    return this.disks.enforcesLimits;
  }

  /** Finishes what a crash interrupted and removes directories no row owns. */
  async init(): Promise<void> {
    for (const u of this.catalog.unfinished()) {
      await this.disks.remove(u.id);
      this.catalog.delete(u.id);
      this.logger.info({ volumeId: u.id, state: u.state }, 'removed a volume a crash left unfinished');
    }
    const known = this.catalog.allIds();
    for (const id of await this.disks.list()) {
      if (known.has(id)) continue;
      await this.disks.remove(id);
      this.logger.info({ volumeId: id }, 'removed a volume directory no catalog row owns');
    }
  }

  async create(v: VolumeRow): Promise<void> {
    if (!this.catalog.insert(v))
      throw new DomainError(
        ErrorKind.AlreadyExists,
        `a volume named ${JSON.stringify(v.name)} already exists`,
      );
    try {
      await this.disks.create(v.id, v.sizeMB);
    } catch (e) {
      await this.disks.remove(v.id).catch(() => {});
      this.catalog.delete(v.id);
      throw e;
    }
    this.catalog.setState(v.id, 'ready');
  }

  async get(id: string): Promise<VolumeRow | undefined> {
    return this.catalog.get(id);
  }

  async byName(name: string): Promise<VolumeRow | undefined> {
    return this.catalog.byName(name);
  }

  async list(): Promise<VolumeRow[]> {
    return this.catalog.list();
  }

  dirOf(id: string): string {
    return this.disks.dirOf(id);
  }

  async remove(id: string): Promise<{ deleted: true }> {
    this.catalog.setState(id, 'deleting');
    await this.disks.remove(id);
    this.catalog.delete(id);
    return { deleted: true };
  }

  async lease(): Promise<void> {}
  async unlease(): Promise<void> {}
  async myLeases(): Promise<string[]> {
    return [];
  }
}
