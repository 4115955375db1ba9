// On-disk layout of the layer cache:
//
//   <root>/layers/<id-map>/<hex>   one unpacked layer (an overlayfs lowerdir), read-only once committed
//   <root>/tmp/<name>              unpacks and oci-archive extractions in progress (private)
//   <root>/trash/<name>            directories being deleted
//
// A layer becomes visible by renaming its finished temporary directory into place; the metadata row is written
// in the same event-loop tick. tmp/ and trash/ are emptied at startup, so an interrupted unpack or delete leaves
// nothing behind and is simply redone.

import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, renameSync } from 'node:fs';
import { chmod, mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { parseDigest } from './digest.js';

export const LAYOUT_VERSION = 'v1';

/** Directory name of an id-map variant: layers unpacked with a different ownership shift are different files. */
export function idMapName(hostStart: number, size: number): string {
  return `${LAYOUT_VERSION}-${hostStart}-${size}`;
}

export class LayerStore {
  readonly layersRoot: string;
  readonly layersDir: string;
  readonly tmpDir: string;
  readonly trashDir: string;

  constructor(
    readonly rootDir: string,
    readonly idMap: string,
  ) {
    this.layersRoot = join(rootDir, 'layers');
    this.layersDir = join(this.layersRoot, idMap);
    this.tmpDir = join(rootDir, 'tmp');
    this.trashDir = join(rootDir, 'trash');
  }

  /** Creates the directories (root 0700: shifted setuid files must not be reachable by host users) and
   *  removes leftovers of interrupted unpacks and deletions. */
  async init(): Promise<void> {
    await mkdir(this.rootDir, { recursive: true, mode: 0o700 });
    await chmod(this.rootDir, 0o700);
    for (const d of [this.layersRoot, this.layersDir, this.tmpDir, this.trashDir])
      await mkdir(d, { recursive: true, mode: 0o700 });
    for (const d of [this.tmpDir, this.trashDir]) {
      for (const name of await readdir(d)) await rm(join(d, name), { recursive: true, force: true });
    }
  }

  dirName(diffId: string): string {
    const { algorithm, hex } = parseDigest(diffId);
    return algorithm === 'sha256' ? hex : `${algorithm}-${hex}`;
  }

  diffIdOfDirName(name: string): string | undefined {
    if (/^[0-9a-f]{64}$/.test(name)) return `sha256:${name}`;
    const m = /^(sha512)-([0-9a-f]{128})$/.exec(name);
    return m ? `${m[1]}:${m[2]}` : undefined;
  }

  layerDir(diffId: string, idMap = this.idMap): string {
    return join(this.layersRoot, idMap, this.dirName(diffId));
  }

  has(diffId: string): boolean {
    return existsSync(this.layerDir(diffId));
  }

  /** A fresh private directory under tmp/. */
  async makeTmp(label: string): Promise<string> {
    const dir = join(this.tmpDir, `${label}.${randomUUID()}`);
    await mkdir(dir, { mode: 0o700 });
    return dir;
  }

  /** Moves a finished unpack into place (synchronous, so the caller can record it in the same tick). */
  commitSync(tmp: string, diffId: string): string {
    const dest = this.layerDir(diffId);
    mkdirSync(this.layersDir, { recursive: true, mode: 0o700 });
    renameSync(tmp, dest);
    return dest;
  }

  /** Takes a directory out of the cache at once (synchronous rename); the slow delete happens later. */
  moveToTrashSync(path: string): string | undefined {
    if (!existsSync(path)) return undefined;
    const dest = join(this.trashDir, randomUUID());
    renameSync(path, dest);
    return dest;
  }

  async removeTrash(path: string): Promise<void> {
    await rm(path, { recursive: true, force: true });
  }

  async removeTmp(path: string): Promise<void> {
    await rm(path, { recursive: true, force: true });
  }

  /**
   * Everything under layers/: one row per entry of each id-map directory. `layer` is false for entries that
   * cannot be layers (files, foreign names); they are orphans by definition.
   */
  listOnDiskSync(): { idMap: string; name: string; path: string; layer: boolean }[] {
    const out: { idMap: string; name: string; path: string; layer: boolean }[] = [];
    for (const top of readdirSync(this.layersRoot, { withFileTypes: true })) {
      const dir = join(this.layersRoot, top.name);
      if (!top.isDirectory()) {
        out.push({ idMap: top.name, name: '', path: dir, layer: false });
        continue;
      }
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        out.push({
          idMap: top.name,
          name: e.name,
          path: join(dir, e.name),
          layer: e.isDirectory() && this.diffIdOfDirName(e.name) !== undefined,
        });
      }
    }
    return out;
  }
}
