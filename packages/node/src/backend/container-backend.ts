// The container backend: a sandbox = a netns slot + a runtime driver sandbox on cached image layers whose init
// runs envd from the tools mount, put together by the sandbox factory (sandbox-factory.ts). Pause, fork and
// snapshots are the driver's memory checkpoints plus copy-on-write disk captures kept on the sandbox volume.
// This class only wires the operations, one module each: create.ts, launch.ts, pause.ts, fork.ts, capture.ts,
// recover.ts, template-builds.ts.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitForEnvd } from '@aenv/protocol';
import { SingleFlight } from '../image/single-flight.js';
import type { EgressPolicy } from '../network/types.js';
import type {
  AdoptionHooks,
  BeforeInstanceStart,
  CaptureTarget,
  CapturedSandbox,
  ForkChildResult,
  LaunchSource,
  RecoveryOutcome,
  SandboxBackend,
  StartResult,
} from '../orchestrator/backend.js';
import type { PausedState, SandboxRecord } from '../orchestrator/types.js';
import { captureRunning } from './capture.js';
import { CaptureDirs, COMPLETE } from './capture-dirs.js';
import { sandboxContext } from './capture-format.js';
import {
  containerIdOf,
  leaseHolder,
  setState,
  stateIfAny,
  stateOf,
  type BackendContext,
  type ContainerBackendOptions,
} from './context.js';
import { SandboxCreation, type BootSpec } from './create.js';
import { forkSandbox } from './fork.js';
import { imageFor } from './launch.js';
import { removeLocalSnapshot } from './local-snapshots.js';
import { adoptSharedPause } from './paused-adoption.js';
import { PausedSharing } from './paused-sharing.js';
import { releaseSlot, SandboxPausing } from './pause.js';
import { BackendRecordCodec, type BackendState } from './record-state.js';
import { SandboxRecovery } from './recover.js';
import { SandboxFactory } from './sandbox-factory.js';
import { TemplateBuilds } from './template-builds.js';
import { phase } from '../util/phases.js';

export type { ContainerBackendOptions } from './context.js';
import { leaseDrives, releaseDriveLeases, withLayers } from './drives.js';

export class ContainerBackend implements SandboxBackend {
  /** Reads and writes what this backend keeps on records and captures. */
  readonly records: BackendRecordCodec;
  /** Sandboxes and captures for template builds (template/build-host.ts). */
  readonly templateBuilds: TemplateBuilds;
  private readonly ctx: BackendContext;
  private readonly sharing: PausedSharing | undefined;
  private readonly creation: SandboxCreation;
  private readonly pausing: SandboxPausing;
  private readonly recovery: SandboxRecovery;

  constructor(opts: ContainerBackendOptions) {
    this.records = new BackendRecordCodec(opts.runtime.recordCodec);
    this.ctx = {
      o: opts,
      factory: new SandboxFactory(opts),
      records: this.records,
      dirs: new CaptureDirs(opts.runtime, opts.logger),
      snapshotDownloads: new SingleFlight<void>(),
      log: opts.logger,
    };
    if (opts.sharePaused) {
      this.sharing = new PausedSharing(
        opts.repository,
        opts.runtime,
        opts.logger,
        opts.nodeId ?? 'local-node',
        opts.volumes,
        opts.pausedRetentionSecs,
      );
    }
    this.creation = new SandboxCreation(this.ctx);
    this.pausing = new SandboxPausing(this.ctx, this.sharing);
    this.recovery = new SandboxRecovery(this.ctx, (r) => this.destroy(r));
    this.templateBuilds = new TemplateBuilds(this.ctx);
  }

  pausedDir(id: string): string {
    return this.ctx.dirs.pausedDir(id);
  }

  /** The runtime's id of a running sandbox's container (its cgroup and dir name; per-sandbox metrics read them). */
  containerIdOf(record: SandboxRecord): string {
    return containerIdOf(this.ctx, record);
  }

