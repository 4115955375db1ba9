// Volumes of a node: named directories on its CoW volume that outlive every sandbox and that any number of
// sandboxes mount at once (docs/volumes.md). This owns the catalog, the directories and who may delete what.
import { randomUUID } from 'node:crypto';
import { DomainError, ErrorKind, volumeContentToken, volumeContentTokenMatches } from '@aenv/protocol';
import type { VolumeDisks } from '../runtime/driver.js';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import { VolumeCatalog } from './catalog.js';
import { assertMountPath, assertVolumeName } from './names.js';
import type { VolumeMountRecord, VolumeRow } from './types.js';

export interface VolumeSettings {
  maxSizeMB: number;
  maxVolumeCount: number;
}

export interface VolumeServiceOptions extends VolumeSettings {
  db: StateDb;
  disks: VolumeDisks;
  /** Derives each volume's content token (HMAC of the volume id): the node's API key. */
  tokenSecret: string;
  logger: Logger;
}

export interface VolumeAndToken {
  volumeID: string;
  name: string;
  token: string;
}

const notFound = (id: string) =>
  new DomainError(ErrorKind.NotFound, `volume ${JSON.stringify(id.slice(0, 80))} not found`);

export class VolumeService {
  private readonly catalog: VolumeCatalog;
  /** Mounts being set up by a create that has no sandbox record yet (a delete must wait for them). */
  private readonly held = new Map<string, number>();
  private mountedBy: (volumeId: string) => string[] = () => [];

  constructor(private readonly opts: VolumeServiceOptions) {
    this.catalog = new VolumeCatalog(opts.db);
  }

  get settings(): VolumeSettings {
    return { maxSizeMB: this.opts.maxSizeMB, maxVolumeCount: this.opts.maxVolumeCount };
  }

  get disks(): VolumeDisks {
    return this.opts.disks;
  }

  /** Who mounts a volume: the sandboxes (running or paused) whose records list it. */
  setUsers(mountedBy: (volumeId: string) => string[]): void {
    this.mountedBy = mountedBy;
  }

  /** Finishes what a crash interrupted and removes directories no row owns. */
  async init(): Promise<void> {
    if (!this.opts.disks.enforcesLimits) {
      this.opts.logger.warn(
        'volume.max_size_mb is not enforced: the sandbox volume has no quotas (runtime.disk_limits = false, or a filesystem without them)',
      );
    }
    for (const u of this.catalog.unfinished()) {
      await this.opts.disks.remove(u.id);
      this.catalog.delete(u.id);
      this.opts.logger.info({ volumeId: u.id, state: u.state }, 'removed a volume a crash left unfinished');
    }
    const known = this.catalog.allIds();
    for (const id of await this.opts.disks.list()) {
      if (known.has(id)) continue;
      await this.opts.disks.remove(id);
      this.opts.logger.info({ volumeId: id }, 'removed a volume directory no catalog row owns');
    }
  }

  token(id: string): string {
    return volumeContentToken(this.opts.tokenSecret, id);
  }

  /** Whether `token` is volume `id`'s content token (constant time). */
  tokenMatches(id: string, token: string): boolean {
    return volumeContentTokenMatches(this.opts.tokenSecret, id, token);
  }

  private withToken(v: VolumeRow): VolumeAndToken {
    return { volumeID: v.id, name: v.name, token: this.token(v.id) };
  }

  async create(name: unknown): Promise<VolumeAndToken> {
    const n = assertVolumeName(name);
    const row: VolumeRow = {
      id: randomUUID(),
      name: n,
      sizeMB: this.opts.maxSizeMB,
      createdAt: new Date().toISOString(),
    };
    if (!this.catalog.insert(row))
      throw new DomainError(ErrorKind.AlreadyExists, `a volume named ${JSON.stringify(n)} already exists`);
    try {
      await this.opts.disks.create(row.id, row.sizeMB);
    } catch (e) {
      await this.opts.disks.remove(row.id).catch(() => {});
      this.catalog.delete(row.id);
      throw e;
    }
    this.catalog.setState(row.id, 'ready');
    this.opts.logger.info({ volumeId: row.id, name: n }, 'volume created');
    return this.withToken(row);
  }

