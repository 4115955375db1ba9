// Creating a sandbox from a template: a pre-started one from the warm pool when one fits, else a restore of the
// template's start capture (start-captures.ts) when this node has made one, else a fresh boot on the template's
// image; templates that are captures (memory or disk) are launched (launch.ts).
import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { initEnvd } from '@aenv/protocol';
import type { EgressPolicy } from '../network/types.js';
import type { BeforeInstanceStart, LaunchSource, StartResult } from '../orchestrator/backend.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import type { SnapshotRecord } from '../snapshot/index.js';
import {
  bindingOf,
  initBody,
  leaseHolder,
  startCaptureLease,
  volumesOf,
  type BackendContext,
} from './context.js';
import { imageFor, launchCapture } from './launch.js';
import { coldDrivesOf, withLayers } from './drives.js';
import type { DriveSpec } from '../runtime/driver.js';
import type { BackendState } from './record-state.js';
import type { AssembledSandbox } from './sandbox-factory.js';
import { availableMemoryRatio } from './memory-pressure.js';
import { WarmPool } from './warm-pool.js';
import { WarmPoolMetrics } from './warm-pool-metrics.js';
import { warmUpEnvd } from './warm-up.js';
import { StartCaptures, type StartCapture } from './start-captures.js';
import { StartCaptureMetrics } from './start-capture-metrics.js';
import { phase } from '../util/phases.js';
import { failurePoint } from '../util/crash-point.js';
import { allOrFirstError } from '../util/settle.js';

/** What a template boots from (image-based templates; captures restore instead). */
export interface BootSpec {
  templateId: string;
  committed: NonNullable<SnapshotRecord['committed']>;
  resources: { cpuCount: number; memoryMB: number; diskSizeMB: number };
}

/** Pre-started sandboxes are interchangeable when template, image and resources match. */
const warmKey = (b: BootSpec) =>
  `${b.templateId}|${b.committed.baseImage?.manifestDigest ?? ''}|${b.resources.cpuCount}|${b.resources.memoryMB}|${b.resources.diskSizeMB}`;

const templateOfKey = (key: string) => key.slice(0, key.indexOf('|'));

/** How to boot a template that starts from its image (no captured memory or disk), or undefined for captures. */
function imageBoot(source: LaunchSource, resources: BootSpec['resources']): BootSpec | undefined {
  const committed = (source.record as SnapshotRecord).committed;
  if (!committed?.baseImage || committed.artifacts.memory || committed.layers.length > 0) return undefined;
  return { templateId: source.templateId, committed, resources };
}

/** Where a start capture's checkpoint (`memory/`) and disk (`disk/`) are. */
const captureFiles = (c: Pick<StartCapture<BackendState>, 'dir'>) => ({
  disk: join(c.dir, 'disk'),
  memory: join(c.dir, 'memory'),
});

/** Templates with a start capture on this node at once (each holds a checkpoint and a disk). */
const START_CAPTURE_TEMPLATES = 4;
/** Copies of a start capture's disk kept ready (a burst beyond them copies the disk itself). */
const START_CAPTURE_DISK_COPIES = 2;
/** Captures made of a template before its cold creates give up on one and boot. */
const START_CAPTURE_ATTEMPTS = 3;

export class SandboxCreation {
  private readonly warm: WarmPool<BootSpec, AssembledSandbox>;
  private metrics: WarmPoolMetrics | undefined;
  private readonly starts: StartCaptures<BootSpec, BackendState> | undefined;
  private readonly startMetrics: StartCaptureMetrics | undefined;