  start(
    record: SandboxRecord,
    source: LaunchSource,
    policy: EgressPolicy,
    beforeStart?: BeforeInstanceStart,
  ): Promise<StartResult> {
    return this.creation.start(record, source, policy, beforeStart);
  }

  /** Boots `templateId`'s pre-started sandboxes now (e.g. the base template at startup). */
  prewarm(source: LaunchSource, resources: BootSpec['resources']): void {
    this.creation.prewarm(source, resources);
  }

  /** Removes the pre-started sandboxes and waits for background deletions (shutdown). */
  async close(): Promise<void> {
    await this.creation.close();
    await this.whenIdle();
  }

  async destroy(record: SandboxRecord): Promise<void> {
    const o = this.ctx.o;
    let state: BackendState | undefined;
    try {
      state = stateIfAny(this.ctx, record);
    } catch (err) {
      // A kill always goes through: what the record cannot say is taken from its id.
      this.ctx.log.warn(
        { err, sandboxId: record.id },
        'the stored backend state of a sandbox cannot be read',
      );
    }
    await phase('destroy', async () => {
      await this.pausing.releasesSettled(record.id);
      await o.runtime.destroy(state?.containerId ?? record.id);
    });
    o.idRanges.release(record.id);
    // The slot's teardown goes on after the answer; the slot is not handed out again before it is clean.
    releaseSlot(this.ctx, record.id, record.runtime?.slotIndex ?? state?.residentSlot);
    await this.sharing?.release(record.id).catch((err: unknown) => {
      this.ctx.log.warn({ err, sandboxId: record.id }, 'could not release the shared claim of a sandbox');
    });
    await phase('discard', async () => {
      await this.ctx.dirs.discardSettled(record.id);
      await this.ctx.dirs.discardPauseArtifacts(record.id);
    });
    o.images.releaseLease(leaseHolder(record.id));
    releaseDriveLeases(o.images, leaseHolder(record.id));
  }

  /**
   * A sandbox this node does not know: if another node paused it into the shared repository, it becomes a
   * paused sandbox of this node (paused-adoption.ts). Undefined when the repository has nothing for it.
   */
  async adoptShared(sandboxId: string, hooks: AdoptionHooks = {}): Promise<SandboxRecord | undefined> {
    if (!this.sharing) return undefined;
    const ctx = this.ctx;
    return adoptSharedPause(
      {
        repository: ctx.o.repository,
        nodeId: this.sharing.nodeId,
        logger: ctx.log,
        pausedDir: (id) => ctx.dirs.pausedDir(id),
        diskFilesDir: (disk) => ctx.o.runtime.diskFilesDir(disk),
        markComplete: (dir, paused) => writeFile(join(dir, COMPLETE), JSON.stringify(paused)),
        ...(ctx.o.volumes ? { volumes: ctx.o.volumes } : {}),
        ...(hooks.found ? { onFound: hooks.found } : {}),
        ...(hooks.claimed ? { onClaimed: hooks.claimed } : {}),
        localize: async (record) => {
          const state = stateOf(ctx, record);
          const image = await imageFor(ctx, state.imageRef, state.manifestDigest);
          ctx.o.images.acquireLease(leaseHolder(record.id), image.manifestDigest);
          const drives = await withLayers(state.rootfs.drives ?? [], (ref, digest) =>
            imageFor(ctx, ref, digest),
          );
          leaseDrives(ctx.o.images, leaseHolder(record.id), drives);
          setState(ctx, record, {
            ...state,
            manifestDigest: image.manifestDigest,
            rootfs: {
              ...state.rootfs,
              layers: image.layers.map((l) => l.dir),
              ...(drives.length ? { drives } : {}),
            },
            containerId: undefined,
            resident: false,
            residentSlot: undefined,
            thawable: undefined,
          });
          return record;
        },
      },
      sandboxId,
    );
  }

  async movedTo(sandboxId: string): Promise<string | undefined> {
    if (!this.sharing) return undefined;
    const claim = await this.ctx.o.repository.readClaim(sandboxId);
    return claim && claim.owner !== this.sharing.nodeId ? claim.owner : undefined;
  }

