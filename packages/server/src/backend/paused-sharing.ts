import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../util/log.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { RuntimeDriver } from '../runtime/driver.js';
import { archiveDir } from './disk-archive.js';
import { sandboxContext } from './capture-format.js';

export const PAUSED_DISK_MEDIA_TYPE = 'application/vnd.aenv.paused-disk.tar';

/**
 * Copies paused sandboxes into a shared snapshot repository (oss), so that another node with the same
 * repository can resume them; the local artifacts stay authoritative for this node. The copy happens after the
 * pause is already durable locally, so it never slows a pause down; resume and kill wait for it, then drop it.
 */
export class PausedSharing {
  private readonly inflight = new Map<string, Promise<void>>();

  constructor(
    private readonly repository: SnapshotRepository,
    private readonly runtime: Pick<RuntimeDriver, 'diskFilesDir' | 'memoryMediaTypes'>,
    private readonly logger: Logger,
  ) {}

  /** Starts copying the artifacts in `dir` (`memory/`, `disk/`) of a paused sandbox. */
  share(record: SandboxRecord, dir: string, runtimeVersions: Record<string, string>, mode: string): void {
    const job = this.copy(record, dir, runtimeVersions, mode).catch((err: unknown) =>
      this.logger.warn({ err, sandboxId: record.id }, 'could not copy the paused sandbox to the repository'),
    );
    this.inflight.set(record.id, job);
    void job.finally(() => {
      if (this.inflight.get(record.id) === job) this.inflight.delete(record.id);
    });
  }

  private async copy(
    record: SandboxRecord,
    dir: string,
    runtimeVersions: Record<string, string>,
    mode: string,
  ) {
    const work = join(dir, 'share');
    try {
      const hasMemory = record.paused?.kind === 'memory';
      await Promise.all([
        hasMemory ? archiveDir(join(dir, 'memory'), join(work, 'memory.tar')) : Promise.resolve(),
        archiveDir(this.runtime.diskFilesDir(join(dir, 'disk')), join(work, 'disk.tar')),
      ]);
      const created = await this.repository.create({
        source: { kind: 'paused', sandboxId: record.id },
        resources: record.resources,
      });
      await this.repository.publish(created.id, {
        layers: [{ path: join(work, 'disk.tar'), mediaType: PAUSED_DISK_MEDIA_TYPE }],
        artifacts: hasMemory
          ? { memory: { path: join(work, 'memory.tar'), mediaType: this.runtime.memoryMediaTypes.paused } }
          : {},
        committed: {
          context: sandboxContext(record),
          runtimeVersions,
          virtualizationMode: mode,
          extra: { sandbox: { ...record } },
        },
      });
      this.logger.info(
        { sandboxId: record.id, recordId: created.id },
        'paused sandbox copied to the repository',
      );
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /** Waits for a copy in progress and removes every shared copy of the sandbox (on resume and kill). */
  async forget(sandboxId: string): Promise<void> {
    await this.inflight.get(sandboxId);
    for (const r of await this.repository.list({ kind: 'paused', sandboxId })) {
      await this.repository
        .delete(r.id)
        .catch((err: unknown) =>
          this.logger.warn({ err, sandboxId }, 'could not remove the shared copy of a paused sandbox'),
        );
    }
  }
}