  constructor(private readonly ctx: BackendContext) {
    const sizing = ctx.o.warmPool;
    this.warm = new WarmPool({
      low: sizing.low,
      high: sizing.high,
      quietMs: sizing.quietMs,
      fillConcurrency: sizing.fillConcurrency,
      maxTemplates: 4,
      memoryOk: () => availableMemoryRatio() >= sizing.minAvailableMemoryRatio,
      // No policy: a pre-started sandbox is denied all traffic until it is handed out with its own.
      boot: (spec) => this.bootWarm(spec),
      discard: (b) => ctx.factory.disassemble(b),
      labelOf: (spec) => spec.templateId,
      onCreate: (template, hit) => this.metrics?.onCreate(template, hit),
      logger: ctx.log,
    });
    this.starts = ctx.o.startCaptures
      ? new StartCaptures({
          maxTemplates: START_CAPTURE_TEMPLATES,
          make: (spec) => this.makeStartCapture(spec),
          discard: async (c) => {
            ctx.o.images.releaseLease(startCaptureLease(c.seedId));
            await ctx.o.runtime.dropDiskCopies(captureFiles(c).disk);
            await ctx.dirs.discardWorkDir(c.dir);
          },
          onError: (key, err) =>
            ctx.log.warn(
              { err, template: templateOfKey(key) },
              'no start capture of this template on this node: its cold creates boot',
            ),
        })
      : undefined;
    const starts = this.starts;
    if (starts && sizing.registry) {
      this.startMetrics = new StartCaptureMetrics(sizing.registry, () =>
        starts.readyKeys().map(templateOfKey),
      );
    }
    if (sizing.registry && this.warm.enabled) {
      this.metrics = new WarmPoolMetrics(sizing.registry, {
        stats: () => this.warm.stats(),
        memoryBytes: () => this.pooledMemoryBytes(),
      });
    }
  }

  /**
   * A pre-started sandbox for the pool, without a policy: a restore of the template's start capture when it has
   * one (its envd is warm already), else booted, then warmed up (warm-up.ts).
   */
  private async bootWarm(spec: BootSpec): Promise<AssembledSandbox> {
    const restored = await this.warmFromStartCapture(spec);
    if (restored) {
      this.metrics?.onFill(spec.templateId, 'start_capture');
      return restored;
    }
    const booted = await this.boot(`warm-${randomUUID()}`, spec, null);
    this.metrics?.onFill(spec.templateId, 'boot');
    const user = spec.committed.context.user ?? 'root';
    const ok = await warmUpEnvd(booted.slot.hostInteractionIp, this.ctx.o.envdPort, user).then(
      () => true,
      (err: unknown) => {
        this.ctx.log.debug(
          { err, containerId: booted.containerId },
          'warm-up of a pre-started sandbox failed',
        );
        return false;
      },
    );
    this.metrics?.onWarmUp(spec.templateId, ok);
    return booted;
  }

  /**
   * A pool sandbox restored from the start capture of `spec`, or undefined when there is none. Its one /init
   * while it waits proves the seed's key and sets the container's own, which its hand-out then proves, as a
   * booted pool sandbox's does. A restore whose memory did not come back (booted on the seed's disk) is
   * still a fresh sandbox of the template: it is pooled, and the capture dropped.
   */
  private async warmFromStartCapture(spec: BootSpec): Promise<AssembledSandbox | undefined> {
    if (!this.starts || spec.committed.startup) return undefined;
    const ctx = this.ctx;
    const containerId = `warm-${randomUUID()}`;
    return this.starts.use(warmKey(spec), async (capture) => {
      const assembled = await ctx.factory.assemble({
        containerId,
        templateId: spec.templateId,
        resources: spec.resources,
        state: { ...capture.state },
        policy: null,
        from: captureFiles(capture),
        init: ({ restored }) => ({
          body: { envVars: {}, initKey: ctx.o.envdInitKey(containerId) },
          credentials: { initKey: ctx.o.envdInitKey(restored ? capture.seedId : containerId) },
        }),
      });
      return { result: assembled, usable: assembled.restored };
    });
  }

  /** Memory charged to the ready sandboxes' cgroups (one gone meanwhile counts 0). */
  private async pooledMemoryBytes(): Promise<number> {
    const used = await Promise.all(
      this.warm.readyValues().map((b) =>
        this.ctx.o.runtime.stats(b.containerId).then(
          (s) => s.memoryUsageBytes,
          () => 0,
        ),
      ),
    );
    return used.reduce((a, b) => a + b, 0);
  }