  list(): { volumeID: string; name: string }[] {
    return this.catalog.list().map((v) => ({ volumeID: v.id, name: v.name }));
  }

  find(id: string): VolumeRow | undefined {
    return this.catalog.get(id);
  }

  get(id: string): VolumeAndToken {
    const v = this.catalog.get(id);
    if (!v) throw notFound(id);
    return this.withToken(v);
  }

  /** The volume's directory on the host; NotFound when it does not exist. */
  dirOf(id: string): string {
    if (!this.catalog.get(id)) throw notFound(id);
    return this.opts.disks.dirOf(id);
  }

  /** Refused (409) while a sandbox, running or paused, mounts it: they would lose their files. */
  async delete(id: string): Promise<void> {
    const v = this.catalog.get(id);
    if (!v) throw notFound(id);
    const users = this.mountedBy(id);
    if (users.length > 0 || (this.held.get(id) ?? 0) > 0) {
      throw new DomainError(
        ErrorKind.Conflict,
        `volume ${JSON.stringify(v.name)} is mounted by ${users.length ? `sandbox ${users.slice(0, 5).join(', ')}` : 'a sandbox being created'}; kill those sandboxes first`,
      );
    }
    this.catalog.setState(id, 'deleting');
    await this.opts.disks.remove(id);
    this.catalog.delete(id);
    this.opts.logger.info({ volumeId: id, name: v.name }, 'volume deleted');
  }

  /**
   * The create request's `volumeMounts` (E2B `SandboxVolumeMount[]`) plus what the template (a snapshot) needs,
   * checked: volumes named exist, paths are allowed and do not overlap, at most `max_volume_count`.
   */
  resolveMounts(requested: unknown, needed: readonly VolumeMountRecord[] = []): VolumeMountRecord[] {
    if (requested !== undefined && requested !== null && !Array.isArray(requested))
      throw new DomainError(ErrorKind.InvalidArgument, 'volumeMounts must be a list of {name, path}');
    const out: VolumeMountRecord[] = [];
    for (const [i, m] of ((requested as unknown[] | null | undefined) ?? []).entries()) {
      if (typeof m !== 'object' || m === null || Array.isArray(m))
        throw new DomainError(ErrorKind.InvalidArgument, `volumeMounts[${i}] must be an object {name, path}`);
      const { name, path } = m as { name?: unknown; path?: unknown };
      const n = assertVolumeName(name);
      const p = assertMountPath(path, `volumeMounts[${i}].path`);
      const v = this.catalog.byName(n);
      if (!v) throw new DomainError(ErrorKind.NotFound, `volume ${JSON.stringify(n)} not found`);
      out.push({ volumeId: v.id, name: v.name, path: p });
    }
    // A snapshot's own mounts come back at the paths it had them, unless the request mounts something there.
    for (const m of needed) {
      if (out.some((o) => o.path === m.path)) continue;
      if (!this.catalog.get(m.volumeId)) {
        throw new DomainError(
          ErrorKind.InvalidState,
          `this snapshot was taken with volume ${JSON.stringify(m.name)} mounted at ${m.path}, and that volume no longer exists; mount another volume at ${m.path} in volumeMounts`,
        );
      }
      out.push(m);
    }
    if (out.length > this.opts.maxVolumeCount) {
      throw new DomainError(
        ErrorKind.InvalidArgument,
        `volumeMounts: ${out.length} volumes, at most ${this.opts.maxVolumeCount} per sandbox (volume.max_volume_count)`,
      );
    }
    for (const a of out) {
      for (const b of out) {
        if (a === b) continue;
        if (a.path === b.path || b.path.startsWith(`${a.path}/`))
          throw new DomainError(
            ErrorKind.InvalidArgument,
            `volumeMounts: ${b.path} is at or inside ${a.path}; mount paths must not overlap`,
          );
      }
    }
    return out;
  }

  /** Keeps the volumes of `mounts` from deletion until the returned function is called. */
  hold(mounts: readonly VolumeMountRecord[]): () => void {
    for (const m of mounts) this.held.set(m.volumeId, (this.held.get(m.volumeId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const m of mounts) {
        const n = (this.held.get(m.volumeId) ?? 1) - 1;
        if (n <= 0) this.held.delete(m.volumeId);
        else this.held.set(m.volumeId, n);
      }
    };
  }
}
