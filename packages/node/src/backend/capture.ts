// Captures of a running sandbox (snapshots, memory templates): a checkpoint left running plus its disk, into a
// work dir `captures/<record id>`, published into the repository in the capture format (capture-format.ts) and kept
// as this node's local copy. A disk-only template capture (no memory) is published from a saved disk.
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CaptureTarget, CapturedSandbox } from '../orchestrator/backend.js';
import type { CommandContext, PublishInput } from '../snapshot/index.js';
import { COMPLETE } from './capture-dirs.js';
import { DISK_MEDIA_TYPE } from './capture-format.js';
import type { SandboxNetworkSettings } from '../orchestrator/types.js';
import type { VolumeMountRecord } from '../volume/types.js';
import type { BackendContext } from './context.js';
import { archiveDir } from './disk-archive.js';
import { removeLocalSnapshot } from './local-snapshots.js';
import type { BackendState, CaptureExtra } from './record-state.js';

/** What a capture is taken of: a sandbox's container and backend state, and what its record says. */
export interface CaptureSubject {
  containerId: string;
  state: BackendState;
  /** Recorded as the capture's source (empty: a template whose layers all came from the build cache). */
  sourceSandboxId: string;
  secure: boolean;
  customExtensionParams?: Record<string, unknown>;
  volumeMounts?: VolumeMountRecord[];
  /** The sandbox's network settings, recorded for launches of the capture (absent: a template's capture). */
  network?: SandboxNetworkSettings;
}

type Committed = PublishInput['committed'];

/** The committed content of a capture of `s` (byte for byte what launches and catalog reads decode). */
function committedOf(
  ctx: BackendContext,
  s: CaptureSubject,
  context: CommandContext,
  startup: CaptureTarget['startup'],
  runtimeVersions: Record<string, string>,
): Committed {
  const extra: CaptureExtra = {
    sourceSandboxId: s.sourceSandboxId,
    sourceSecure: s.secure,
    toolsVersion: s.state.toolsVersion,
    envdEnv: s.state.envdEnv,
    rootfs: s.state.rootfs,
    ...(s.customExtensionParams ? { customExtensionParams: s.customExtensionParams } : {}),
    ...(s.volumeMounts?.length ? { volumeMounts: s.volumeMounts } : {}),
    ...(s.network ? { network: s.network } : {}),
  };
  return {
    context,
    ...(startup ? { startup: { ...startup, context } } : {}),
    runtimeVersions: { ...runtimeVersions, tools: s.state.toolsVersion },
    virtualizationMode: ctx.o.runtime.virtualizationMode,
    baseImage: { reference: s.state.imageRef, manifestDigest: s.state.manifestDigest },
    extra: ctx.records.encodeCapture(extra),
  };
}

/** Checkpoints `s` (memory + disk, left running) into its work dir; the handle publishes it. */
export async function captureRunning(
  ctx: BackendContext,
  s: CaptureSubject,
  target: CaptureTarget & { context: CommandContext },
): Promise<CapturedSandbox> {
  const { o, dirs } = ctx;
  const work = join(dirs.root, 'captures', target.recordId);
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true, mode: 0o711 });
  try {
    await target.createRecord?.();
    await o.runtime.checkpoint(s.containerId, join(work, 'memory'), {
      leaveRunning: true,
      diskDest: join(work, 'disk'),
    });
  } catch (err) {
    await dirs.discardWorkDir(work);
    throw err;
  }
  const committed = committedOf(ctx, s, target.context, target.startup, o.runtimeVersions);
  return { publish: () => publishCapture(ctx, target.recordId, work, committed) };
}

/** Archives a capture's work dir into the repository, then keeps it as this node's copy of the snapshot. */
async function publishCapture(
  ctx: BackendContext,
  recordId: string,
  work: string,
  committed: Committed,
): Promise<void> {
  const { o, dirs } = ctx;
  try {
    await Promise.all([
      archiveDir(join(work, 'memory'), join(work, 'memory.tar')),
      archiveDir(o.runtime.diskFilesDir(join(work, 'disk')), join(work, 'disk.tar')),
    ]);
    await o.repository.publish(recordId, {
      layers: [{ path: join(work, 'disk.tar'), mediaType: DISK_MEDIA_TYPE }],
      artifacts: {
        memory: { path: join(work, 'memory.tar'), mediaType: o.runtime.memoryMediaTypes.capture },
      },
      committed,
    });
    // What was just captured becomes this node's local copy of the snapshot: launches need no download.
    await rm(join(work, 'memory.tar'), { force: true });
    await rm(join(work, 'disk.tar'), { force: true });
    await writeFile(join(work, COMPLETE), '');
    await mkdir(join(dirs.root, 'snapshots'), { recursive: true, mode: 0o711 });
    await removeLocalSnapshot(ctx, recordId);
    await rename(work, dirs.snapshotDir(recordId));
  } catch (err) {
    await dirs.discardWorkDir(work);
    throw err;
  }
}

/**
 * Publishes the files of the saved disk `disk` as the committed content of `recordId` (no memory: launches boot
 * fresh on it). `runtimeVersions` is what disk-only template captures record.
 */
export async function publishDisk(
  ctx: BackendContext,
  s: CaptureSubject,
  target: { recordId: string; context: CommandContext; startup?: CaptureTarget['startup'] },
  disk: string,
  tmpDir: string,
  runtimeVersions: Record<string, string>,
): Promise<void> {
  const work = await mkdtemp(join(tmpDir, 'capture-'));
  try {
    const archive = join(work, 'disk.tar');
    await archiveDir(ctx.o.runtime.diskFilesDir(disk), archive);
    await ctx.o.repository.publish(target.recordId, {
      layers: [{ path: archive, mediaType: DISK_MEDIA_TYPE }],
      artifacts: {},
      committed: committedOf(ctx, s, target.context, target.startup, runtimeVersions),
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
