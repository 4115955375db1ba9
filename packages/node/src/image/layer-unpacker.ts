// Unpacks one layer tar into an empty private directory, in the form overlayfs wants for a lowerdir:
// whiteouts as 0/0 character devices, opaque directories marked with trusted.overlay.opaque=y, ownership shifted
// into the sandboxes' user-namespace range.
//
// Security: nothing is ever written outside the directory. Entry names are split into components; "." and empty
// components are dropped (so "/etc/x" lands in <dir>/etc/x, as Docker and containerd do) and ".." rejects the
// layer. Every parent of an entry must be a directory this unpack created: the unpacker keeps an exact model of
// what it has written (the directory is private to it), so a symlink or file in a parent position rejects the
// layer instead of being followed. Final components are created with O_EXCL|O_NOFOLLOW (files) or with calls that
// never follow symlinks (mkdir, symlink, link, lchown, the python helper's *at calls). The syscalls themselves
// run in order on a worker thread (fs-writer.ts); every decision is made here.

import { ImageError } from './errors.js';
import { FsWriter } from './fs-writer.js';
import { shiftFileCapability } from './file-caps.js';
import { applySpecialOps, type SpecialOp } from './special-files.js';
import { displayName, readTar, type TarEntry, type TarHeader } from './tar-reader.js';

/** Container ids [0, size) map to host ids [hostStart, hostStart + size). */
export interface IdMap {
  hostStart: number;
  size: number;
}

export interface UnpackOptions {
  idMap: IdMap;
  /** Most entries the layer may hold (`[image.limits].max_layer_entries`); more fails with TooLarge. */
  maxEntries?: number;
  signal?: AbortSignal;
  /** python3 used for whiteouts, fifos and xattrs. */
  python?: string;
  onWarning?: (message: string) => void;
}

export interface UnpackStats {
  entries: number;
  /** Apparent size rounded up to 4 KiB blocks per file/directory (what the cache accounts). */
  diskBytes: number;
  whiteouts: number;
  opaqueDirs: number;
  skippedDevices: number;
  droppedXattrs: number;
  clampedIds: number;
}

type Kind = 'dir' | 'file' | 'symlink' | 'special';

interface ModelNode {
  kind: Kind;
}

interface DirAttrs {
  mode: number;
  uid: number;
  gid: number;
  mtime?: number;
}

const SMALL_FILE = 1024 * 1024;
const BLOCK = 4096;
const NOBODY = 65534;

/** Exact-size copy: structured clone copies a view's whole ArrayBuffer, and Buffers share pooled ones. */
function exact(b: Uint8Array): Uint8Array {
  return new Uint8Array(b);
}

/** A byte string (one char per byte) as an exact-size byte array. */
function raw(s: string): Uint8Array {
  const u = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i);
  return u;
}

function reject(message: string): ImageError {
  return new ImageError('UnsupportedImage', `unsafe or invalid layer: ${message}`);
}

/** Splits an entry name into safe components (byte strings); throws on "..". */
export function cleanEntryPath(name: string): string {
  const out: string[] = [];
  for (const part of name.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') throw reject(`entry ${displayName(name)} escapes the layer ("..")`);
    out.push(part);
  }
  return out.join('/');
}

function parentOf(rel: string): string {
  const i = rel.lastIndexOf('/');
  return i < 0 ? '' : rel.slice(0, i);
}

function baseOf(rel: string): string {
  return rel.slice(rel.lastIndexOf('/') + 1);
}

function blocks(n: number): number {
  return Math.ceil(n / BLOCK) * BLOCK;
}

class LayerWriter {
  private readonly model = new Map<string, ModelNode>([['', { kind: 'dir' }]]);
  private readonly dirAttrs = new Map<string, DirAttrs>();
  private readonly specials = new Map<string, SpecialOp>();
  private readonly opaque = new Set<string>();
  private readonly xattrs = new Map<string, { name: string; value: Buffer }[]>();
  private readonly umask = process.umask();
  private readonly rootBytes: Uint8Array;
  readonly stats: UnpackStats = {
    entries: 0,
    diskBytes: 0,
    whiteouts: 0,
    opaqueDirs: 0,
    skippedDevices: 0,
    droppedXattrs: 0,
    clampedIds: 0,
  };