  async start(
    record: SandboxRecord,
    source: LaunchSource,
    policy: EgressPolicy,
    beforeStart?: BeforeInstanceStart,
  ): Promise<StartResult> {
    const ctx = this.ctx;
    const snapshot = source.record as SnapshotRecord;
    if (!snapshot.committed?.baseImage)
      throw new Error(`template ${source.templateId} has no base image to start from`);
    const boot = imageBoot(source, record.resources);
    if (!boot) return launchCapture(ctx, record, snapshot, policy, beforeStart);
    const key = warmKey(boot);
    // A pre-started sandbox runs without volumes: one that mounts some is booted for itself (and keeps the
    // template warm without counting as a hit or a miss).
    const mountsVolumes = Boolean(record.volumeMounts?.length);
    const warm = source.cold || mountsVolumes ? undefined : this.warm.take(key, boot);
    if (!source.cold && mountsVolumes) this.warm.want(key, boot);
    if (warm) {
      // A failed start hook fails the create (it is not a reason to try another container).
      let handed: AssembledSandbox;
      try {
        handed = await phase('placement', () => this.placeWarm(warm, beforeStart));
      } catch (err) {
        await ctx.factory.disassemble(warm);
        throw err;
      }
      try {
        return await this.adopt(record, handed, policy);
      } catch (err) {
        ctx.log.warn(
          { err, sandboxId: record.id },
          'a pre-started sandbox could not be adopted; starting a new one',
        );
        await ctx.factory.disassemble(handed);
      }
    }
    // A cold start's drives (the launchable pulled their images a moment ago).
    const drives = await withLayers(coldDrivesOf(boot.committed.extra), (ref, digest) =>
      imageFor(ctx, ref, digest),
    );
    // The start capture has no volumes or drives mounted: a create that brings some boots, and so does a cold
    // start of an image (a one-off template).
    if (!source.cold && !mountsVolumes && drives.length === 0) {
      const restored = await this.fromStartCapture(record, boot, policy, beforeStart);
      if (restored) return restored;
    }
    const booted = await this.boot(record.id, boot, policy, {
      drives,
      beforeStart,
      leaseHolder: leaseHolder(record.id),
      record,
    });
    return { binding: bindingOf(booted), backend: ctx.records.encodeState(booted.state) };
  }

  /**
   * The create as a restore of the template's start capture, or undefined when there is none yet (one is then
   * made in the background). The restored envd is the seed's, so the first /init proves the seed's init key.
   */
  private async fromStartCapture(
    record: SandboxRecord,
    boot: BootSpec,
    policy: EgressPolicy,
    beforeStart: BeforeInstanceStart | undefined,
  ): Promise<StartResult | undefined> {
    // A template with a start command has a memory capture of its own (or none on purpose: it boots).
    if (!this.starts || boot.committed.startup) return undefined;
    const ctx = this.ctx;
    const key = warmKey(boot);
    const launched = await this.starts.use(key, async (capture) => {
      const assembled = await ctx.factory.assemble({
        containerId: record.id,
        templateId: boot.templateId,
        resources: record.resources,
        state: { ...capture.state },
        policy,
        ...(beforeStart ? { placement: { kind: 'fresh' as const, hook: beforeStart } } : {}),
        leaseHolder: leaseHolder(record.id),
        from: captureFiles(capture),
        init: ({ restored, extraEnv }) => ({
          body: initBody(ctx, record, extraEnv),
          credentials: { initKey: ctx.o.envdInitKey(restored ? capture.seedId : record.id) },
        }),
      });
      this.startMetrics?.onCreate(boot.templateId, assembled.restored);
      return { result: assembled, usable: assembled.restored };
    });
    if (!launched) {
      this.starts.want(key, boot);
      return undefined;
    }
    return { binding: bindingOf(launched), backend: ctx.records.encodeState(launched.state) };
  }

