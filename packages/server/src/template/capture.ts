// Turning a finished build sandbox into the committed content of a template record, in the container backend's
// capture format, so that `POST /sandboxes` launches it through the backend's `startFromCapture`:
//   - layers[0] = the files of the sandbox's disk (archived by backend/disk-archive.ts), mediaType
//     DISK_MEDIA_TYPE; artifacts.memory = the runtime's saved memory (memory captures only);
//   - extra = what the backend's CaptureExtra holds (tools version, envd env, rootfs, source).
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { CaptureTarget, SandboxBackend } from '../orchestrator/backend.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import type { CommandContext, SnapshotRecord, SnapshotRepository } from '../snapshot/index.js';
import { archiveDir } from '../backend/disk-archive.js';
import { DISK_MEDIA_TYPE } from '../backend/capture-format.js';
import type { BackendRecordCodec, CaptureExtra } from '../backend/record-state.js';
import type { RootfsSpec } from '../runtime/driver.js';

/** The build sandbox as the runtime knows it. */
export interface CapturedSandbox {
  id: string;
  slotIndex: number;
  hostInteractionIp: string;
  /** The rootfs it runs on (the base image's layers). */
  rootfs: RootfsSpec;
  imageRef: string;
  manifestDigest: string;
  toolsVersion: string;
  /** Environment its init (envd) was started with. */
  envdEnv: Record<string, string>;
  resources: { cpuCount: number; memoryMB: number; diskSizeMB: number };
}

export interface CaptureRequest {
  sandbox: CapturedSandbox;
  /** The template record (uncommitted) that becomes committed with the captured content. */
  templateRecordId: string;
  context: CommandContext;
  /** The start command (running in the sandbox when the capture has memory). */
  startup?: { startCmd: string; readyCmd: string };
  /**
   * The build sandbox's disk as it was after the last step and before the start command ran (a saved
   * disk). A capture without memory takes this one (no pid or lock files of a start command that
   * is not running); a memory capture takes the disk at the instant of its checkpoint.
   */
  diskBeforeStart: string;
}

/**
 * Takes a snapshot of the build sandbox and publishes it into the repository as the committed content of
 * `templateRecordId` with the given context/startup, and returns the committed record. A `memory` capture keeps
 * the processes (the start command runs in every sandbox launched from it); a `filesystem` capture keeps the
 * disk only (launches boot fresh on it). The build sandbox is left running; on failure nothing is committed.
 */
export interface TemplateCapture {
  readonly kind: 'memory' | 'filesystem';
  capture(req: CaptureRequest): Promise<SnapshotRecord>;
}

/** The backend's CaptureExtra for a build sandbox. */
function captureExtra(s: CapturedSandbox): CaptureExtra {
  return {
    sourceSandboxId: s.id,
    sourceSecure: false,
    toolsVersion: s.toolsVersion,
    envdEnv: s.envdEnv,
    rootfs: s.rootfs,
  };
}

/**
 * Memory checkpoint (left running) + disk, through the backend's `capture`. The build sandbox is handed over as the
 * sandbox record the backend would have made for it (the fields its capture reads).
 */
export class BackendCapture implements TemplateCapture {
  readonly kind = 'memory' as const;

  constructor(
    private readonly backend: Pick<SandboxBackend, 'capture'>,
    private readonly repository: SnapshotRepository,
    private readonly records: BackendRecordCodec,
  ) {}

  async capture(req: CaptureRequest): Promise<SnapshotRecord> {
    const s = req.sandbox;
    const now = new Date().toISOString();
    const record: SandboxRecord = {
      id: s.id,
      templateId: req.templateRecordId,
      state: 'running',
      createdAt: now,
      expiresAt: null,
      timeoutSecs: 0,
      resources: s.resources,
      metadata: {},
      envVars: {},
      secure: false,
      network: { allowPublicTraffic: true, allowOut: [], denyOut: [], allowInternetAccess: null },
      onTimeout: 'kill',
      autoResume: false,
      envdVersion: '',
      defaultUser: req.context.user ?? 'root',
      runtime: { slotIndex: s.slotIndex, hostInteractionIp: s.hostInteractionIp, instanceId: s.id },
      backend: this.records.encodeState({
        imageRef: s.imageRef,
        manifestDigest: s.manifestDigest,
        rootfs: s.rootfs,
        toolsVersion: s.toolsVersion,
        envdEnv: s.envdEnv,
      }),
    };
    const target: CaptureTarget = {
      recordId: req.templateRecordId,
      context: req.context,
      ...(req.startup ? { startup: req.startup } : {}),
    };
    await (await this.backend.capture(record, target)).publish();
    return this.repository.get(req.templateRecordId);
  }
}

export interface FilesystemCaptureOptions {
  repository: SnapshotRepository;
  /** Where the disk archive is written before the repository stores it. */
  tmpDir: string;
  runtimeVersions: Record<string, string>;
  virtualizationMode: string;
  records: BackendRecordCodec;
  /** Where the files of a saved disk are (`RuntimeDriver.diskFilesDir`). */
  diskFilesDir(disk: string): string;
}

/** The disk before the start command, without memory: for templates that have no start command to keep. */
export class FilesystemCapture implements TemplateCapture {
  readonly kind = 'filesystem' as const;

  constructor(private readonly opts: FilesystemCaptureOptions) {}

  async capture(req: CaptureRequest): Promise<SnapshotRecord> {
    const work = await mkdtemp(join(this.opts.tmpDir, 'capture-'));
    try {
      const disk = join(work, 'disk.tar');
      await archiveDir(this.opts.diskFilesDir(req.diskBeforeStart), disk);
      const s = req.sandbox;
      return await this.opts.repository.publish(req.templateRecordId, {
        layers: [{ path: disk, mediaType: DISK_MEDIA_TYPE }],
        artifacts: {},
        committed: {
          context: req.context,
          ...(req.startup ? { startup: { ...req.startup, context: req.context } } : {}),
          runtimeVersions: { ...this.opts.runtimeVersions, tools: s.toolsVersion },
          virtualizationMode: this.opts.virtualizationMode,
          baseImage: { reference: s.imageRef, manifestDigest: s.manifestDigest },
          extra: this.opts.records.encodeCapture(captureExtra(s)),
        },
      });
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }
}