  staysHere(record: SandboxRecord): string | undefined {
    return this.sharing?.staysHere(record);
  }

  async handOver(record: SandboxRecord): Promise<boolean> {
    if (!this.sharing || !(await this.sharing.handOver(record))) return false;
    const o = this.ctx.o;
    const state = stateIfAny(this.ctx, record);
    await this.pausing.releasesSettled(record.id);
    await o.runtime.destroy(state?.containerId ?? record.id);
    o.idRanges.release(record.id);
    releaseSlot(this.ctx, record.id, record.runtime?.slotIndex ?? state?.residentSlot);
    await this.ctx.dirs.discardSettled(record.id);
    await this.ctx.dirs.discardPauseArtifacts(record.id);
    o.images.releaseLease(leaseHolder(record.id));
    releaseDriveLeases(o.images, leaseHolder(record.id));
    return true;
  }

  /** A sandbox started here (create, fork): its claim names this node, so others can say where it runs. */
  noteStarted(sandboxId: string): void {
    void this.sharing?.claimNew(sandboxId).catch((err: unknown) => {
      this.ctx.log.warn({ err, sandboxId }, 'could not record the claim of a new sandbox');
    });
  }

  /** Waits for background deletions (shutdown, tests). */
  async whenIdle(): Promise<void> {
    await this.pausing.idle();
    await this.ctx.dirs.whenIdle();
  }

  pause(
    record: SandboxRecord,
    opts: { memory: boolean; admit?: (bytes: number) => void },
  ): Promise<PausedState> {
    return this.pausing.pause(record, opts);
  }

  resume(
    record: SandboxRecord,
    policy: EgressPolicy,
    opts: { memory: boolean; beforeStart?: BeforeInstanceStart },
  ): Promise<StartResult> {
    return this.pausing.resume(record, policy, opts);
  }

  maintain(paused: readonly SandboxRecord[], opts: { releaseAll?: boolean } = {}): Promise<void> {
    return this.pausing.maintain(paused, opts);
  }

  fork(
    source: SandboxRecord,
    children: readonly SandboxRecord[],
    beforeStart?: (child: SandboxRecord) => BeforeInstanceStart | undefined,
  ): Promise<ForkChildResult[]> {
    return forkSandbox(this.ctx, source, children, beforeStart);
  }

  capture(record: SandboxRecord, target: CaptureTarget): Promise<CapturedSandbox> {
    return captureRunning(
      this.ctx,
      {
        containerId: containerIdOf(this.ctx, record),
        state: stateOf(this.ctx, record),
        sourceSandboxId: record.id,
        secure: record.secure,
        ...(record.customExtensionParams ? { customExtensionParams: record.customExtensionParams } : {}),
        ...(record.volumeMounts?.length ? { volumeMounts: record.volumeMounts } : {}),
        network: record.network,
      },
      { ...target, context: target.context ?? sandboxContext(record) },
    );
  }

  /** Drops this node's local copy of a snapshot (it is fetched again from the repository when needed). */
  removeLocalSnapshot(snapshotId: string): Promise<void> {
    return removeLocalSnapshot(this.ctx, snapshotId);
  }

  async applyPolicy(record: SandboxRecord, policy: EgressPolicy): Promise<void> {
    if (!record.runtime) throw new Error(`sandbox ${record.id} has no network slot`);
    const network = this.ctx.o.network;
    await network.applyPolicy(network.attach(record.runtime.slotIndex), policy);
  }

  async guestAnswers(record: SandboxRecord, timeoutMs: number): Promise<boolean> {
    if (!record.runtime) return false;
    try {
      await waitForEnvd(record.runtime.hostInteractionIp, this.ctx.o.envdPort, { pollMs: 50, timeoutMs });
      return true;
    } catch {
      return false;
    }
  }

  recover(records: readonly SandboxRecord[]): Promise<Map<string, RecoveryOutcome>> {
    return this.recovery.recover(records);
  }
}
