// Volumes on a directory every node of a cluster mounts (`[volume].storage = "shared_dir"`, docs/volumes.md
// "Shared directory"). No database: the directory is the catalog, laid out so that nodes never need a lock
// service, only what POSIX (and NFSv3+/v4) give across clients — exclusive create, atomic rename, readdir:
//
//   data/<id>/                     the volume's files (1777, owned by the image range, as on a node)
//   meta/<id>.json                 {id, name, sizeMB, createdAt}: the volume exists iff this file does (rename)
//   names/<name>                   {id, node}: the name claim (O_EXCL), so two nodes cannot make one name
//   leases/<node>/<id>             {node, sandboxes}: node <node> mounts (or is about to mount) volume <id>
//   deleting/<id>/<node>.<random>  {node, name}: a delete in progress; a mount seeing one is refused
//
// Mount versus delete needs no lock: a mount writes its lease, then looks for delete markers; a delete writes its
// marker, then looks for leases. Whichever comes second sees the other, so a volume is never removed under a
// mount (both may refuse at once: the client retries).
import { randomBytes } from 'node:crypto';
import { constants as C } from 'node:fs';
import { chmod, chown, lstat, mkdir, open, readdir, rename, rm, rmdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { DomainError, ErrorKind, isSandboxId } from '@aenv/protocol';
import type { IdRange } from '../runtime/driver.js';
import type { Logger } from '../util/log.js';
import type { VolumeRow } from './types.js';
import { VOLUME_NAME_RE } from './names.js';
import type { Lease, VolumeStore } from './store.js';

/** A name claim with no volume this old is a create that died: any node may take the name over. */
export const STALE_CLAIM_MS = 10 * 60_000;
const DIRS = ['data', 'meta', 'names', 'leases', 'deleting'] as const;

/** A node id as a file name: plain ids as they are, anything else hex-encoded (never a path). */
export function nodeKey(nodeId: string): string {
  return /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/.test(nodeId)
    ? `n-${nodeId}`
    : `h-${Buffer.from(nodeId).toString('hex').slice(0, 240)}`;
}

function nodeOfKey(key: string): string {
  if (key.startsWith('n-')) return key.slice(2);
  if (key.startsWith('h-')) return Buffer.from(key.slice(2), 'hex').toString();
  return key;
}

const errno = (e: unknown) => (e as NodeJS.ErrnoException)?.code;
const ignoreMissing = (e: unknown) => {
  if (errno(e) !== 'ENOENT') throw e;
};

/** Writes `text` to `path` whole or not at all: a temporary in the same directory, fsync, rename, fsync dir. */
async function writeAtomic(path: string, text: string): Promise<void> {
  const dir = join(path, '..');
  const tmp = join(dir, `.tmp-${randomBytes(8).toString('hex')}`);
  const fh = await open(tmp, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await rename(tmp, path);
  } catch (e) {
    await unlink(tmp).catch(() => {});
    throw e;
  }
  await syncDir(dir);
}

/** Creates `path` holding `text` only if nothing is there (O_EXCL): false when something is. */
async function createExclusive(path: string, text: string): Promise<boolean> {
  let fh;
  try {
    fh = await open(path, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
  } catch (e) {
    if (errno(e) === 'EEXIST') return false;
    throw e;
  }
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await syncDir(join(path, '..'));
  return true;
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, C.O_RDONLY | C.O_DIRECTORY).catch(() => undefined);
  await fh?.sync().catch(() => {});
  await fh?.close();
}

/** A small JSON file (never through a symlink), or undefined when it is missing or not ours. */
async function readJson(path: string): Promise<Record<string, unknown> | undefined> {
  let fh;
  try {
    fh = await open(path, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK);
  } catch (e) {
    if (errno(e) === 'ENOENT' || errno(e) === 'ELOOP') return undefined;
    throw e;
  }
  try {
    if (!(await fh.stat()).isFile()) return undefined;
    const v: unknown = JSON.parse(await fh.readFile('utf8'));
    return v !== null && typeof v === 'object' && !Array.isArray(v)
      ? (v as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined; // half written by a crash before the rename can not be: a foreign file
  } finally {
    await fh.close();
  }
}

const list = (dir: string) =>
  readdir(dir).catch((e: unknown) => (errno(e) === 'ENOENT' ? [] : Promise.reject(e)));

export interface SharedDirOptions {
  root: string;
  /** `[node_identity].node_id`: whose leases and markers this node writes. */
  nodeId: string;
  /** Host owner of the volumes' files (the image range): the same on every node. */
  owner: IdRange;
  logger: Logger;
  /** Tests: the clock for stale claims. */
  now?: () => number;
}

/** The shared directory's layout and its cross-node rules; what a node mounts is decided by VolumeService. */
export class SharedDirStore implements VolumeStore {
  readonly kind = 'shared_dir';
  /** No quota on a shared directory: `max_size_mb` bounds content-API writes only (docs/volumes.md). */
  readonly enforcesLimits = false;
  private readonly me: string;

  constructor(private readonly opts: SharedDirOptions) {
    this.me = nodeKey(opts.nodeId);
  }

  get ownerRange(): IdRange {
    return this.opts.owner;
  }

  private p(...parts: string[]): string {
    return join(this.opts.root, ...parts);
  }

  private static assertId(id: string): void {
    // Ids form paths: only the UUIDs this code makes.
    if (!isSandboxId(id))
      throw new DomainError(ErrorKind.NotFound, `volume ${JSON.stringify(id.slice(0, 80))} not found`);
  }

  /** Makes the layout (private to root) and finishes or undoes what a crashed create or delete left. */
  async init(): Promise<void> {
    const st = await lstat(this.opts.root).catch(() => undefined);
    if (!st?.isDirectory())
      throw new Error(
        `volume.shared_dir ${this.opts.root} is not a directory (mount the shared directory first)`,
      );
    for (const d of DIRS) {
      await mkdir(this.p(d), { mode: 0o700 }).catch((e: unknown) => {
        if (errno(e) !== 'EEXIST') throw e;
      });
      await chmod(this.p(d), 0o700);
    }
    await mkdir(this.p('leases', this.me), { mode: 0o700 }).catch((e: unknown) => {
      if (errno(e) !== 'EEXIST') throw e;
    });
    await this.finishDeletes();
    await this.dropDeadClaims();
  }

  async get(id: string): Promise<VolumeRow | undefined> {
    if (!isSandboxId(id)) return undefined;
    const m = await readJson(this.p('meta', `${id}.json`));
    if (!m || m.id !== id || typeof m.name !== 'string' || typeof m.sizeMB !== 'number') return undefined;
    return { id, name: m.name, sizeMB: m.sizeMB, createdAt: String(m.createdAt ?? '') };
  }

  async byName(name: string): Promise<VolumeRow | undefined> {
    if (!VOLUME_NAME_RE.test(name)) return undefined;
    const claim = await readJson(this.p('names', name));
    if (typeof claim?.id !== 'string') return undefined;
    const v = await this.get(claim.id);
    return v?.name === name ? v : undefined;
  }

  async list(): Promise<VolumeRow[]> {
    const out: VolumeRow[] = [];
    for (const f of await list(this.p('meta'))) {
      if (!f.endsWith('.json')) continue;
      const v = await this.get(f.slice(0, -'.json'.length));
      if (v) out.push(v);
    }
    return out.sort((a, b) =>
      a.createdAt !== b.createdAt ? (a.createdAt < b.createdAt ? -1 : 1) : a.id < b.id ? -1 : 1,
    );
  }

  dirOf(id: string): string {
    SharedDirStore.assertId(id);
    return this.p('data', id);
  }

  /** Claims the name, makes the directory, then the metadata that makes the volume exist. */
  async create(v: VolumeRow): Promise<void> {
    SharedDirStore.assertId(v.id);
    if (!(await this.claim(v))) {
      throw new DomainError(
        ErrorKind.AlreadyExists,
        `a volume named ${JSON.stringify(v.name)} already exists`,
      );
    }
    const dir = this.dirOf(v.id);
    try {
      await mkdir(dir, { mode: 0o700 });
      // Like /tmp: every user of every sandbox may make files; only a file's owner (or root) removes it.
      await chown(dir, this.opts.owner.hostStart, this.opts.owner.hostStart);
      await chmod(dir, 0o1777);
      await writeAtomic(this.p('meta', `${v.id}.json`), JSON.stringify({ ...v, node: this.opts.nodeId }));
    } catch (e) {
      await rm(dir, { recursive: true, force: true }).catch(() => {});
      await this.unclaim(v.name, v.id);
      throw e;
    }
  }

  private async claim(v: VolumeRow): Promise<boolean> {
    const path = this.p('names', v.name);
    const text = JSON.stringify({ id: v.id, node: this.opts.nodeId });
    if (await createExclusive(path, text)) return true;
    // Taken: by a volume, by a create in progress, or by a create a dead node left (no volume, old).
    const held = await readJson(path);
    if (typeof held?.id === 'string' && (await this.get(held.id))) return false;
    const st = await lstat(path).catch(() => undefined);
    const now = this.opts.now?.() ?? Date.now();
    if (st && now - st.mtimeMs < STALE_CLAIM_MS) return false;
    await this.dropClaim(v.name, held);
    return createExclusive(path, text);
  }

  private async dropClaim(name: string, held: Record<string, unknown> | undefined): Promise<void> {
    if (typeof held?.id === 'string' && isSandboxId(held.id))
      await rm(this.p('data', held.id), { recursive: true, force: true });
    await unlink(this.p('names', name)).catch(ignoreMissing);
  }

  /** Removes the name claim if it is still volume `id`'s. */
  private async unclaim(name: string, id: string): Promise<void> {
    const held = await readJson(this.p('names', name));
    if (held?.id === id) await unlink(this.p('names', name)).catch(ignoreMissing);
  }

  /** Claims a create of this node left without a volume (it died half way), and any one that is stale. */
  private async dropDeadClaims(): Promise<void> {
    const now = this.opts.now?.() ?? Date.now();
    for (const name of await list(this.p('names'))) {
      if (!VOLUME_NAME_RE.test(name)) continue;
      const held = await readJson(this.p('names', name));
      if (typeof held?.id === 'string' && (await this.get(held.id))) continue;
      const st = await lstat(this.p('names', name)).catch(() => undefined);
      if (!st) continue;
      if (held?.node !== this.opts.nodeId && now - st.mtimeMs < STALE_CLAIM_MS) continue;
      await this.dropClaim(name, held);
      this.opts.logger.info({ name }, 'removed a volume name claim a create left unfinished');
    }
  }

  // ---- leases -------------------------------------------------------------------------------------------

  /** Every node's lease on volume `id`. */
  async leases(id: string): Promise<Lease[]> {
    const out: Lease[] = [];
    for (const key of await list(this.p('leases'))) {
      const l = await readJson(this.p('leases', key, id));
      if (!l) {
        // Present but unreadable still counts: a lease is never ignored.
        if (await lstat(this.p('leases', key, id)).catch(() => undefined))
          out.push({ node: nodeOfKey(key), sandboxes: [] });
        continue;
      }
      const sandboxes = Array.isArray(l.sandboxes) ? l.sandboxes.filter((s) => typeof s === 'string') : [];
      out.push({ node: nodeOfKey(key), sandboxes: sandboxes as string[] });
    }
    return out;
  }

  /** The volumes this node holds a lease on. */
  async myLeases(): Promise<string[]> {
    return (await list(this.p('leases', this.me))).filter(isSandboxId);
  }

  /**
   * Records that this node mounts volume `id` for `sandboxes`, then checks that the volume still exists and no
   * delete is under way (in that order: see the top of this file).
   */
  async lease(id: string, sandboxes: readonly string[]): Promise<void> {
    SharedDirStore.assertId(id);
    await mkdir(this.p('leases', this.me), { recursive: true, mode: 0o700 });
    await writeAtomic(this.p('leases', this.me, id), JSON.stringify({ node: this.opts.nodeId, sandboxes }));
    if (await this.deleteUnderWay(id))
      throw new DomainError(ErrorKind.Conflict, `volume ${id} is being deleted; try again`);
    if (!(await this.get(id)))
      throw new DomainError(ErrorKind.NotFound, `volume ${JSON.stringify(id)} not found`);
  }

  /**
   * Whether a delete marker of volume `id` is fresh. A delete decides within milliseconds of writing its marker,
   * so one older than STALE_CLAIM_MS on a volume that still exists is a crashed node's: it does not block mounts.
   */
  private async deleteUnderWay(id: string): Promise<boolean> {
    const now = this.opts.now?.() ?? Date.now();
    for (const m of await list(this.p('deleting', id))) {
      const st = await lstat(this.p('deleting', id, m)).catch(() => undefined);
      if (st && now - st.mtimeMs < STALE_CLAIM_MS) return true;
    }
    return false;
  }

  async unlease(id: string): Promise<void> {
    SharedDirStore.assertId(id);
    await unlink(this.p('leases', this.me, id)).catch(ignoreMissing);
  }

  // ---- delete -------------------------------------------------------------------------------------------

  /**
   * Deletes volume `id` unless some node holds a lease on it: then the leases are returned and nothing changes.
   * The caller has brought this node's own lease up to date first.
   */
  async remove(id: string): Promise<{ deleted: true } | { deleted: false; leases: Lease[] }> {
    const v = await this.get(id);
    if (!v) throw new DomainError(ErrorKind.NotFound, `volume ${JSON.stringify(id.slice(0, 80))} not found`);
    const markers = this.p('deleting', id);
    await mkdir(markers, { recursive: true, mode: 0o700 });
    const marker = join(markers, `${this.me}.${randomBytes(8).toString('hex')}`);
    await createExclusive(marker, JSON.stringify({ node: this.opts.nodeId, name: v.name }));
    const leases = await this.leases(id);
    if (leases.length > 0) {
      await unlink(marker).catch(ignoreMissing);
      await rmdir(markers).catch(() => {}); // another delete's marker may be there: it removes its own
      return { deleted: false, leases };
    }
    // From here the volume is gone for every node; a crash leaves the marker, and the next start finishes it.
    await unlink(this.p('meta', `${id}.json`)).catch(ignoreMissing);
    await syncDir(this.p('meta'));
    await this.finishDelete(id, v.name);
    return { deleted: true };
  }

  private async finishDelete(id: string, name: string | undefined): Promise<void> {
    await rm(this.p('data', id), { recursive: true, force: true });
    if (name !== undefined && VOLUME_NAME_RE.test(name)) await this.unclaim(name, id);
    await rm(this.p('deleting', id), { recursive: true, force: true });
  }

  /** Deletes a crash interrupted after the metadata went are finished; this node's undecided ones undone. */
  private async finishDeletes(): Promise<void> {
    for (const id of await list(this.p('deleting'))) {
      if (!isSandboxId(id)) continue;
      const markers = await list(this.p('deleting', id));
      if (await this.get(id)) {
        for (const m of markers)
          if (m.startsWith(`${this.me}.`)) await unlink(this.p('deleting', id, m)).catch(ignoreMissing);
        await rmdir(this.p('deleting', id)).catch(() => {});
        continue;
      }
      let name: string | undefined;
      for (const m of markers) {
        const n = (await readJson(this.p('deleting', id, m)))?.name;
        if (typeof n === 'string') name = n;
      }
      await this.finishDelete(id, name);
      this.opts.logger.info({ volumeId: id }, 'finished a volume delete a crash interrupted');
    }
  }
}
