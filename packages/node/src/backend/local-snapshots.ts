// This node's copies of snapshots (`<captureRoot>/snapshots/<id>/{memory,disk}`): downloaded from the repository
// the first time a launch needs them, or kept from the capture that made them.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { SnapshotRecord } from '../snapshot/index.js';
import { COMPLETE } from './capture-dirs.js';
import type { BackendContext } from './context.js';
import { extractArchive } from './disk-archive.js';

/** The snapshot's memory and disk on this node, downloaded from the repository when missing. */
export async function ensureLocalSnapshot(ctx: BackendContext, snapshot: SnapshotRecord): Promise<string> {
  const { o, dirs } = ctx;
  const dir = dirs.snapshotDir(snapshot.id);
  if (existsSync(join(dir, COMPLETE))) return dir;
  await ctx.snapshotDownloads.run(snapshot.id, async () => {
    if (existsSync(join(dir, COMPLETE))) return;
    const committed = snapshot.committed!;
    const tmp = `${dir}.tmp-${randomUUID()}`;
    await mkdir(tmp, { recursive: true, mode: 0o711 });
    try {
      if (committed.artifacts.memory) {
        await extractArchive(
          await o.repository.fetchArtifact(snapshot.id, 'memory'),
          join(tmp, 'memory'),
          committed.artifacts.memory,
        );
      }
      const disk = committed.layers[0];
      const files = o.runtime.diskFilesDir(join(tmp, 'disk'));
      if (disk) await extractArchive(await o.repository.fetch(disk), files, disk);
      else await mkdir(files, { recursive: true });
      await writeFile(join(tmp, COMPLETE), '');
      await removeLocalSnapshot(ctx, snapshot.id);
      await rename(tmp, dir);
    } catch (err) {
      await rm(tmp, { recursive: true, force: true });
      throw err;
    }
  });
  return dir;
}

/** Drops this node's local copy of a snapshot (it is fetched again from the repository when needed). */
export async function removeLocalSnapshot(ctx: BackendContext, snapshotId: string): Promise<void> {
  const dir = ctx.dirs.snapshotDir(snapshotId);
  if (!existsSync(dir)) return;
  if (existsSync(join(dir, 'disk'))) await ctx.o.runtime.removeDisk(join(dir, 'disk')).catch(() => {});
  await rm(dir, { recursive: true, force: true });
}