  constructor(
    private readonly root: string,
    private readonly opts: UnpackOptions,
    private readonly fs: FsWriter,
  ) {
    this.dirAttrs.set('', { mode: 0o755, uid: 0, gid: 0 });
    this.rootBytes = Buffer.from(`${root.replace(/\/+$/, '')}/`, 'utf8');
  }

  /** Absolute path as bytes: the root (a normal UTF-8 string) joined with a byte-string entry path. */
  private abs(rel: string): Uint8Array {
    if (rel === '') return exact(this.rootBytes.subarray(0, this.rootBytes.length - 1));
    const out = new Uint8Array(this.rootBytes.length + rel.length);
    out.set(this.rootBytes, 0);
    for (let i = 0; i < rel.length; i++) out[this.rootBytes.length + i] = rel.charCodeAt(i);
    return out;
  }

  private shift(id: number): number {
    const { hostStart, size } = this.opts.idMap;
    if (id < size) return hostStart + id;
    this.stats.clampedIds++;
    return hostStart + Math.min(NOBODY, size - 1);
  }

  /** Creates missing parents of `rel` and proves every existing one is a directory this unpack made. */
  private async ensureParents(rel: string, entryName: string): Promise<void> {
    let i = rel.indexOf('/');
    while (i >= 0) {
      const dir = rel.slice(0, i);
      const node = this.model.get(dir);
      const whitedOut = node?.kind === 'special' && this.specials.get(dir)?.op === 'whiteout';
      if (node === undefined || whitedOut) {
        if (whitedOut) {
          // Deleted below and re-created in the same layer: an opaque directory in overlay form.
          this.specials.delete(dir);
          this.opaque.add(dir);
        }
        await this.fs.push({ t: 'mkdir', p: this.abs(dir) });
        this.model.set(dir, { kind: 'dir' });
        this.dirAttrs.set(dir, { mode: 0o755, uid: 0, gid: 0 });
        this.stats.diskBytes += BLOCK;
      } else if (node.kind !== 'dir') {
        throw reject(
          `entry ${displayName(entryName)} would be written through ${displayName(dir)}, which is a ${node.kind === 'symlink' ? 'symlink' : 'non-directory'} in this layer`,
        );
      }
      i = rel.indexOf('/', i + 1);
    }
  }

  /** Removes whatever this layer put at `rel` before (a later tar entry replaces an earlier one). */
  private async removeExisting(rel: string): Promise<void> {
    const node = this.model.get(rel);
    this.specials.delete(rel);
    this.xattrs.delete(rel);
    if (node === undefined) return;
    if (node.kind === 'dir') {
      await this.fs.push({ t: 'rmrf', p: this.abs(rel) });
      const prefix = `${rel}/`;
      for (const map of [this.model, this.dirAttrs, this.specials, this.xattrs] as Map<string, unknown>[]) {
        for (const k of map.keys()) if (k.startsWith(prefix)) map.delete(k);
      }
      for (const k of [...this.opaque]) if (k === rel || k.startsWith(prefix)) this.opaque.delete(k);
      this.dirAttrs.delete(rel);
    } else if (node.kind !== 'special') {
      await this.fs.push({ t: 'unlink', p: this.abs(rel) });
    }
    this.model.delete(rel);
  }

  private queueXattrs(rel: string, h: TarHeader): void {
    if (h.xattrs.size === 0) return;
    const list: { name: string; value: Buffer }[] = [];
    for (const [name, value] of h.xattrs) {
      if (name === 'security.capability') {
        const v = shiftFileCapability(value, (id) => this.shift(id));
        if (v) list.push({ name, value: v });
        else this.stats.droppedXattrs++;
      } else if (name.startsWith('user.')) {
        list.push({ name, value });
      } else {
        // trusted.* (could forge overlay metadata), security.selinux/ima, system.posix_acl_* (unshifted ids).
        this.stats.droppedXattrs++;
      }
    }
    if (list.length > 0) this.xattrs.set(rel, list);
  }

