// Volumes of a node: named directories that outlive every sandbox and that any number of sandboxes mount at once
// (docs/volumes.md), kept by a store (this node's CoW volume, or a directory the cluster shares). This decides who
// may mount and delete what.
import { randomUUID } from 'node:crypto';
import { DomainError, ErrorKind, volumeContentToken, volumeContentTokenMatches } from '@aenv/protocol';
import type { Logger } from '../util/log.js';
import { assertMountPath, assertVolumeName } from './names.js';
import type { VolumeStore } from './store.js';
import type { VolumeMountRecord, VolumeRow } from './types.js';

export interface VolumeSettings {
  maxSizeMB: number;
  maxVolumeCount: number;
}

export interface VolumeServiceOptions extends VolumeSettings {
  store: VolumeStore;
  /** Derives each volume's content token (HMAC of the volume id): the node's API key. */
  tokenSecret: string;
  logger: Logger;
}

export interface VolumeAndToken {
  volumeID: string;
  name: string;
  token: string;
}

/** How often a node with shared volumes looks for leases its sandboxes no longer need. */
const LEASE_REFRESH_MS = 10_000;

const notFound = (id: string) =>
  new DomainError(ErrorKind.NotFound, `volume ${JSON.stringify(id.slice(0, 80))} not found`);

/** Which of this node's sandboxes (running or paused) mount each volume. */
export type VolumeUsers = () => ReadonlyMap<string, readonly string[]>;