  /**
   * Makes the start capture of `spec`, trying again when one does not restore: a capture that restores nowhere,
   * whatever the cause, must not be what creates use (warm-up.ts says why its file read cannot be one).
   */
  private async makeStartCapture(spec: BootSpec): Promise<StartCapture<BackendState>> {
    for (let attempt = 1; ; attempt++) {
      const capture = await this.checkpointSeed(spec);
      const fault = await this.probeRestore(spec, capture);
      if (!fault) {
        // Each restore starts on a copy of the seed's disk, made ahead of time.
        this.ctx.o.runtime.keepDiskCopies(captureFiles(capture).disk, START_CAPTURE_DISK_COPIES);
        this.ctx.log.info(
          { template: spec.templateId, seed: capture.seedId, attempt },
          'made a start capture: cold creates of this template restore it',
        );
        return capture;
      }
      this.ctx.o.images.releaseLease(startCaptureLease(capture.seedId));
      await this.ctx.dirs.discardWorkDir(capture.dir);
      if (attempt >= START_CAPTURE_ATTEMPTS) throw fault;
      this.ctx.log.warn(
        { template: spec.templateId, seed: capture.seedId, err: fault },
        'a start capture did not restore: making it again',
      );
    }
  }

  /** Boots a seed sandbox of `spec`, warms it up and checkpoints it with its disk; the seed is removed again. */
  private async checkpointSeed(spec: BootSpec): Promise<StartCapture<BackendState>> {
    const ctx = this.ctx;
    const seed = await this.boot(`seed-${randomUUID()}`, spec, null);
    const dir = join(ctx.dirs.root, 'start-captures', seed.containerId);
    try {
      await warmUpEnvd(seed.slot.hostInteractionIp, ctx.o.envdPort, spec.committed.context.user ?? 'root');
      await mkdir(dir, { recursive: true, mode: 0o711 });
      const files = captureFiles({ dir });
      await ctx.o.runtime.checkpoint(seed.containerId, files.memory, {
        leaveRunning: true,
        diskDest: files.disk,
      });
      ctx.o.images.acquireLease(startCaptureLease(seed.containerId), seed.state.manifestDigest);
    } catch (err) {
      await ctx.dirs.discardWorkDir(dir);
      throw err;
    } finally {
      await ctx.factory.disassemble(seed);
    }
    return { seedId: seed.containerId, state: seed.state, dir };
  }

  /** Restores `capture` once into a throwaway sandbox (no egress, no /init): undefined when it came back. */
  private async probeRestore(
    spec: BootSpec,
    capture: StartCapture<BackendState>,
  ): Promise<Error | undefined> {
    const ctx = this.ctx;
    try {
      const probe = await ctx.factory.assemble({
        containerId: `seed-probe-${randomUUID()}`,
        templateId: spec.templateId,
        resources: spec.resources,
        state: { ...capture.state },
        policy: null,
        from: captureFiles(capture),
      });
      await ctx.factory.disassemble(probe);
      failurePoint('start-capture-probe');
      return probe.restored
        ? undefined
        : new Error('its memory did not come back (the probe booted instead)');
    } catch (err) {
      return err instanceof Error ? err : new Error(String(err));
    }
  }

