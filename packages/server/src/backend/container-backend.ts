import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../util/log.js';
import type { ImageService } from '../image/index.js';
import type { PulledImage } from '../image/types.js';
import type { NetworkManager } from '../network/index.js';
import type { EgressPolicy, NetworkSlot } from '../network/types.js';
import type { IdRange, RuntimeDriver, SandboxSpec, ToolsMount, VolumeMountSpec } from '../runtime/driver.js';
import type { IdRangeAllocator } from '../runtime/index.js';
import type {
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
import type { PublishInput, SnapshotRecord, SnapshotRepository } from '../snapshot/index.js';
import { SingleFlight } from '../image/single-flight.js';
import { DEFAULT_PATH, initEnvd, waitForEnvd, type EnvdInitCredentials, type InitBody } from '@aenv/protocol';
import { archiveDir, extractArchive, syncFilesystem } from './disk-archive.js';
import { availableMemoryRatio } from './memory-pressure.js';
import { crashPoint } from '../util/crash-point.js';
import { treeBytes } from '../util/disk-usage.js';
import { PausedSharing } from './paused-sharing.js';
import { WarmPool } from './warm-pool.js';

export interface ContainerBackendOptions {
  runtime: RuntimeDriver;
  /** The host directory of a persistent volume (docs/volumes.md); absent: no sandbox mounts any. */
  volumeDir?: (volumeId: string) => string;
  network: NetworkManager;
  images: ImageService;
  repository: SnapshotRepository;
  /** The tools mount new sandboxes get. */
  tools: ToolsMount;
  /** Where tools dirs of every version live (`<deps>/tools/<version>`): a checkpoint restores with its own. */
  toolsRoot: string;
  envdPort: number;
  envdPollMs: number;
  envdInitTimeoutMs: number;
  pidsLimit: number;
  /** `[orchestrator].resident_pause_grace_secs` in ms: how long a paused sandbox stays frozen in memory. */
  residentPauseGraceMs: number;
  /** Below this share of available RAM, paused sandboxes release their memory at once. */
  memoryPressureRatio?: number;
  /** Versions recorded with every capture (envd, tools, the runtime driver's host components, ...). */
  runtimeVersions: Record<string, string>;
  /** Pre-started sandboxes kept per template in use (`[pool].warm_sandboxes`; 0 = none). */
  warmSandboxes: number;
  /** Copy paused sandboxes into the repository (a shared one lets other nodes resume them). */
  sharePaused: boolean;
  /** envd access token of a sandbox (secure sandboxes). */
  envdToken(sandboxId: string): string;
  /** The node's credential for envd's /init of the container or sandbox with this id (docs/security.md). */
  envdInitKey(id: string): string;
  /** `[sandbox_proxy].signed_url_max_lifetime_secs`, handed to envd with /init. */
  signedUrlMaxLifetimeSecs: number;
  /** Each sandbox's own uid range, held by its sandbox id (a pre-started one's by its container id). */
  idRanges: IdRangeAllocator;
  logger: Logger;
}

import { DISK_MEDIA_TYPE, sandboxContext } from './capture-format.js';
import { BackendRecordCodec, type BackendState, type CaptureExtra } from './record-state.js';

const COMPLETE = 'complete';

/** What a template boots from (image-based templates; captures restore instead). */
interface BootSpec {
  templateId: string;
  committed: NonNullable<SnapshotRecord['committed']>;
  resources: { cpuCount: number; memoryMB: number; diskSizeMB: number };
}

/** A container booted for a template, envd answering, not yet handed to a sandbox. */
interface BootedSandbox {
  containerId: string;
  slot: NetworkSlot;
  state: BackendState;
  /** The instance id the start hook was told of (a sandbox booted for one), and the extra env it asked for. */
  instanceId?: string;
  extraEnv?: Record<string, string>;
}

/** Pre-started sandboxes are interchangeable when template, image and resources match. */
const warmKey = (b: BootSpec) =>
  `${b.templateId}|${b.committed.baseImage?.manifestDigest ?? ''}|${b.resources.cpuCount}|${b.resources.memoryMB}|${b.resources.diskSizeMB}`;

const leaseHolder = (id: string) => `sandbox:${id}`;

/**
 * The container backend: a sandbox = a netns slot + a runtime driver sandbox on cached image layers whose init
 * runs envd from the tools mount. Pause, fork and snapshots are the driver's memory checkpoints plus
 * copy-on-write disk captures kept on the sandbox volume. Each step is undone in reverse when a later one fails.
 */
/** How to boot a template that starts from its image (no captured memory or disk), or undefined for captures. */
function imageBoot(source: LaunchSource, resources: BootSpec['resources']): BootSpec | undefined {
  const committed = (source.record as SnapshotRecord).committed;
  if (!committed?.baseImage || committed.artifacts.memory || committed.layers.length > 0) return undefined;
  return { templateId: source.templateId, committed, resources };
}

export class ContainerBackend implements SandboxBackend {
  private readonly localSnapshots = new SingleFlight<void>();
  private readonly sharing: PausedSharing | undefined;

  private readonly warm: WarmPool<BootSpec, BootedSandbox>;
  /** Reads and writes what this backend keeps on records and captures. */
  readonly records: BackendRecordCodec;

  constructor(private readonly opts: ContainerBackendOptions) {
    this.records = new BackendRecordCodec(opts.runtime.recordCodec);
    if (opts.sharePaused) this.sharing = new PausedSharing(opts.repository, opts.runtime, opts.logger);
    this.warm = new WarmPool({
      size: opts.warmSandboxes,
      maxTemplates: 4,
      // No policy: a pre-started sandbox is denied all traffic until it is handed out with its own.
      boot: (spec) => this.bootContainer(`warm-${randomUUID()}`, spec, null),
      discard: (b) => this.discardBooted(b),
      logger: opts.logger,
    });
  }

  private get log(): Logger {
    return this.opts.logger;
  }

  private get store(): string {
    return this.opts.runtime.captureRoot;
  }

  private stateOf(r: SandboxRecord): BackendState {
    return this.records.decodeState(r.id, r.backend);
  }

  /** As stateOf, or undefined while the record has none yet (a start in progress, or cut short by a crash). */
  private stateIfAny(r: SandboxRecord): BackendState | undefined {
    return Object.keys(r.backend).length === 0 ? undefined : this.stateOf(r);
  }

  /** Stores `state` as the record's backend state (the orchestrator persists the record afterwards). */
  private setState(r: SandboxRecord, state: BackendState): void {
    r.backend = this.records.encodeState(state);
  }

  pausedDir(id: string): string {
    return join(this.store, 'paused', id);
  }

  private snapshotCacheDir(snapshotId: string): string {
    return join(this.store, 'snapshots', snapshotId);
  }

  private toolsFor(version: string): ToolsMount {
    if (version === this.opts.tools.version) return this.opts.tools;
    const dir = join(this.opts.toolsRoot, version);
    if (!existsSync(join(dir, 'VERSION'))) {
      throw new Error(`tools ${version} (needed to restore this checkpoint) are no longer on this node`);
    }
    return { dir, version };
  }

  /** The runtime's id of the sandbox's container: the sandbox id, or the id of the warm sandbox it was given. */
  private cid(record: SandboxRecord): string {
    return this.stateIfAny(record)?.containerId ?? record.id;
  }

  /** The host directories and mount paths of the volumes the sandbox mounts (docs/volumes.md). */
  private volumesOf(record: SandboxRecord): VolumeMountSpec[] {
    const mounts = record.volumeMounts ?? [];
    if (mounts.length && !this.opts.volumeDir)
      throw new Error(`sandbox ${record.id} mounts volumes, and this backend has no volumes`);
    return mounts.map((m) => ({ source: this.opts.volumeDir!(m.volumeId), destination: m.path }));
  }

  /** The runtime's id of a running sandbox's container (its cgroup and dir name; per-sandbox metrics read them). */
  containerIdOf(record: SandboxRecord): string {
    return this.cid(record);
  }

  private spec(
    id: string,
    templateId: string,
    resources: { cpuCount: number; memoryMB: number; diskSizeMB: number },
    slot: NetworkSlot,
    state: BackendState,
    idRange: IdRange,
    volumes: VolumeMountSpec[] = [],
  ): SandboxSpec {
    return {
      id,
      hostname: id,
      idRange,
      ...(volumes.length ? { volumes } : {}),
      rootfs: state.rootfs,
      resources: {
        cpuCount: resources.cpuCount,
        memoryMB: resources.memoryMB,
        pidsLimit: this.opts.pidsLimit,
        diskMB: resources.diskSizeMB,
      },
      netnsPath: slot.netnsPath,
      nameservers: slot.dnsServer ? [slot.dnsServer] : [],
      initEnv: {
        ...state.envdEnv,
        E2B_SANDBOX_ID: id,
        E2B_TEMPLATE_ID: templateId,
        // Not in envdEnv: captures record that, and the key is per container.
        AENV_ENVD_INIT_KEY: this.opts.envdInitKey(id),
      },
    };
  }

  /** The image a sandbox (or capture) was made from, with the exact layers it was made on. */
  private async imageFor(reference: string, manifestDigest?: string): Promise<PulledImage> {
    const cached = manifestDigest ? this.opts.images.get(manifestDigest) : undefined;
    if (cached) return cached;
    const image = await this.opts.images.pull(reference);
    if (manifestDigest && image.manifestDigest !== manifestDigest) {
      throw new Error(
        `image ${reference} is now ${image.manifestDigest}; this sandbox was made on ${manifestDigest}, which is no longer cached`,
      );
    }
    return image;
  }

  /** Runs `steps` in order; if one fails, the undo actions registered so far run in reverse. */
  private async transaction<T>(
    sandboxId: string,
    steps: (undo: (fn: () => Promise<void>) => void) => Promise<T>,
  ) {
    const undo: (() => Promise<void>)[] = [];
    try {
      return await steps((fn) => undo.push(fn));
    } catch (e) {
      for (const step of undo.reverse()) {
        await step().catch((err: unknown) => this.log.error({ err, sandboxId }, 'rollback step failed'));
      }
      throw e;
    }
  }

  private binding(slot: NetworkSlot, instanceId: string = randomUUID()) {
    return { slotIndex: slot.index, hostInteractionIp: slot.hostInteractionIp, instanceId };
  }

  /** Tells the start hook (if any) where the instance `instanceId` is about to run. */
  private async placed(
    beforeStart: BeforeInstanceStart | undefined,
    kind: 'fresh' | 'resume',
    slot: NetworkSlot,
    instanceId: string,
  ): Promise<Record<string, string> | undefined> {
    if (!beforeStart) return undefined;
    const { extraEnv } = await beforeStart({
      kind,
      instanceId,
      netnsPath: slot.netnsPath,
      hostInteractionIp: slot.hostInteractionIp,
    });
    return extraEnv;
  }

  // ---- start ----

  async start(
    record: SandboxRecord,
    source: LaunchSource,
    policy: EgressPolicy,
    beforeStart?: BeforeInstanceStart,
  ): Promise<StartResult> {
    const snapshot = source.record as SnapshotRecord;
    if (!snapshot.committed?.baseImage)
      throw new Error(`template ${source.templateId} has no base image to start from`);
    const boot = imageBoot(source, record.resources);
    if (!boot) return this.startFromCapture(record, snapshot, policy, beforeStart);
    const key = warmKey(boot);
    const volumes = this.volumesOf(record);
    // A pre-started sandbox runs without volumes: one that mounts some is booted for itself.
    const warm = source.cold || volumes.length ? undefined : this.warm.take(key);
    if (!source.cold) this.warm.want(key, boot);
    if (warm) {
      // A failed start hook fails the create (it is not a reason to try another container).
      warm.instanceId = randomUUID();
      try {
        warm.extraEnv = await this.placed(beforeStart, 'fresh', warm.slot, warm.instanceId);
      } catch (err) {
        await this.discardBooted(warm);
        throw err;
      }
      try {
        return await this.adopt(record, warm, policy);
      } catch (err) {
        this.log.warn(
          { err, sandboxId: record.id },
          'a pre-started sandbox could not be adopted; starting a new one',
        );
        await this.discardBooted(warm);
      }
    }
    return this.transaction(record.id, async (undo) => {
      const booted = await this.bootContainer(record.id, boot, policy, beforeStart, volumes);
      undo(() => this.discardBooted(booted));
      this.opts.images.acquireLease(leaseHolder(record.id), booted.state.manifestDigest);
      undo(async () => this.opts.images.releaseLease(leaseHolder(record.id)));
      await initEnvd(
        booted.slot.hostInteractionIp,
        this.opts.envdPort,
        this.initBody(record, booted.extraEnv),
        { initKey: this.opts.envdInitKey(booted.containerId) },
      );
      return {
        binding: this.binding(booted.slot, booted.instanceId),
        backend: this.records.encodeState(booted.state),
      };
    });
  }

  /**
   * Starts a container for a template on its image, in a slot with `policy` (null: none yet, the slot is denied
   * everything), and waits until envd answers (without /init: a warm sandbox is /init'ed when it is handed out).
   * Leaves nothing behind on failure.
   */
  private async bootContainer(
    containerId: string,
    boot: BootSpec,
    policy: EgressPolicy | null,
    beforeStart?: BeforeInstanceStart,
    volumes: VolumeMountSpec[] = [],
  ): Promise<BootedSandbox> {
    const baseImage = boot.committed.baseImage!;
    return this.transaction(containerId, async (undo) => {
      let policyApplied: Promise<void> | undefined;
      const [pulled, acquired] = await Promise.allSettled([
        this.opts.images.pull(baseImage.reference),
        this.opts.network.acquire().then((slot) => {
          // Installed while the image is looked up and the container prepared.
          if (policy) policyApplied = this.installPolicy(slot, policy);
          return slot;
        }),
      ]);
      if (acquired.status === 'fulfilled') undo(() => this.opts.network.release(acquired.value));
      if (pulled.status === 'rejected') throw pulled.reason;
      if (acquired.status === 'rejected') throw acquired.reason;
      const image = pulled.value;
      const slot = acquired.value;
      const instanceId = randomUUID();
      const extraEnv = await this.placed(beforeStart, 'fresh', slot, instanceId);
      const state: BackendState = {
        imageRef: baseImage.reference,
        manifestDigest: image.manifestDigest,
        rootfs: { layers: image.layers.map((l) => l.dir) },
        toolsVersion: this.opts.tools.version,
        envdEnv: {
          PATH: boot.committed.context.envVars.PATH ?? DEFAULT_PATH,
          ENVD_PORT: String(this.opts.envdPort),
          AENV_INIT_LOG: '/run/agentenv/envd.log',
        },
        ...(boot.committed.startup ? { startCmd: boot.committed.startup.startCmd } : {}),
      };
      const idRange = this.opts.idRanges.acquire(containerId);
      undo(async () => this.opts.idRanges.release(containerId));
      await this.opts.runtime.create(
        this.spec(containerId, boot.templateId, boot.resources, slot, state, idRange, volumes),
        { tools: this.opts.tools, ...(policyApplied ? { startAfter: policyApplied } : {}) },
      );
      undo(() => this.opts.runtime.destroy(containerId));
      await policyApplied;
      await Promise.all([
        this.envdHealthy(containerId, slot.hostInteractionIp),
        this.opts.runtime.diskLimitSet(containerId),
      ]);
      return { containerId, slot, state, instanceId, ...(extraEnv ? { extraEnv } : {}) };
    });
  }

  /**
   * Starts installing `policy` in `slot` (while the container is being prepared); the runtime starts the sandbox's
   * first process only once it is in place (`startAfter`). A failure is handled where the promise is awaited.
   */
  private installPolicy(slot: NetworkSlot, policy: EgressPolicy): Promise<void> {
    const applied = this.opts.network.applyPolicy(slot, policy);
    applied.catch(() => {});
    return applied;
  }

  /** Hands a pre-started sandbox to `record`: its name, egress policy, image lease and envd /init. */
  private async adopt(
    record: SandboxRecord,
    warm: BootedSandbox,
    policy: EgressPolicy,
  ): Promise<StartResult> {
    this.opts.images.acquireLease(leaseHolder(record.id), warm.state.manifestDigest);
    try {
      await Promise.all([
        this.opts.runtime.rename(warm.containerId, record.id),
        this.opts.network.applyPolicy(warm.slot, policy),
      ]);
      await initEnvd(warm.slot.hostInteractionIp, this.opts.envdPort, this.initBody(record, warm.extraEnv), {
        initKey: this.opts.envdInitKey(warm.containerId),
      });
      // From here on the sandbox holds the container's range (for life: pause and resume keep it).
      this.opts.idRanges.transfer(warm.containerId, record.id);
    } catch (err) {
      this.opts.images.releaseLease(leaseHolder(record.id));
      throw err;
    }
    const state: BackendState = { ...warm.state, containerId: warm.containerId };
    return { binding: this.binding(warm.slot, warm.instanceId), backend: this.records.encodeState(state) };
  }

  private async discardBooted(b: BootedSandbox): Promise<void> {
    await this.opts.runtime.destroy(b.containerId).catch(() => {});
    this.opts.idRanges.release(b.containerId);
    await this.opts.network.release(b.slot).catch(() => {});
  }

  /** Boots `templateId`'s pre-started sandboxes now (e.g. the base template at startup). */
  prewarm(source: LaunchSource, resources: BootSpec['resources']): void {
    const boot = imageBoot(source, resources);
    if (boot) this.warm.want(warmKey(boot), boot);
  }

  /** Removes the pre-started sandboxes and waits for background deletions (shutdown). */
  async close(): Promise<void> {
    await this.warm.close();
    await this.whenIdle();
  }

  /** Launches a sandbox from a capture (snapshot or template): restores its memory, or boots its disk. */
  private async startFromCapture(
    record: SandboxRecord,
    snapshot: SnapshotRecord,
    policy: EgressPolicy,
    beforeStart?: BeforeInstanceStart,
  ) {
    const committed = snapshot.committed!;
    const extra = this.records.decodeCapture(snapshot.id, committed.extra);
    const image = await this.imageFor(committed.baseImage!.reference, committed.baseImage!.manifestDigest);
    const local = await this.ensureLocalSnapshot(snapshot);
    const state: BackendState = {
      imageRef: committed.baseImage!.reference,
      manifestDigest: image.manifestDigest,
      rootfs: { layers: image.layers.map((l) => l.dir) },
      toolsVersion: extra.toolsVersion,
      envdEnv: extra.envdEnv,
      ...(committed.startup ? { startCmd: committed.startup.startCmd } : {}),
    };
    const memory = committed.artifacts.memory ? join(local, 'memory') : undefined;
    const currentToken = extra.sourceSecure ? this.opts.envdToken(extra.sourceSandboxId) : undefined;
    return this.launch(
      record,
      state,
      policy,
      { memory, disk: join(local, 'disk'), currentId: extra.sourceSandboxId, currentToken },
      beforeStart,
    );
  }

  /**
   * Brings `record` up from saved state in a fresh slot: memory restore when `memory` is given (falling back to
   * booting the saved disk when the restore fails), else a fresh boot on the disk.
   */
  private async launch(
    record: SandboxRecord,
    state: BackendState,
    policy: EgressPolicy,
    from: {
      memory?: string;
      disk: string;
      /** The sandbox whose envd the memory holds (its init key and token are what envd holds). */
      currentId: string;
      currentToken?: string;
      leaseHeld?: boolean;
    },
    beforeStart?: BeforeInstanceStart,
  ): Promise<StartResult> {
    return this.transaction(record.id, async (undo) => {
      const slot = await this.opts.network.acquire();
      undo(() => this.opts.network.release(slot));
      const instanceId = randomUUID();
      await this.placed(beforeStart, 'resume', slot, instanceId);
      // A paused sandbox already holds its image lease, and keeps it if this resume fails.
      if (!from.leaseHeld) {
        this.opts.images.acquireLease(leaseHolder(record.id), state.manifestDigest);
        undo(async () => this.opts.images.releaseLease(leaseHolder(record.id)));
      }
      const policyApplied = this.installPolicy(slot, policy);
      // A resumed sandbox keeps its range; a fork child or a launch from a capture gets a new one, and the
      // runtime moves the captured memory and disk into it.
      const held = this.opts.idRanges.get(record.id);
      const idRange = held ?? this.opts.idRanges.acquire(record.id);
      if (!held) undo(async () => this.opts.idRanges.release(record.id));
      const spec = this.spec(
        record.id,
        record.templateId,
        record.resources,
        slot,
        state,
        idRange,
        this.volumesOf(record),
      );
      let restored = false;
      if (from.memory) {
        try {
          await this.opts.runtime.restore(spec, from.memory, {
            tools: this.toolsFor(state.toolsVersion),
            disk: from.disk,
            startAfter: policyApplied,
          });
          restored = true;
        } catch (err) {
          // Without its policy the sandbox cannot run at all: no fallback to its disk.
          await policyApplied;
          this.log.warn(
            { err, sandboxId: record.id },
            'memory restore failed; booting the saved disk instead',
          );
        }
      }
      if (!restored) {
        state.toolsVersion = this.opts.tools.version;
        await this.opts.runtime.create(spec, {
          tools: this.opts.tools,
          disk: from.disk,
          startAfter: policyApplied,
        });
      }
      undo(() => this.opts.runtime.destroy(record.id));
      await policyApplied;
      // envd keeps its token on the sandbox's disk (/run/agentenv), so a fresh boot on a saved disk finds the
      // same token a memory restore does: /init must prove it either way.
      await Promise.all([
        this.envdReady(
          record,
          slot.hostInteractionIp,
          restored
            ? { initKey: this.opts.envdInitKey(from.currentId), token: from.currentToken }
            : { initKey: this.opts.envdInitKey(record.id), token: from.currentToken },
        ),
        this.opts.runtime.diskLimitSet(record.id),
      ]);
      if (!restored && state.startCmd) {
        this.log.warn(
          { sandboxId: record.id, startCmd: state.startCmd },
          'the sandbox booted fresh on its saved disk; its template start command is not running',
        );
      }
      return {
        binding: this.binding(slot, instanceId),
        backend: this.records.encodeState({
          ...state,
          containerId: undefined,
          resident: false,
          residentSlot: undefined,
        }),
      };
    });
  }

  /** Waits for envd and hands it the sandbox's identity, env, user, workdir and token (every start and resume). */
  private async envdReady(record: SandboxRecord, host: string, current: EnvdInitCredentials): Promise<void> {
    await this.envdHealthy(this.cid(record), host);
    await initEnvd(host, this.opts.envdPort, this.initBody(record), current);
  }

  /** Waits until envd in `containerId` answers `/health`; gives up early once the container has stopped. */
  private envdHealthy(containerId: string, host: string): Promise<void> {
    return waitForEnvd(host, this.opts.envdPort, {
      pollMs: this.opts.envdPollMs,
      timeoutMs: this.opts.envdInitTimeoutMs,
      isAlive: async () =>
        (await this.opts.runtime.list()).some((s) => s.id === containerId && s.status === 'running'),
    });
  }

  /** envd's `/init`: the sandbox's identity, env, user, workdir and token (every start and resume). */
  private initBody(record: SandboxRecord, extraEnv?: Record<string, string>): InitBody {
    return {
      envVars: { ...record.envVars, ...extraEnv },
      accessToken: record.secure ? this.opts.envdToken(record.id) : '',
      sandboxId: record.id,
      templateId: record.templateId,
      defaultUser: record.defaultUser,
      ...(record.defaultWorkdir ? { defaultWorkdir: record.defaultWorkdir } : {}),
      timestamp: new Date().toISOString(),
      initKey: this.opts.envdInitKey(record.id),
      signatureMaxLifetimeSecs: this.opts.signedUrlMaxLifetimeSecs,
      unexpiringSignaturesUntil:
        Math.floor(Date.parse(record.createdAt) / 1000) + this.opts.signedUrlMaxLifetimeSecs,
    };
  }

  // ---- stop ----

  async destroy(record: SandboxRecord): Promise<void> {
    let state: BackendState | undefined;
    try {
      state = this.stateIfAny(record);
    } catch (err) {
      // A kill always goes through: what the record cannot say is taken from its id.
      this.log.warn({ err, sandboxId: record.id }, 'the stored backend state of a sandbox cannot be read');
    }
    await this.opts.runtime.destroy(state?.containerId ?? record.id);
    this.opts.idRanges.release(record.id);
    await this.releaseSlot(record.id, record.runtime?.slotIndex ?? state?.residentSlot);
    await this.sharing?.forget(record.id);
    await this.discardSettled(record.id);
    await this.discardPauseArtifacts(record.id);
    this.opts.images.releaseLease(leaseHolder(record.id));
  }

  private readonly trashing = new Set<Promise<void>>();

  /**
   * Moves a sandbox's pause artifacts out of the way at once (a rename on the same volume) and deletes them in
   * the background: deleting a checkpoint of hundreds of MB must not delay a resume or a kill.
   */
  private async discardPauseArtifacts(id: string): Promise<void> {
    const dir = this.pausedDir(id);
    if (!existsSync(dir)) return;
    const trash = join(this.store, 'trash', randomUUID());
    await mkdir(join(this.store, 'trash'), { recursive: true, mode: 0o700 });
    await rename(dir, trash);
    const job = this.removeTree(trash)
      .catch((err: unknown) => this.log.warn({ err, dir: trash }, 'could not delete old pause artifacts'))
      .finally(() => this.trashing.delete(job));
    this.trashing.add(job);
  }

  /** Per sandbox, the discard of its pause artifacts still running after a resident resume answered. */
  private readonly discarding = new Map<string, Promise<void>>();

  private discardInBackground(id: string): void {
    const job: Promise<void> = this.discardPauseArtifacts(id)
      .catch((err: unknown) => this.log.warn({ err, sandboxId: id }, 'could not remove pause artifacts'))
      .finally(() => {
        if (this.discarding.get(id) === job) this.discarding.delete(id);
      });
    this.discarding.set(id, job);
  }

  /** Waits until a background discard no longer touches the sandbox's pause dir (a new pause writes there). */
  private async discardSettled(id: string): Promise<void> {
    await this.discarding.get(id);
  }

  /** Removes a dir that may hold a disk snapshot (`disk/`, possibly a btrfs subvolume). */
  private async removeTree(dir: string): Promise<void> {
    if (existsSync(join(dir, 'disk'))) await this.opts.runtime.removeDisk(join(dir, 'disk'));
    await rm(dir, { recursive: true, force: true });
  }

  private async removePauseArtifacts(id: string): Promise<void> {
    const dir = this.pausedDir(id);
    if (existsSync(dir)) await this.removeTree(dir);
  }

  /** Waits for background deletions (shutdown, tests). */
  async whenIdle(): Promise<void> {
    await Promise.all([...this.discarding.values()]);
    await Promise.all([...this.trashing]);
  }

  // ---- pause / resume ----

  async pause(
    record: SandboxRecord,
    opts: { memory: boolean; admit?: (bytes: number) => void },
  ): Promise<PausedState> {
    const id = record.id;
    const dir = this.pausedDir(id);
    await this.discardSettled(id);
    await this.removePauseArtifacts(id);
    await mkdir(dir, { recursive: true, mode: 0o711 });
    const cid = this.cid(record);
    await this.opts.runtime.freeze(cid);
    crashPoint('pause:frozen');
    let kind: PausedState['kind'] = 'memory';
    let reason: string | undefined;
    let bytes = 0;
    let pausedAt = '';
    try {
      try {
        if (!opts.memory) throw new Error('a filesystem-only pause was asked for (memory: false)');
        await this.opts.runtime.checkpoint(cid, join(dir, 'memory'), {
          leaveRunning: true,
          diskDest: join(dir, 'disk'),
        });
      } catch (err) {
        // The driver could not checkpoint this workload: keep the disk, and say the processes will restart on resume.
        kind = 'filesystem';
        reason = err instanceof Error ? err.message : String(err);
        if (opts.memory)
          this.log.warn(
            { sandboxId: id, reason },
            'memory checkpoint failed; pausing with the filesystem only',
          );
        await rm(join(dir, 'memory'), { recursive: true, force: true });
        await rm(join(dir, 'disk'), { recursive: true, force: true });
        await this.opts.runtime.captureDisk(cid, join(dir, 'disk'));
      }
      crashPoint('pause:captured');
      bytes = await treeBytes(dir);
      opts.admit?.(bytes);
      pausedAt = new Date().toISOString();
      await writeFile(join(dir, COMPLETE), JSON.stringify({ kind, pausedAt, bytes }));
      await syncFilesystem(dir);
      crashPoint('pause:synced');
    } catch (err) {
      await this.removePauseArtifacts(id).catch(() => {});
      await this.opts.runtime.thaw(cid).catch(() => {});
      throw err;
    }
    const state = this.stateOf(record);
    // The frozen container is released later, in the background (maintain), so the pause answers as soon as it
    // is durable. Until then a memory pause within its grace resumes by thawing. A filesystem-only pause (asked
    // for, or because the checkpoint was refused) means "restart the processes": it is never thawed.
    if (record.runtime) {
      state.resident = true;
      state.residentSlot = record.runtime.slotIndex;
      state.thawable = kind === 'memory' && this.opts.residentPauseGraceMs > 0 && !this.underMemoryPressure();
      this.setState(record, state);
    }
    const paused: PausedState = {
      kind,
      pausedAt,
      artifactDir: dir,
      ...(reason ? { reason } : {}),
      bytes,
    };
    this.sharing?.share(
      { ...record, state: 'paused', paused },
      dir,
      { ...this.opts.runtimeVersions, tools: state.toolsVersion },
      this.opts.runtime.virtualizationMode,
    );
    return paused;
  }

  private underMemoryPressure(): boolean {
    return availableMemoryRatio() < (this.opts.memoryPressureRatio ?? 0.15);
  }

  /**
   * Gives a sandbox's slot back once its container is gone. A teardown that fails stays with the network
   * manager, which retries it: the sandbox no longer needs the slot, so its kill or resume goes on.
   */
  private async releaseSlot(sandboxId: string, index: number | undefined): Promise<void> {
    if (index === undefined) return;
    await this.opts.network.releaseIndex(index).catch((err: unknown) => {
      this.log.warn(
        { err, sandboxId, index },
        'network slot teardown failed; the network manager retries it',
      );
    });
  }

  /** Drops the frozen processes and the slot of a paused sandbox; its artifacts stay. */
  private async releaseMemory(record: SandboxRecord): Promise<void> {
    const state = this.stateOf(record);
    await this.opts.runtime.destroy(this.cid(record));
    await this.releaseSlot(record.id, state.residentSlot ?? record.runtime?.slotIndex);
    this.setState(record, { ...state, resident: false, residentSlot: undefined, thawable: undefined });
  }

  async resume(
    record: SandboxRecord,
    policy: EgressPolicy,
    opts: { memory: boolean; beforeStart?: BeforeInstanceStart },
  ): Promise<StartResult> {
    let state = this.stateOf(record);
    const dir = this.pausedDir(record.id);
    // The shared copy must be gone before the sandbox runs again: nobody may resume it elsewhere meanwhile.
    await this.sharing?.forget(record.id);
    if (state.resident && (!opts.memory || !state.thawable)) {
      await this.releaseMemory(record);
      state = this.stateOf(record);
    }
    if (state.resident && state.residentSlot !== undefined) {
      const slot = this.opts.network.attach(state.residentSlot);
      const instanceId = randomUUID();
      await this.placed(opts.beforeStart, 'resume', slot, instanceId);
      await this.opts.runtime.thaw(this.cid(record));
      // No /init: envd never stopped, and nothing it was given changed (env, user, workdir and token are the
      // sandbox's for life; a container reads the host's clock, so there is no clock to set after a pause).
      this.discardInBackground(record.id);
      return {
        binding: this.binding(slot, instanceId),
        backend: this.records.encodeState({
          ...state,
          resident: false,
          residentSlot: undefined,
          thawable: undefined,
        }),
      };
    }
    if (!existsSync(join(dir, COMPLETE)))
      throw new Error(`the pause artifacts of ${record.id} are missing (${dir})`);
    const memory = opts.memory && record.paused?.kind === 'memory' ? join(dir, 'memory') : undefined;
    const result = await this.launch(
      record,
      state,
      policy,
      {
        memory,
        disk: join(dir, 'disk'),
        currentId: record.id,
        currentToken: record.secure ? this.opts.envdToken(record.id) : undefined,
        leaseHeld: true,
      },
      opts.beforeStart,
    );
    this.discardInBackground(record.id);
    return result;
  }

  async maintain(paused: readonly SandboxRecord[], opts: { releaseAll?: boolean } = {}): Promise<void> {
    const now = Date.now();
    const pressure = opts.releaseAll || this.underMemoryPressure();
    for (const r of paused) {
      const state = this.stateOf(r);
      if (!state.resident || !r.paused) continue;
      const inGrace = state.thawable && now - Date.parse(r.paused.pausedAt) < this.opts.residentPauseGraceMs;
      if (inGrace && !pressure) continue;
      try {
        await this.releaseMemory(r);
        this.log.info({ sandboxId: r.id, pressure }, 'released the memory of a paused sandbox');
      } catch (err) {
        this.log.warn({ err, sandboxId: r.id }, 'could not release the memory of a paused sandbox');
      }
    }
  }

  // ---- fork / capture ----

  async fork(
    source: SandboxRecord,
    children: readonly SandboxRecord[],
    beforeStart?: (child: SandboxRecord) => BeforeInstanceStart | undefined,
  ): Promise<ForkChildResult[]> {
    const state = this.stateOf(source);
    const work = join(this.store, 'forks', randomUUID());
    await mkdir(work, { recursive: true, mode: 0o711 });
    try {
      await this.opts.runtime.checkpoint(this.cid(source), join(work, 'memory'), {
        leaveRunning: true,
        diskDest: join(work, 'disk'),
      });
      const currentToken = source.secure ? this.opts.envdToken(source.id) : undefined;
      return await Promise.all(
        children.map(async (child): Promise<ForkChildResult> => {
          try {
            const start = await this.launch(
              child,
              { ...state },
              this.policyOf(child),
              { memory: join(work, 'memory'), disk: join(work, 'disk'), currentId: source.id, currentToken },
              beforeStart?.(child),
            );
            return { ok: true, start };
          } catch (err) {
            return { ok: false, error: err instanceof Error ? err : new Error(String(err)) };
          }
        }),
      );
    } finally {
      await this.discardWorkDir(work);
    }
  }

  private policyOf(r: SandboxRecord): EgressPolicy {
    return {
      allowOut: r.network.allowOut,
      denyOut: r.network.denyOut,
      allowInternetAccess: r.network.allowInternetAccess,
    };
  }

  async capture(record: SandboxRecord, target: CaptureTarget): Promise<CapturedSandbox> {
    const state = this.stateOf(record);
    const work = join(this.store, 'captures', target.recordId);
    await rm(work, { recursive: true, force: true });
    await mkdir(work, { recursive: true, mode: 0o711 });
    try {
      await target.createRecord?.();
      await this.opts.runtime.checkpoint(this.cid(record), join(work, 'memory'), {
        leaveRunning: true,
        diskDest: join(work, 'disk'),
      });
    } catch (err) {
      await this.discardWorkDir(work);
      throw err;
    }
    const extra: CaptureExtra = {
      sourceSandboxId: record.id,
      sourceSecure: record.secure,
      toolsVersion: state.toolsVersion,
      envdEnv: state.envdEnv,
      rootfs: state.rootfs,
      ...(record.customExtensionParams ? { customExtensionParams: record.customExtensionParams } : {}),
      ...(record.volumeMounts?.length ? { volumeMounts: record.volumeMounts } : {}),
    };
    const context = target.context ?? sandboxContext(record);
    const committed = {
      context,
      ...(target.startup ? { startup: { ...target.startup, context } } : {}),
      runtimeVersions: { ...this.opts.runtimeVersions, tools: state.toolsVersion },
      virtualizationMode: this.opts.runtime.virtualizationMode,
      baseImage: { reference: state.imageRef, manifestDigest: state.manifestDigest },
      extra: this.records.encodeCapture(extra),
    };
    return { publish: () => this.publishCapture(target.recordId, work, committed) };
  }

  /** Archives a capture's work dir into the repository, then keeps it as this node's copy of the snapshot. */
  private async publishCapture(
    recordId: string,
    work: string,
    committed: PublishInput['committed'],
  ): Promise<void> {
    try {
      await Promise.all([
        archiveDir(join(work, 'memory'), join(work, 'memory.tar')),
        archiveDir(this.opts.runtime.diskFilesDir(join(work, 'disk')), join(work, 'disk.tar')),
      ]);
      await this.opts.repository.publish(recordId, {
        layers: [{ path: join(work, 'disk.tar'), mediaType: DISK_MEDIA_TYPE }],
        artifacts: {
          memory: { path: join(work, 'memory.tar'), mediaType: this.opts.runtime.memoryMediaTypes.capture },
        },
        committed,
      });
      // What was just captured becomes this node's local copy of the snapshot: launches need no download.
      await rm(join(work, 'memory.tar'), { force: true });
      await rm(join(work, 'disk.tar'), { force: true });
      await writeFile(join(work, COMPLETE), '');
      const cache = this.snapshotCacheDir(recordId);
      await mkdir(join(this.store, 'snapshots'), { recursive: true, mode: 0o711 });
      await this.removeLocalSnapshot(recordId);
      await rename(work, cache);
    } catch (err) {
      await this.discardWorkDir(work);
      throw err;
    }
  }

  /** Removes a fork or capture work dir (`memory/`, `disk/` possibly a btrfs subvolume). */
  private async discardWorkDir(work: string): Promise<void> {
    if (existsSync(join(work, 'disk')))
      await this.opts.runtime.removeDisk(join(work, 'disk')).catch(() => {});
    await rm(work, { recursive: true, force: true });
  }

  /** The snapshot's memory and disk on this node, downloaded from the repository when missing. */
  private async ensureLocalSnapshot(snapshot: SnapshotRecord): Promise<string> {
    const dir = this.snapshotCacheDir(snapshot.id);
    if (existsSync(join(dir, COMPLETE))) return dir;
    await this.localSnapshots.run(snapshot.id, async () => {
      if (existsSync(join(dir, COMPLETE))) return;
      const committed = snapshot.committed!;
      const tmp = `${dir}.tmp-${randomUUID()}`;
      await mkdir(tmp, { recursive: true, mode: 0o711 });
      try {
        if (committed.artifacts.memory) {
          await extractArchive(
            await this.opts.repository.fetchArtifact(snapshot.id, 'memory'),
            join(tmp, 'memory'),
            committed.artifacts.memory,
          );
        }
        const disk = committed.layers[0];
        const files = this.opts.runtime.diskFilesDir(join(tmp, 'disk'));
        if (disk) await extractArchive(await this.opts.repository.fetch(disk), files, disk);
        else await mkdir(files, { recursive: true });
        await writeFile(join(tmp, COMPLETE), '');
        await this.removeLocalSnapshot(snapshot.id);
        await rename(tmp, dir);
      } catch (err) {
        await rm(tmp, { recursive: true, force: true });
        throw err;
      }
    });
    return dir;
  }

  /** Drops this node's local copy of a snapshot (it is fetched again from the repository when needed). */
  async removeLocalSnapshot(snapshotId: string): Promise<void> {
    const dir = this.snapshotCacheDir(snapshotId);
    if (!existsSync(dir)) return;
    if (existsSync(join(dir, 'disk'))) await this.opts.runtime.removeDisk(join(dir, 'disk')).catch(() => {});
    await rm(dir, { recursive: true, force: true });
  }

  async applyPolicy(record: SandboxRecord, policy: EgressPolicy): Promise<void> {
    if (!record.runtime) throw new Error(`sandbox ${record.id} has no network slot`);
    await this.opts.network.applyPolicy(this.opts.network.attach(record.runtime.slotIndex), policy);
  }

  async guestAnswers(record: SandboxRecord, timeoutMs: number): Promise<boolean> {
    if (!record.runtime) return false;
    try {
      await waitForEnvd(record.runtime.hostInteractionIp, this.opts.envdPort, { pollMs: 50, timeoutMs });
      return true;
    } catch {
      return false;
    }
  }

  // ---- restart ----

  async recover(records: readonly SandboxRecord[]): Promise<Map<string, RecoveryOutcome>> {
    const outcomes = new Map<string, RecoveryOutcome>();
    const listed = new Map((await this.opts.runtime.list()).map((s) => [s.id, s]));
    const keepSlots: number[] = [];
    const keepIds: string[] = [];
    for (const r of records) {
      let state: BackendState | undefined;
      try {
        state = this.stateIfAny(r);
      } catch (err) {
        // Recovered as far as the record allows (its container taken to be its id); what needs the state (a
        // resume, a pause) answers with this error.
        this.log.error({ err, sandboxId: r.id }, 'the stored backend state of a sandbox cannot be read');
      }
      const live = listed.get(state?.containerId ?? r.id);
      const artifactsComplete = existsSync(join(this.pausedDir(r.id), COMPLETE));
      if (r.state === 'paused') {
        // A resident pause does not survive a restart: its frozen container is removed below, the artifacts stay.
        if (state)
          this.setState(r, { ...state, resident: false, residentSlot: undefined, thawable: undefined });
        outcomes.set(
          r.id,
          artifactsComplete ? await this.recoveredPause(r, r.paused?.bytes === undefined) : { kind: 'gone' },
        );
        if (!artifactsComplete)
          this.log.error({ sandboxId: r.id }, 'paused sandbox has no complete artifacts');
        continue;
      }
      if (r.runtime && live && (live.status === 'running' || live.status === 'paused')) {
        // Running, or caught in the middle of a pause: a frozen container whose pause never completed runs on.
        if (live.status === 'paused') await this.opts.runtime.thaw(state?.containerId ?? r.id);
        await this.removePauseArtifacts(r.id);
        keepSlots.push(r.runtime.slotIndex);
        keepIds.push(state?.containerId ?? r.id);
        outcomes.set(r.id, { kind: 'running', binding: { ...r.runtime, instanceId: randomUUID() } });
      } else if (r.state === 'pausing' && artifactsComplete) {
        outcomes.set(r.id, await this.recoveredPause(r, true));
      } else {
        outcomes.set(r.id, { kind: 'gone' });
      }
    }
    const runtimeReport = await this.opts.runtime.reconcile(keepIds);
    // Ranges of sandboxes that are gone, and of pre-started and build sandboxes (removed above), are free.
    const freedRanges = this.opts.idRanges.retainOnly(
      [...outcomes].filter(([, o]) => o.kind !== 'gone').map(([id]) => id),
    );
    const networkReport = await this.opts.network.init(keepSlots);
    await this.reinstallPolicies(records, outcomes);
    await this.removeOrphanStoreDirs(outcomes);
    for (const [id, outcome] of outcomes) {
      if (outcome.kind === 'gone') this.opts.images.releaseLease(leaseHolder(id));
    }
    for (const lease of this.opts.images.listLeases()) {
      const id = lease.holder.startsWith('sandbox:') ? lease.holder.slice('sandbox:'.length) : undefined;
      if (id && !outcomes.has(id)) this.opts.images.releaseLease(lease.holder);
    }
    this.log.info(
      { runtime: runtimeReport, network: networkReport, adopted: keepIds.length, freedRanges },
      'host reconciled',
    );
    // Re-adopted sandboxes must still answer; a container that runs but whose envd is gone is not usable.
    for (const r of records) {
      const o = outcomes.get(r.id);
      if (o?.kind !== 'running') continue;
      try {
        await waitForEnvd(o.binding.hostInteractionIp, this.opts.envdPort, { pollMs: 20, timeoutMs: 2000 });
      } catch (err) {
        this.log.warn({ err, sandboxId: r.id }, 'adopted sandbox does not answer; removing it');
        await this.destroy({ ...r, runtime: o.binding }).catch(() => {});
        outcomes.set(r.id, { kind: 'gone' });
      }
    }
    return outcomes;
  }

  /**
   * A paused sandbox found at startup. When its record does not say what the pause holds (a crash between the
   * artifacts' completion and the record, or a record of a version that did not count bytes), the artifacts
   * do: their `complete` marker, and their size measured on disk.
   */
  private async recoveredPause(r: SandboxRecord, fromDisk: boolean): Promise<RecoveryOutcome> {
    if (!fromDisk) return { kind: 'paused' };
    const dir = this.pausedDir(r.id);
    let marker: { kind?: unknown; pausedAt?: unknown; bytes?: unknown } = {};
    try {
      marker = JSON.parse(await readFile(join(dir, COMPLETE), 'utf8')) as typeof marker;
    } catch {
      // an older marker (empty) or unreadable: the record and the disk say the rest
    }
    const kind = marker.kind === 'filesystem' || marker.kind === 'memory' ? marker.kind : undefined;
    const pausedAt = typeof marker.pausedAt === 'string' ? marker.pausedAt : undefined;
    const bytes =
      typeof marker.bytes === 'number' && Number.isFinite(marker.bytes) ? marker.bytes : await treeBytes(dir);
    return {
      kind: 'paused',
      paused: {
        kind: r.paused?.kind ?? kind ?? 'filesystem',
        pausedAt: r.paused?.pausedAt ?? pausedAt ?? new Date().toISOString(),
        artifactDir: dir,
        ...(r.paused?.reason ? { reason: r.paused.reason } : {}),
        bytes,
      },
    };
  }

  /**
   * Installs again the stored policy of every sandbox that survived the restart: a slot from an older version may
   * lack its chain (it would be denied everything), and a crash in the middle of a policy change left the old one.
   * A slot this fails for stays as it was, or denied everything.
   */
  private async reinstallPolicies(
    records: readonly SandboxRecord[],
    outcomes: Map<string, RecoveryOutcome>,
  ): Promise<void> {
    await Promise.all(
      records.map(async (r) => {
        const o = outcomes.get(r.id);
        if (o?.kind !== 'running') return;
        try {
          await this.opts.network.applyPolicy(
            this.opts.network.attach(o.binding.slotIndex),
            this.policyOf(r),
          );
        } catch (err) {
          this.log.error(
            { err, sandboxId: r.id },
            'could not install the egress policy of an adopted sandbox',
          );
        }
      }),
    );
  }

  /** A capture cut short by a crash leaves its repository record uncommitted: remove it, freeing its name. */
  private async dropUncommittedRecord(recordId: string): Promise<void> {
    try {
      const rec = await this.opts.repository.find(recordId);
      if (rec && !rec.committed && rec.source.kind === 'sandbox') {
        await this.opts.repository.delete(recordId);
        this.log.warn(
          { snapshotId: recordId, alias: rec.alias },
          'removed a snapshot whose capture was interrupted',
        );
      }
    } catch (err) {
      this.log.warn({ err, snapshotId: recordId }, 'could not remove an interrupted snapshot record');
    }
  }

  /** Pause artifacts without a paused sandbox, and fork/capture work dirs of a crashed run. */
  private async removeOrphanStoreDirs(outcomes: Map<string, RecoveryOutcome>): Promise<void> {
    for (const id of await readdir(join(this.store, 'paused')).catch(() => [] as string[])) {
      if (outcomes.get(id)?.kind !== 'paused') await this.removePauseArtifacts(id);
    }
    for (const sub of ['forks', 'captures']) {
      for (const name of await readdir(join(this.store, sub)).catch(() => [] as string[])) {
        const dir = join(this.store, sub, name);
        if (sub === 'captures') await this.dropUncommittedRecord(name);
        if (existsSync(join(dir, 'disk')))
          await this.opts.runtime.removeDisk(join(dir, 'disk')).catch(() => {});
        await rm(dir, { recursive: true, force: true });
      }
    }
    for (const name of await readdir(join(this.store, 'trash')).catch(() => [] as string[])) {
      await this.removeTree(join(this.store, 'trash', name)).catch(() => {});
    }
    for (const name of await readdir(join(this.store, 'snapshots')).catch(() => [] as string[])) {
      if (name.includes('.tmp-'))
        await rm(join(this.store, 'snapshots', name), { recursive: true, force: true });
    }
  }
}