  async entry(e: TarEntry): Promise<void> {
    const h = e.header;
    this.stats.entries++;
    const rel = cleanEntryPath(h.name);
    const base = baseOf(rel);

    if (base.startsWith('.wh.')) {
      await this.whiteout(rel, base, h.name);
      return;
    }
    if (rel === '') {
      if (h.type !== 'directory')
        throw reject(`entry ${displayName(h.name)} names the layer root but is a ${h.type}`);
      this.dirAttrs.set('', { mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtime });
      return;
    }
    await this.ensureParents(rel, h.name);

    switch (h.type) {
      case 'directory':
        return this.directory(rel, h);
      case 'file':
        return this.file(rel, h, e);
      case 'symlink':
        return this.symlink(rel, h);
      case 'hardlink':
        return this.hardlink(rel, h);
      case 'fifo':
        await this.removeExisting(rel);
        this.specials.set(rel, {
          op: 'fifo',
          path: rel,
          mode: h.mode,
          uid: this.shift(h.uid),
          gid: this.shift(h.gid),
        });
        this.model.set(rel, { kind: 'special' });
        return;
      case 'chardev':
      case 'blockdev':
        if (h.type === 'chardev' && h.devmajor === 0 && h.devminor === 0) {
          // Already in overlay whiteout form (layers exported from an overlay upper).
          await this.removeExisting(rel);
          this.specials.set(rel, { op: 'whiteout', path: rel });
          this.model.set(rel, { kind: 'special' });
          this.stats.whiteouts++;
          return;
        }
        this.stats.skippedDevices++;
        return;
    }
  }

  private async whiteout(rel: string, base: string, entryName: string): Promise<void> {
    const dir = parentOf(rel);
    if (dir !== '') {
      await this.ensureParents(`${dir}/x`, entryName);
      if (!this.model.has(dir)) throw reject(`whiteout ${displayName(entryName)} has no parent directory`);
    }
    if (base === '.wh..wh..opq') {
      this.opaque.add(dir);
      this.stats.opaqueDirs++;
      return;
    }
    if (base.startsWith('.wh..wh.')) return; // AUFS bookkeeping (.wh..wh.plnk etc.), meaningless here
    const name = base.slice('.wh.'.length);
    if (name === '' || name === '.' || name === '..')
      throw reject(`invalid whiteout ${displayName(entryName)}`);
    const target = dir === '' ? name : `${dir}/${name}`;
    await this.removeExisting(target);
    this.specials.set(target, { op: 'whiteout', path: target });
    this.model.set(target, { kind: 'special' });
    this.stats.whiteouts++;
  }

  private async directory(rel: string, h: TarHeader): Promise<void> {
    const node = this.model.get(rel);
    const attrs: DirAttrs = { mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtime };
    if (node?.kind === 'dir') {
      this.dirAttrs.set(rel, attrs);
      this.queueXattrs(rel, h);
      return;
    }
    // A whiteout earlier in this layer followed by a new directory: overlay expresses "replace" as opaque.
    const wasWhiteout = this.specials.get(rel)?.op === 'whiteout';
    await this.removeExisting(rel);
    await this.fs.push({ t: 'mkdir', p: this.abs(rel) });
    this.model.set(rel, { kind: 'dir' });
    this.dirAttrs.set(rel, attrs);
    if (wasWhiteout) this.opaque.add(rel);
    this.queueXattrs(rel, h);
    this.stats.diskBytes += BLOCK;
  }

  private async file(rel: string, h: TarHeader, e: TarEntry): Promise<void> {
    await this.removeExisting(rel);
    const path = this.abs(rel);
    const uid = this.shift(h.uid);
    const gid = this.shift(h.gid);
    const mode = h.mode;
    // Open with the permission bits; chmod afterwards only when the umask or setuid/setgid bits (cleared by
    // chown) require it.
    const needChmod = (mode & 0o7000) !== 0 || (mode & this.umask) !== 0;
    const mtime = h.mtime;
    this.queueXattrs(rel, h);
    this.stats.diskBytes += blocks(h.size);

    if (h.size > SMALL_FILE) {
      await this.fs.push({ t: 'open', p: path, m: mode });
      for await (const chunk of e.body()) await this.fs.push({ t: 'chunk', d: exact(chunk) }, chunk.length);
      await this.fs.push({ t: 'close', u: uid, g: gid, mt: mtime, m: mode, chmod: needChmod });
      this.model.set(rel, { kind: 'file' });
      return;
    }
    const data = await e.readAll();
    await this.fs.push(
      { t: 'file', p: path, d: exact(data), m: mode, u: uid, g: gid, mt: mtime, chmod: needChmod },
      data.length,
    );
    this.model.set(rel, { kind: 'file' });
  }