  /**
   * A fresh boot on the template's image, in a slot with `policy` (null: none yet, the slot is denied
   * everything). Without `forRecord`, envd gets an /init that changes nothing (a warm sandbox is /init'ed for real when handed out).
   */
  private async boot(
    containerId: string,
    boot: BootSpec,
    policy: EgressPolicy | null,
    forRecord?: {
      beforeStart: BeforeInstanceStart | undefined;
      leaseHolder: string;
      record: SandboxRecord;
      drives: DriveSpec[];
    },
  ): Promise<AssembledSandbox> {
    const ctx = this.ctx;
    const volumes = forRecord ? await volumesOf(ctx, forRecord.record) : [];
    const baseImage = boot.committed.baseImage!;
    const hook = forRecord?.beforeStart;
    return ctx.factory.assemble({
      containerId,
      templateId: boot.templateId,
      resources: boot.resources,
      state: {
        pull: baseImage.reference,
        derive: (image): BackendState => {
          const state = ctx.factory.imageState(
            image,
            boot.committed.context.envVars.PATH,
            boot.committed.startup?.startCmd,
          );
          const drives = forRecord?.drives ?? [];
          return {
            ...state,
            imageRef: baseImage.reference,
            ...(drives.length ? { rootfs: { ...state.rootfs, drives } } : {}),
          };
        },
      },
      policy,
      ...(hook ? { placement: { kind: 'fresh' as const, hook } } : {}),
      ...(forRecord
        ? {
            volumes,
            leaseHolder: forRecord.leaseHolder,
            init: ({ extraEnv }) => ({
              body: initBody(ctx, forRecord.record, extraEnv),
              credentials: { initKey: ctx.o.envdInitKey(containerId) },
            }),
          }
        : {
            // A warm sandbox's envd answers one /init that changes nothing while it waits in the pool: the
            // first request an envd serves runs its HTTP and /init code for the first time (≈ 20 ms of lazy
            // compilation on this machine), which would otherwise land on the create that takes it.
            init: () => ({
              body: { envVars: {} },
              credentials: { initKey: ctx.o.envdInitKey(containerId) },
            }),
          }),
    });
  }

  /** Tells the start hook where a pre-started sandbox runs, with a new instance id (it becomes the sandbox's). */
  private async placeWarm(
    warm: AssembledSandbox,
    beforeStart: BeforeInstanceStart | undefined,
  ): Promise<AssembledSandbox> {
    const instanceId = randomUUID();
    if (!beforeStart) return { ...warm, instanceId };
    const { extraEnv } = await beforeStart({
      kind: 'fresh',
      instanceId,
      netnsPath: warm.slot.netnsPath,
      hostInteractionIp: warm.slot.hostInteractionIp,
    });
    return { ...warm, instanceId, ...(extraEnv ? { extraEnv } : {}) };
  }

  /**
   * Hands a pre-started sandbox to `record`: its name, egress policy, image lease and envd /init. The three
   * steps touch different things (the container's UTS name and /etc files, the slot's nft chain, envd's state
   * over the host interaction address, which no egress policy governs) and none needs another done first, so
   * they run at once; the sandbox is handed out only once all three are done, and until its policy is in
   * place its slot is denied all egress (a pre-started sandbox never had a policy).
   */
  private async adopt(
    record: SandboxRecord,
    warm: AssembledSandbox,
    policy: EgressPolicy,
  ): Promise<StartResult> {
    const o = this.ctx.o;
    o.images.acquireLease(leaseHolder(record.id), warm.state.manifestDigest);
    try {
      await phase('adopt', () =>
        allOrFirstError([
          phase('adopt-name', () => o.runtime.rename(warm.containerId, record.id)),
          phase('adopt-policy', () => o.network.applyPolicy(warm.slot, policy)),
          phase('envd-init', () =>
            initEnvd(warm.slot.hostInteractionIp, o.envdPort, initBody(this.ctx, record, warm.extraEnv), {
              initKey: o.envdInitKey(warm.containerId),
            }),
          ),
        ]),
      );
      // From here on the sandbox holds the container's range (for life: pause and resume keep it).
      o.idRanges.transfer(warm.containerId, record.id);
    } catch (err) {
      o.images.releaseLease(leaseHolder(record.id));
      throw err;
    }
    const state: BackendState = { ...warm.state, containerId: warm.containerId };
    return { binding: bindingOf(warm), backend: this.ctx.records.encodeState(state) };
  }

  /** Boots `templateId`'s pre-started sandboxes now (e.g. the base template at startup). */
  prewarm(source: LaunchSource, resources: BootSpec['resources']): void {
    const boot = imageBoot(source, resources);
    if (!boot) return;
    this.warm.want(warmKey(boot), boot);
    if (!boot.committed.startup) this.starts?.want(warmKey(boot), boot);
  }

  /** Removes the pre-started sandboxes and the start captures. */
  async close(): Promise<void> {
    await Promise.all([this.warm.close(), this.starts?.close()]);
  }
}
