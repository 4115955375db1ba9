// The layer cache of template builds: after every step that can change the disk, the build sandbox's disk is
// saved (a copy-on-write capture of its disk, milliseconds on the CoW volume) under a key that hashes the base
// (image manifest digest or parent template layers) and every step so far (type, args, files hash). A later
// build whose steps start the same way starts its build sandbox on the saved disk of the longest such prefix
// and runs only the rest.
//
//   <dir>/<key>           the saved disk (made by RuntimeDriver.captureDisk)
//   <dir>/<key>.json      what the steps had set by then; written last: an entry exists only when it exists
//   <dir>/tmp-*           snapshots being made; removed at startup
//
// Entries are node-local. Eviction: least recently used beyond `maxEntries`, and anything unused for `maxAgeMs`.
import { createHash, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../util/log.js';
import { treeBytes } from '../util/disk-usage.js';
import type { Artefact } from './build-artefacts.js';
import type { BuildState } from './build-state.js';

export interface CacheEntry {
  key: string;
  /** A saved disk, usable as a runtime disk source. */
  dir: string;
  /** Number of steps the entry covers. */
  steps: number;
  state: BuildState;
}

interface EntryMeta {
  version: 1;
  key: string;
  steps: number;
  state: BuildState;
  createdAt: string;
}

export interface BuildCacheOptions {
  dir: string;
  /** Removes a saved disk (btrfs subvolumes need more than rm). */
  removeDisk(path: string): Promise<void>;
  /** Where the files of a saved disk are (`RuntimeDriver.diskFilesDir`): an entry without them is not used. */
  diskFilesDir(disk: string): string;
  maxEntries: number;
  maxAgeMs: number;
  logger: Logger;
}

const KEY_RE = /^[0-9a-f]{64}$/;

/** key_0 = H(base); key_k = H(key_{k-1}, step k). */
export function cacheKeys(baseKey: string, stepKeyTexts: readonly string[]): string[] {
  const keys: string[] = [];
  let prev = createHash('sha256').update(`aenv-template-cache-v1\n${baseKey}`).digest('hex');
  keys.push(prev);
  for (const t of stepKeyTexts) {
    prev = createHash('sha256').update(`${prev}\n${t}`).digest('hex');
    keys.push(prev);
  }
  return keys;
}

export class BuildCache {
  /** Bytes of each entry, measured once (an entry never changes after it is saved). */
  private readonly sizes = new Map<string, number>();

  constructor(private readonly opts: BuildCacheOptions) {}

  async init(): Promise<void> {
    await mkdir(this.opts.dir, { recursive: true, mode: 0o700 });
    for (const name of await readdir(this.opts.dir)) {
      const path = join(this.opts.dir, name);
      if (name.startsWith('tmp-'))
        await this.opts.removeDisk(path).catch(() => rm(path, { recursive: true, force: true }));
      else if (KEY_RE.test(name) && !existsSync(`${path}.json`)) await this.opts.removeDisk(path);
    }
    await this.evict();
  }

  private metaPath(key: string): string {
    return join(this.opts.dir, `${key}.json`);
  }

  /** The entry of `key`, marking it used; undefined when absent or unreadable. */
  async get(key: string): Promise<CacheEntry | undefined> {
    const dir = join(this.opts.dir, key);
    try {
      const meta = JSON.parse(await readFile(this.metaPath(key), 'utf8')) as EntryMeta;
      if (meta.version !== 1 || meta.key !== key || !existsSync(this.opts.diskFilesDir(dir)))
        return undefined;
      const now = new Date();
      await utimes(this.metaPath(key), now, now).catch(() => {});
      return { key, dir, steps: meta.steps, state: meta.state };
    } catch {
      return undefined;
    }
  }

  /** The entry covering the most steps among `keys[1..limit]` (keys[i] covers i steps). */
  async longestPrefix(keys: readonly string[], limit: number): Promise<CacheEntry | undefined> {
    for (let i = Math.min(limit, keys.length - 1); i >= 1; i--) {
      const e = await this.get(keys[i]!);
      if (e && e.steps === i) return e;
    }
    return undefined;
  }

  /** Saves an entry; `snapshot(dest)` must create the saved disk `dest`. An existing entry of the key is kept. */
  async save(
    key: string,
    steps: number,
    state: BuildState,
    snapshot: (dest: string) => Promise<void>,
  ): Promise<void> {
    if (existsSync(this.metaPath(key))) return;
    const tmp = join(this.opts.dir, `tmp-${randomUUID()}`);
    try {
      await snapshot(tmp);
      const dest = join(this.opts.dir, key);
      if (existsSync(dest)) {
        // Another build of the same steps got there first (or is writing its meta): keep its entry.
        await this.opts.removeDisk(tmp);
        return;
      }
      await rename(tmp, dest);
      const meta: EntryMeta = { version: 1, key, steps, state, createdAt: new Date().toISOString() };
      await writeFile(`${this.metaPath(key)}.tmp`, JSON.stringify(meta), { mode: 0o600 });
      await rename(`${this.metaPath(key)}.tmp`, this.metaPath(key));
    } catch (e) {
      await this.opts.removeDisk(tmp).catch(() => {});
      throw e;
    }
  }

  /** Drops entries unused for maxAgeMs and the least recently used beyond maxEntries. */
  async evict(now = Date.now()): Promise<number> {
    const entries: { key: string; used: number }[] = [];
    for (const name of await readdir(this.opts.dir)) {
      const m = /^([0-9a-f]{64})\.json$/.exec(name);
      if (!m) continue;
      const st = await stat(join(this.opts.dir, name)).catch(() => undefined);
      if (st) entries.push({ key: m[1]!, used: st.mtimeMs });
    }
    entries.sort((a, b) => b.used - a.used);
    let removed = 0;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (i < this.opts.maxEntries && now - e.used <= this.opts.maxAgeMs) continue;
      await this.remove(e.key);
      removed++;
    }
    if (removed)
      this.opts.logger.info({ removed, kept: entries.length - removed }, 'template build cache evicted');
    return removed;
  }

  /** Every entry as a build artefact (its size on disk, its last use), for the node-wide artefact quota. */
  async artefacts(): Promise<Artefact[]> {
    const out: Artefact[] = [];
    for (const name of await readdir(this.opts.dir).catch(() => [] as string[])) {
      const m = /^([0-9a-f]{64})\.json$/.exec(name);
      if (!m) continue;
      const key = m[1]!;
      const st = await stat(join(this.opts.dir, name)).catch(() => undefined);
      if (!st) continue;
      let bytes = this.sizes.get(key);
      if (bytes === undefined) {
        bytes = (await treeBytes(join(this.opts.dir, key))) + st.blocks * 512;
        this.sizes.set(key, bytes);
      }
      out.push({ kind: 'cache', name: key, bytes, usedAt: st.mtimeMs, remove: () => this.remove(key) });
    }
    return out;
  }

  async remove(key: string): Promise<void> {
    this.sizes.delete(key);
    // Meta first: without it the entry no longer exists, whatever happens to the directory.
    await rm(this.metaPath(key), { force: true });
    await this.opts.removeDisk(join(this.opts.dir, key));
  }
}
