// Template disk layers from the snapshot repository, unpacked once per node into directories usable as overlay
// lower dirs (above the image's layers):
//
//   <dir>/<idmap>/<hex>   one unpacked layer, read-only once renamed into place
//   <dir>/tmp/            unpacks in progress; emptied at startup
//
// The unpacking itself is the image cache's (whiteouts, opaque dirs, ownership shift, path safety).
import { randomUUID } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { chmod, mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { unpackLayer, type IdMap } from '../image/layer-unpacker.js';
import type { LayerRef, SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';

export interface TemplateLayerStoreOptions {
  dir: string;
  repository: SnapshotRepository;
  idMap: IdMap;
  logger: Logger;
}

const DIGEST_RE = /^sha256:([0-9a-f]{64})$/;

export class TemplateLayerStore {
  private readonly flights = new Map<string, Promise<string>>();
  private readonly layersDir: string;
  private readonly tmpDir: string;

  constructor(private readonly opts: TemplateLayerStoreOptions) {
    this.layersDir = join(opts.dir, `v1-${opts.idMap.hostStart}-${opts.idMap.size}`);
    this.tmpDir = join(opts.dir, 'tmp');
  }

  async init(): Promise<void> {
    for (const d of [this.opts.dir, this.layersDir, this.tmpDir])
      await mkdir(d, { recursive: true, mode: 0o700 });
    for (const name of await readdir(this.tmpDir))
      await rm(join(this.tmpDir, name), { recursive: true, force: true });
  }

  private dirOf(digest: string): string {
    const m = DIGEST_RE.exec(digest);
    if (!m) throw new Error(`invalid layer digest ${JSON.stringify(digest)}`);
    return join(this.layersDir, m[1]!);
  }

  /** Lower dirs for `layers` (bottom first), unpacking the ones this node does not have yet. */
  async lowerDirs(layers: readonly LayerRef[]): Promise<string[]> {
    const out: string[] = [];
    for (const l of layers) out.push(await this.ensure(l));
    return out;
  }

  private ensure(layer: LayerRef): Promise<string> {
    const dest = this.dirOf(layer.digest);
    if (existsSync(dest)) return Promise.resolve(dest);
    let flight = this.flights.get(layer.digest);
    if (!flight) {
      flight = this.unpack(layer, dest).finally(() => this.flights.delete(layer.digest));
      this.flights.set(layer.digest, flight);
    }
    return flight;
  }

  private async unpack(layer: LayerRef, dest: string): Promise<string> {
    const started = Date.now();
    const blob = await this.opts.repository.fetch(layer);
    const tmp = join(this.tmpDir, randomUUID());
    await mkdir(tmp, { mode: 0o700 });
    try {
      const stats = await unpackLayer(createReadStream(blob), tmp, {
        idMap: this.opts.idMap,
        onWarning: (message) => this.opts.logger.warn({ digest: layer.digest }, message),
      });
      // The merged root of a sandbox takes its attributes from the upper; the lower root only needs traversal.
      await chmod(tmp, 0o755);
      await rename(tmp, dest);
      this.opts.logger.info(
        { digest: layer.digest, entries: stats.entries, ms: Date.now() - started },
        'template layer unpacked',
      );
      return dest;
    } catch (e) {
      await rm(tmp, { recursive: true, force: true });
      throw e;
    }
  }

  /** Removes unpacked layers whose digest is not in `keep` (layers of templates that were deleted). */
  async gc(keep: ReadonlySet<string>): Promise<string[]> {
    const removed: string[] = [];
    for (const name of await readdir(this.layersDir).catch(() => [] as string[])) {
      const digest = `sha256:${name}`;
      if (keep.has(digest) || this.flights.has(digest)) continue;
      const trash = join(this.tmpDir, `gc-${randomUUID()}`);
      await rename(join(this.layersDir, name), trash);
      await rm(trash, { recursive: true, force: true });
      removed.push(digest);
    }
    return removed;
  }
}