  private async symlink(rel: string, h: TarHeader): Promise<void> {
    if (h.linkname === '') throw reject(`symlink ${displayName(h.name)} has an empty target`);
    await this.removeExisting(rel);
    await this.fs.push({
      t: 'symlink',
      p: this.abs(rel),
      target: raw(h.linkname),
      u: this.shift(h.uid),
      g: this.shift(h.gid),
      mt: h.mtime,
    });
    this.model.set(rel, { kind: 'symlink' });
    if (h.linkname.length > 60) this.stats.diskBytes += BLOCK;
  }

  private async hardlink(rel: string, h: TarHeader): Promise<void> {
    const target = cleanEntryPath(h.linkname);
    const t = this.model.get(target);
    if (t === undefined) {
      throw reject(
        `hardlink ${displayName(h.name)} points to ${displayName(h.linkname)}, which is not an earlier entry of this layer`,
      );
    }
    if (t.kind === 'dir') throw reject(`hardlink ${displayName(h.name)} points to a directory`);
    if (t.kind === 'special')
      throw reject(`hardlink ${displayName(h.name)} points to a whiteout, device or fifo`);
    if (target === rel) return;
    await this.removeExisting(rel);
    await this.fs.push({ t: 'link', from: this.abs(target), p: this.abs(rel) });
    this.model.set(rel, { kind: t.kind });
  }

  async finish(): Promise<void> {
    await this.fs.drain();
    const ops: SpecialOp[] = [...this.specials.values()];
    for (const dir of this.opaque)
      if (this.model.get(dir)?.kind === 'dir') ops.push({ op: 'opaque', path: dir });
    for (const [path, list] of this.xattrs) {
      const kind = this.model.get(path)?.kind;
      if (kind !== 'file' && kind !== 'dir') {
        this.stats.droppedXattrs += list.length;
        continue;
      }
      for (const x of list) ops.push({ op: 'xattr', path, name: x.name, value: x.value });
    }
    // Before directory times: creating whiteouts and fifos touches their parents' mtime.
    await applySpecialOps(this.root, ops, this.opts.python);
    for (const [rel, a] of this.dirAttrs) {
      await this.fs.push({
        t: 'dir',
        p: this.abs(rel),
        u: this.shift(a.uid),
        g: this.shift(a.gid),
        m: a.mode,
        mt: a.mtime ?? null,
      });
    }
    await this.fs.drain();
  }
}

/**
 * Extracts a layer tar stream into `dir` (which must exist, be empty and be private to this call). On error the
 * directory is left half-written; the caller removes it.
 */
export async function unpackLayer(
  source: AsyncIterable<Buffer>,
  dir: string,
  opts: UnpackOptions,
): Promise<UnpackStats> {
  const fs = new FsWriter();
  const w = new LayerWriter(dir, opts, fs);
  try {
    let entries = 0;
    for await (const entry of readTar(source)) {
      opts.signal?.throwIfAborted();
      if (opts.maxEntries !== undefined && ++entries > opts.maxEntries) {
        throw new ImageError(
          'TooLarge',
          `the layer holds more than ${opts.maxEntries} entries (image.limits.max_layer_entries)`,
        );
      }
      await w.entry(entry);
    }
    await w.finish();
  } finally {
    // On failure this abandons queued operations; the caller removes the directory afterwards.
    await fs.close();
  }
  const s = w.stats;
  if (s.skippedDevices > 0)
    opts.onWarning?.(`skipped ${s.skippedDevices} device node(s): sandboxes get no host devices`);
  if (s.clampedIds > 0) {
    opts.onWarning?.(
      `${s.clampedIds} owner id(s) at or above ${opts.idMap.size} (outside the sandbox uid range) were mapped to nobody`,
    );
  }
  return s;
}
