// The backend's dirs on the sandbox volume (`RuntimeDriver.captureRoot`): `paused/<id>` (pause artifacts),
// `snapshots/<id>` (this node's copies of snapshots), `forks/` and `captures/` (work dirs of one operation) and
// `trash/` (pause artifacts being deleted in the background). A `disk/` in any of them may be a btrfs subvolume.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { RuntimeDriver } from '../runtime/driver.js';
import type { Logger } from '../util/log.js';

/** The marker a complete set of pause artifacts or a complete local snapshot holds. */
export const COMPLETE = 'complete';

export class CaptureDirs {
  private readonly trashing = new Set<Promise<void>>();
  /** Per sandbox, the discard of its pause artifacts still running after a resident resume answered. */
  private readonly discarding = new Map<string, Promise<void>>();

  constructor(
    private readonly runtime: Pick<RuntimeDriver, 'captureRoot' | 'removeDisk'>,
    private readonly log: Logger,
  ) {}

  get root(): string {
    return this.runtime.captureRoot;
  }

  pausedDir(id: string): string {
    return join(this.root, 'paused', id);
  }

  snapshotDir(snapshotId: string): string {
    return join(this.root, 'snapshots', snapshotId);
  }

  /** Removes a dir that may hold a disk snapshot (`disk/`, possibly a btrfs subvolume). */
  async removeTree(dir: string): Promise<void> {
    if (existsSync(join(dir, 'disk'))) await this.runtime.removeDisk(join(dir, 'disk'));
    await rm(dir, { recursive: true, force: true });
  }

  /** Removes a fork or capture work dir (`memory/`, `disk/` possibly a btrfs subvolume), ignoring failures. */
  async discardWorkDir(work: string): Promise<void> {
    if (existsSync(join(work, 'disk'))) await this.runtime.removeDisk(join(work, 'disk')).catch(() => {});
    await rm(work, { recursive: true, force: true });
  }

  async removePauseArtifacts(id: string): Promise<void> {
    const dir = this.pausedDir(id);
    if (existsSync(dir)) await this.removeTree(dir);
  }

  /**
   * Moves a sandbox's pause artifacts out of the way at once (a rename on the same volume) and deletes them in
   * the background: deleting a checkpoint of hundreds of MB must not delay a resume or a kill.
   */
  async discardPauseArtifacts(id: string): Promise<void> {
    const dir = this.pausedDir(id);
    if (!existsSync(dir)) return;
    const trash = join(this.root, 'trash', randomUUID());
    await mkdir(join(this.root, 'trash'), { recursive: true, mode: 0o700 });
    await rename(dir, trash);
    const job = this.removeTree(trash)
      .catch((err: unknown) => this.log.warn({ err, dir: trash }, 'could not delete old pause artifacts'))
      .finally(() => this.trashing.delete(job));
    this.trashing.add(job);
  }

  discardInBackground(id: string): void {
    const job: Promise<void> = this.discardPauseArtifacts(id)
      .catch((err: unknown) => this.log.warn({ err, sandboxId: id }, 'could not remove pause artifacts'))
      .finally(() => {
        if (this.discarding.get(id) === job) this.discarding.delete(id);
      });
    this.discarding.set(id, job);
  }

  /** Waits until a background discard no longer touches the sandbox's pause dir (a new pause writes there). */
  async discardSettled(id: string): Promise<void> {
    await this.discarding.get(id);
  }

  /** Waits for background deletions (shutdown, tests). */
  async whenIdle(): Promise<void> {
    await Promise.all([...this.discarding.values()]);
    await Promise.all([...this.trashing]);
  }
}
