// Turning a finished build sandbox into the committed content of a template record.
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type {
  CommittedSnapshotDraft,
  LayerRef,
  LocalFile,
  SnapshotRecord,
  SnapshotRepository,
} from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import { exportUpperAsLayer, type IdShift } from './layer-export.js';

export const LAYER_MEDIA_TYPE = 'application/vnd.oci.image.layer.v1.tar';

export interface CaptureRequest {
  /** The running build sandbox (start command running when the template has one). */
  buildSandboxId: string;
  /** The template record (uncommitted) that becomes committed with the captured content. */
  templateRecordId: string;
  /** What the record describes besides its files: context, startup, runtime versions, base image. */
  committed: CommittedSnapshotDraft;
  /** Layers the build sandbox's disk sits on besides the base image (a parent template's), bottom first. */
  baseLayers: readonly LayerRef[];
  /**
   * The build sandbox's disk as it was after the last step and before the start command ran: a directory
   * holding `upper/`. A capture that cannot keep processes (filesystem only) captures this and lets launches
   * run the start command again; a memory capture ignores it.
   */
  diskBeforeStart: string;
}

/**
 * Takes a memory+disk snapshot of the running build sandbox (processes keep their state: the start command is
 * running in every sandbox launched from it), publishes it into the repository as the committed content of
 * `templateRecordId` with the given context/startup, and returns the committed record. The build sandbox is
 * left running (the builder destroys it). On failure nothing is committed.
 */
export interface TemplateCapture {
  /** `memory` when launches resume the start command's processes; `filesystem` when they start it again. */
  readonly kind: 'memory' | 'filesystem';
  capture(req: CaptureRequest): Promise<SnapshotRecord>;
}

export interface FilesystemCaptureOptions {
  repository: SnapshotRepository;
  /** Where export files are written before the repository stores them. */
  tmpDir: string;
  idMap: IdShift;
  logger: Logger;
}

/**
 * The interim capture until CRIU-based template capture lands in the backend: the disk before the start
 * command as one OCI layer (over the base image and the parent's layers); `startup` in the committed record
 * tells launches to run the start command.
 */
export class FilesystemCapture implements TemplateCapture {
  readonly kind = 'filesystem' as const;

  constructor(private readonly opts: FilesystemCaptureOptions) {}

  async capture(req: CaptureRequest): Promise<SnapshotRecord> {
    const work = await mkdtemp(join(this.opts.tmpDir, 'capture-'));
    try {
      const layerPath = join(work, 'layer.tar');
      const started = Date.now();
      const stats = await exportUpperAsLayer(join(req.diskBeforeStart, 'upper'), layerPath, {
        idMap: this.opts.idMap,
      });
      this.opts.logger.info(
        { templateId: req.templateRecordId, ...stats, ms: Date.now() - started },
        'build disk exported as a layer',
      );
      const layers: LocalFile[] = [];
      for (const ref of req.baseLayers) {
        layers.push({ path: await this.opts.repository.fetch(ref), mediaType: ref.mediaType });
      }
      if (stats.entries > 0) layers.push({ path: layerPath, mediaType: LAYER_MEDIA_TYPE });
      return await this.opts.repository.publish(req.templateRecordId, {
        layers,
        artifacts: {},
        committed: {
          ...req.committed,
          extra: { ...(req.committed.extra ?? {}), capture: 'filesystem' },
        },
      });
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }
}