export class VolumeService {
  /** Mounts being set up by a create that has no sandbox record yet (a delete must wait for them). */
  private readonly held = new Map<string, number>();
  private users: VolumeUsers = () => new Map();
  /** Lease changes of a shared store, one at a time (a mount's lease must not be dropped under it). */
  private leaseChain: Promise<unknown> = Promise.resolve();
  private reconcileQueued = false;
  /** What this node's lease file of each volume last said, as written here: a reconcile rewrites only changes. */
  private readonly leaseWritten = new Map<string, string>();
  private refreshTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: VolumeServiceOptions) {}

  get settings(): VolumeSettings {
    return { maxSizeMB: this.opts.maxSizeMB, maxVolumeCount: this.opts.maxVolumeCount };
  }

  get store(): VolumeStore {
    return this.opts.store;
  }

  /** Who mounts each volume: the sandboxes (running or paused) whose records list it. */
  setUsers(users: VolumeUsers): void {
    this.users = users;
  }

  private usersOf(id: string): readonly string[] {
    return this.users().get(id) ?? [];
  }

  /** Finishes what a crash interrupted and removes directories no row owns. */
  async init(): Promise<void> {
    if (!this.opts.store.enforcesLimits) {
      this.opts.logger.warn(
        this.opts.store.kind === 'shared_dir'
          ? "volume.max_size_mb is enforced on content-API writes only: a shared directory has no aenv quotas (use the filer's)"
          : 'volume.max_size_mb is not enforced: the sandbox volume has no quotas (runtime.disk_limits = false, or a filesystem without them)',
      );
    }
    await this.opts.store.init();
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
    await this.opts.store.create(row);
    this.opts.logger.info({ volumeId: row.id, name: n }, 'volume created');
    return this.withToken(row);
  }

  async list(): Promise<{ volumeID: string; name: string }[]> {
    return (await this.opts.store.list()).map((v) => ({ volumeID: v.id, name: v.name }));
  }

  async find(id: string): Promise<VolumeRow | undefined> {
    return this.opts.store.get(id);
  }

  /** Whether volume `id` is in this node's catalog (on a shared directory: every node's). */
  async has(id: string): Promise<boolean> {
    return (await this.opts.store.get(id)) !== undefined;
  }

  /**
   * Every node of the cluster mounts every volume (a shared directory): a sandbox that mounts some may move to
   * another node (docs/cluster.md#volumes-in-a-cluster). False for node-affine volumes.
   */
  get shared(): boolean {
    return this.opts.store.kind === 'shared_dir';
  }

  async get(id: string): Promise<VolumeAndToken> {
    const v = await this.opts.store.get(id);
    if (!v) throw notFound(id);
    return this.withToken(v);
  }

  /** The volume's directory on the host, for the content API; NotFound when it does not exist. */
  async dirOf(id: string): Promise<string> {
    if (!(await this.opts.store.get(id))) throw notFound(id);
    return this.opts.store.dirOf(id);
  }

  /**
   * The directory a sandbox of this node is about to mount. On a shared directory this node's lease on it is
   * written first (so no node deletes it under the mount); NotFound or Conflict when it is gone or being deleted.
   */
  async mountDir(id: string): Promise<string> {
    if (this.opts.store.kind === 'node') return this.dirOf(id);
    const store = this.opts.store;
    await this.leased(async () => {
      try {
        await store.lease(id, this.usersOf(id));
        this.leaseWritten.set(id, leaseKey(this.usersOf(id)));
      } catch (e) {
        this.leaseWritten.delete(id);
        // Nothing else of this node needs the lease (no record, no other create holding it): it goes at once,
        // not at the next reconcile, so that it does not refuse another node's delete meanwhile.
        if (this.usersOf(id).length === 0 && (this.held.get(id) ?? 0) <= 1)
          await store.unlease(id).catch(() => {});
        throw e;
      }
    });
    return store.dirOf(id);
  }

  private leased<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.leaseChain.then(fn);
    this.leaseChain = run.catch(() => {});
    return run;
  }

  /**
   * Brings this node's leases on a shared directory in line with its sandboxes: dropped for volumes none of them
   * (nor a create in progress) mounts any more, written for those they do. Called at start, when sandboxes come
   * and go ({@link noteSandboxesChanged}), and before a delete.
   */
  async reconcileLeases(): Promise<void> {
    if (this.opts.store.kind === 'node') return;
    await this.leased(() => this.reconcileNow());
  }

  private async reconcileNow(): Promise<void> {
    const store = this.opts.store;
    const users = this.users();
    for (const id of await store.myLeases()) {
      if ((users.get(id)?.length ?? 0) > 0 || (this.held.get(id) ?? 0) > 0) continue;
      this.leaseWritten.delete(id);
      await store.unlease(id);
    }
    for (const [id, sandboxes] of users) {
      // Unchanged since this node wrote it: the file on the shared directory already says so (no rewrite, no fsync).
      if (sandboxes.length === 0 || this.leaseWritten.get(id) === leaseKey(sandboxes)) continue;
      // A volume deleted meanwhile (it cannot be while leased) or one being deleted: the lease stays written.
      await store.lease(id, sandboxes).then(
        () => this.leaseWritten.set(id, leaseKey(sandboxes)),
        (err: unknown) => {
          this.leaseWritten.delete(id);
          this.opts.logger.warn({ err, volumeId: id }, 'volume lease of a sandbox of this node');
        },
      );
    }
  }

  /** Shared store only: every LEASE_REFRESH_MS, the leases reconciled with this node's sandboxes. Stopped by {@link close}. */
  startLeaseRefresh(intervalMs = LEASE_REFRESH_MS): void {
    if (this.opts.store.kind === 'node' || this.refreshTimer) return;
    let running = false;
    this.refreshTimer = setInterval(() => {
      if (running) return;
      running = true;
      this.reconcileLeases()
        .catch((err: unknown) => this.opts.logger.warn({ err }, 'volume leases not refreshed'))
        .finally(() => (running = false));
    }, intervalMs);
    this.refreshTimer.unref();
  }

  /** Stops the refresh and waits for lease changes under way (the leases themselves stay: records stay). */
  async close(): Promise<void> {
    clearInterval(this.refreshTimer);
    this.refreshTimer = undefined;
    await this.leaseChain;
  }

  /** A sandbox of this node came or went: leases follow, soon, one reconcile at a time. */
  noteSandboxesChanged(): void {
    if (this.opts.store.kind === 'node' || this.reconcileQueued) return;
    this.reconcileQueued = true;
    setImmediate(() => {
      this.reconcileQueued = false;
      this.reconcileLeases().catch((err: unknown) =>
        this.opts.logger.warn({ err }, 'volume leases not reconciled'),
      );
    });
  }

  /** Refused (409) while a sandbox, running or paused, of any node mounts it: they would lose their files. */
  async delete(id: string): Promise<void> {
    const v = await this.opts.store.get(id);
    if (!v) throw notFound(id);
    const outcome = await this.leased(async () => {
      const users = this.usersOf(id);
      if (users.length > 0 || (this.held.get(id) ?? 0) > 0) {
        throw new DomainError(
          ErrorKind.Conflict,
          `volume ${JSON.stringify(v.name)} is mounted by ${users.length ? `sandbox ${users.slice(0, 5).join(', ')}` : 'a sandbox being created'}; kill those sandboxes first`,
        );
      }
      this.leaseWritten.delete(id);
      await this.opts.store.unlease(id);
      return this.opts.store.remove(id);
    });
    if (!outcome.deleted) {
      const l = outcome.leases[0]!;
      throw new DomainError(
        ErrorKind.Conflict,
        `volume ${JSON.stringify(v.name)} is mounted by ${l.sandboxes.length ? `sandbox ${l.sandboxes.slice(0, 5).join(', ')}` : 'a sandbox'} on node ${l.node}${outcome.leases.length > 1 ? ` and on ${outcome.leases.length - 1} more node(s)` : ''}; kill those sandboxes first`,
      );
    }
    this.opts.logger.info({ volumeId: id, name: v.name }, 'volume deleted');
  }

  /**
   * The create request's `volumeMounts` (E2B `SandboxVolumeMount[]`) plus what the template (a snapshot) needs,
   * checked: volumes named exist, paths are allowed and do not overlap, at most `max_volume_count`.
   */
  async resolveMounts(
    requested: unknown,
    needed: readonly VolumeMountRecord[] = [],
  ): Promise<VolumeMountRecord[]> {
    if (requested !== undefined && requested !== null && !Array.isArray(requested))
      throw new DomainError(ErrorKind.InvalidArgument, 'volumeMounts must be a list of {name, path}');
    const out: VolumeMountRecord[] = [];
    for (const [i, m] of ((requested as unknown[] | null | undefined) ?? []).entries()) {
      if (typeof m !== 'object' || m === null || Array.isArray(m))
        throw new DomainError(ErrorKind.InvalidArgument, `volumeMounts[${i}] must be an object {name, path}`);
      const { name, path } = m as { name?: unknown; path?: unknown };
      const n = assertVolumeName(name);
      const p = assertMountPath(path, `volumeMounts[${i}].path`);
      const v = await this.opts.store.byName(n);
      if (!v) throw new DomainError(ErrorKind.NotFound, `volume ${JSON.stringify(n)} not found`);
      out.push({ volumeId: v.id, name: v.name, path: p });
    }
    // A snapshot's own mounts come back at the paths it had them, unless the request mounts something there.
    for (const m of needed) {
      if (out.some((o) => o.path === m.path)) continue;
      if (!(await this.opts.store.get(m.volumeId))) {
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

/** The sandboxes of a lease, in a form that compares equal whatever their order. */
function leaseKey(sandboxes: readonly string[]): string {
  return [...sandboxes].sort().join(',');
}
