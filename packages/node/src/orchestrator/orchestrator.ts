import { DomainError, ErrorKind, isDomainError, shuttingDown } from '@aenv/protocol';
import type { Logger } from '../util/log.js';
import type { EgressPolicy } from '../network/types.js';
import type { VolumeMountRecord } from '../volume/types.js';
import {
  isSandboxMoved,
  type BeforeInstanceStart,
  type CaptureTarget,
  type CapturedSandbox,
  type LaunchSource,
  type SandboxBackend,
} from './backend.js';
import type { HookClient } from '../extension/hook-client.js';
import { EXTRA_BOOT_ARGS_ENV } from '../extension/params.js';
import { KeyedMutex, LockTimeoutError } from '../util/keyed-mutex.js';
import type { SandboxStore } from './store.js';
import { crashPoint } from '../util/crash-point.js';
import { mapLimit } from '../util/map-limit.js';
import { PausedQuota, PausedQuotaError, expiredPaused, pausedBytesInUse } from './paused-quota.js';
import {
  TRANSITIONAL_STATES,
  autoResumable,
  egressPolicyOf,
  type SandboxNetworkSettings,
  type SandboxRecord,
  type SandboxState,
  type TimeoutAction,
} from './types.js';
import { notePhase, phase } from '../util/phases.js';

export interface CreateSandboxInput {
  templateId: string;
  timeoutSecs?: number;
  onTimeout: TimeoutAction;
  autoPauseMemory?: boolean;
  autoResume: boolean;
  secure: boolean;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  allowPublicTraffic: boolean;
  /** `network.httpsPorts` / `network.maskRequestHost` (api/ingress-settings.ts). */
  httpsPorts?: number[];
  maskRequestHost?: string;
  policy: EgressPolicy;
  /**
   * The create has no `network`: a snapshot launches with the settings it recorded, if any, and of the fields
   * above only `policy.allowInternetAccess: false` applies (on top). Absent or false: the fields above, whole.
   */
  inheritNetwork?: boolean;
  /** Given with the create; absent: the template's (a snapshot's) params, if any. */
  customExtensionParams?: Record<string, unknown>;
  /**
   * The volumes to mount, given what the template (a snapshot) was taken with; throws when they cannot be
   * (docs/volumes.md). Absent: none.
   */
  resolveVolumeMounts?: (needed: readonly VolumeMountRecord[]) => Promise<VolumeMountRecord[]>;
}

export interface LaunchableTemplate extends LaunchSource {
  resources: { cpuCount: number; memoryMB: number; diskSizeMB: number };
  envdVersion: string;
  defaultUser: string;
  defaultWorkdir?: string;
  /** The template's environment (image ENV, template ENV steps); the create request's envVars win. */
  envVars?: Record<string, string>;
  /** Custom extension params recorded with a snapshot. */
  customExtensionParams?: Record<string, unknown>;
  /** Volumes a snapshot was taken with (mounted again by a launch of it). */
  volumeMounts?: VolumeMountRecord[];
  /** The network settings a snapshot was taken with (a launch without its own gets them). */
  network?: SandboxNetworkSettings;
}

/** The network settings a create gives its sandbox. */
function networkOfInput(input: Omit<CreateSandboxInput, 'templateId'>): SandboxNetworkSettings {
  return {
    allowPublicTraffic: input.allowPublicTraffic,
    ...(input.httpsPorts ? { httpsPorts: input.httpsPorts } : {}),
    ...(input.maskRequestHost !== undefined ? { maskRequestHost: input.maskRequestHost } : {}),
    allowOut: input.policy.allowOut,
    denyOut: input.policy.denyOut,
    allowInternetAccess: input.policy.allowInternetAccess,
    ...(input.policy.rules ? { rules: input.policy.rules } : {}),
    ...(input.policy.egressProxy ? { egressProxy: input.policy.egressProxy } : {}),
  };
}

/**
 * A snapshot's recorded settings for a create without `network`. Its `allow_internet_access: false` still closes
 * what the allow-list does not name; `true` is no reason to open anything (SDKs before 2.51 send it on every
 * create), so it leaves the recorded setting.
 */
function inheritedNetwork(
  recorded: SandboxNetworkSettings,
  allowInternetAccess: boolean | null,
): SandboxNetworkSettings {
  const network = structuredClone(recorded);
  if (allowInternetAccess === false) network.allowInternetAccess = false;
  return network;
}

/** Looks up what `templateID` names (id or alias of a committed template or snapshot). */
export interface TemplateLookup {
  resolveLaunchable(idOrAlias: string): Promise<LaunchableTemplate>;
}

export interface OrchestratorOptions {
  store: SandboxStore;
  backend: SandboxBackend;
  templates: TemplateLookup;
  newId: () => string;
  defaultTimeoutSecs: number;
  autoEvictIntervalMs: number;
  autoResumeMinTimeoutSecs: number;
  transitionWaitMs: number;
  logger: Logger;
  /** Times an operation for metrics (default: just runs it). */
  observe?: <T>(operation: string, fn: () => Promise<T>, stage?: string) => Promise<T>;
  /** Told when a sandbox instance stops serving traffic (so the proxy cuts its streams). */
  onInstanceStopped?: (instanceId: string) => void;
  /** Told of each lifecycle event of a sandbox (its logs, `GET /sandboxes/{id}/logs`). */
  onLifecycle?: (event: LifecycleEvent) => void;
  /** The custom extension's hooks (`[custom_extension]`), when one is configured (docs/hooks.md). */
  extension?: Pick<HookClient, 'startFresh' | 'startResume' | 'patchParams' | 'stop'>;
  /** `[orchestrator].paused_quota_mb` in bytes: what all paused sandboxes may hold on disk (0 = no quota). */
  pausedQuotaBytes?: number;
  /** `[orchestrator].paused_retention_secs` in ms: paused longer, a sandbox is deleted (0 = kept). */
  pausedRetentionMs?: number;
}

/** One lifecycle event of a sandbox, as its logs show it. */
export interface LifecycleEvent {
  sandboxId: string;
  event:
    | 'created'
    | 'restored'
    | 'lost'
    | 'paused'
    | 'pause_failed'
    | 'resumed'
    | 'resume_failed'
    | 'timeout'
    | 'forked'
    | 'snapshotted'
    | 'expired'
    | 'killed';
  level: 'info' | 'warn' | 'error';
  message: string;
  fields?: Record<string, string>;
  /** The sandbox's template and current instance when the event happened (events API, docs/events.md). */
  templateId?: string;
  instanceId?: string;
}

/** Where the time of a snapshot went: the sandbox held (capture) and the repository write (publish). */
export interface SnapshotTimings {
  captureMs: number;
  publishMs: number;
}

/** How often a running node looks for paused copies that other nodes took over (one claim read each). */
const MOVED_AWAY_CHECK_MS = 10_000;
const MOVED_AWAY_CHECKS_IN_FLIGHT = 8;
const ADOPT_MISS_TTL_MS = 3000;
const ADOPT_MISSES_MAX = 10_000;

/** `GET /nodes/{nodeID}` while the node drains (docs/cluster.md#draining). */
export interface DrainProgress {
  node: string;
  startedAt: string;
  /** Sandboxes whose pause is in the shared repository and whose local copy is gone. */
  handedOver: number;
  /** Sandboxes the drain could not hand over (they stay here, paused or running; see the log). */
  failed: number;
  /**
   * Sandboxes that must not leave this node (they mount volumes only it has): paused and kept here, to resume here
   * once the node serves again (the log says which and why).
   */
  kept: number;
  /** Sandboxes still running / paused on this node. */
  running: number;
  paused: number;
  done: boolean;
}

export interface SandboxCountersView {
  sandboxCount: number;
  sandboxStartingCount: number;
  sandboxPausedCount: number;
  allocatedCPU: number;
  allocatedMemoryBytes: number;
  pausedAllocatedCPU: number;
  pausedAllocatedMemoryBytes: number;
  createSuccesses: number;
  createFails: number;
}

type NewTimeout =
  { kind: 'set'; secs: number } | { kind: 'ensureMinimum'; secs: number } | { kind: 'useExisting' };

const NEVER = '2069-12-07T00:00:00.000Z';
/** How long a pause with `requireHealthyGuest` waits for envd's `/health` before it refuses. */
export const HEALTHY_GUEST_WAIT_MS = 2000;

/** The 503 of a pause refused because envd does not answer, naming what asked for the check (shown to the caller). */
function unhealthyGuest(asked: { requireHealthyGuest: boolean; memory: boolean }): DomainError {
  const why = asked.requireHealthyGuest ? 'requireHealthyGuest' : 'a filesystem-only pause (memory: false)';
  const instead = [
    ...(asked.requireHealthyGuest && asked.memory ? ['pause without requireHealthyGuest'] : []),
    ...(!asked.memory && !asked.requireHealthyGuest ? ['pause with its memory'] : []),
  ];
  return new DomainError(
    ErrorKind.Unavailable,
    `${why}: the sandbox's guest agent (envd) did not answer within ${HEALTHY_GUEST_WAIT_MS / 1000} s; the sandbox was not paused and keeps running (retry later${instead.map((i) => `, or ${i}`).join('')})`,
    { expose: true },
  );
}

export const notFound = (id: string): DomainError =>
  new DomainError(ErrorKind.NotFound, `sandbox ${id} not found`, { details: { sandboxId: id } });

/** Another operation holds the sandbox or moved it out of the states this one starts from. */
const conflict = (id: string, message: string): DomainError =>
  new DomainError(ErrorKind.Conflict, message, { details: { sandboxId: id } });

/** The sandbox's state does not allow the operation. */
const invalidState = (id: string, message: string): DomainError =>
  new DomainError(ErrorKind.InvalidState, message, { details: { sandboxId: id } });

/**
 * The sandbox state machine (docs/architecture.md#lifecycle): owns every record, serialises operations per
 * sandbox, applies timeouts, and drives the backend. Nothing else changes a sandbox's state.
 */
export class Orchestrator {
  private readonly sandboxes = new Map<string, SandboxRecord>();
  private readonly locks = new KeyedMutex();
  private readonly settledWaiters = new Map<string, (() => void)[]>();
  private evictTimer: NodeJS.Timeout | undefined;
  private movedAwayCheckedAt = performance.now();
  private shuttingDown = false;
  private draining: Omit<DrainProgress, 'running' | 'paused'> | undefined;
  private drainDone: Promise<void> | undefined;
  /** Snapshot publishes in flight (they run after the sandbox is released); shutdown waits for them. */
  private readonly publishing = new Set<Promise<void>>();
  private createSuccesses = 0;
  private createFails = 0;
  private readonly pausedQuota: PausedQuota;
  /**
   * Sandboxes whose timeout pause the quota refused, with the bytes that pause needed: they run on, and their
   * pause is tried again only once that much is free (not a checkpoint on every tick).
   */
  private readonly quotaBlocked = new Map<string, number>();

  constructor(private readonly opts: OrchestratorOptions) {
    this.pausedQuota = new PausedQuota(opts.pausedQuotaBytes ?? 0);
  }

  /** Loads stored sandboxes and lets the backend re-adopt or clean up what it finds on the host. */
  async init(): Promise<void> {
    const { records, undecodable } = this.opts.store.loadAll();
    for (const id of undecodable) {
      this.opts.logger.warn({ sandboxId: id }, 'discarding undecodable sandbox record');
      this.opts.store.delete(id);
    }
    const outcomes = await this.opts.backend.recover(records);
    for (const r of records) {
      const outcome = outcomes.get(r.id) ?? { kind: 'gone' as const };
      if (outcome.kind === 'gone') {
        this.opts.logger.warn(
          { sandboxId: r.id, state: r.state },
          'sandbox did not survive the restart; removed',
        );
        this.opts.store.delete(r.id);
        this.extensionStopped(r);
        this.emit({
          sandboxId: r.id,
          event: 'lost',
          level: 'error',
          message: 'sandbox did not survive the server restart; removed',
        });
        continue;
      }
      if (outcome.kind === 'paused') {
        r.state = 'paused';
        delete r.runtime;
        if (outcome.paused) r.paused = outcome.paused;
        this.extensionStopped(r);
      } else {
        r.state = 'running';
        r.runtime = outcome.binding;
      }
      this.sandboxes.set(r.id, r);
      this.opts.store.save(r);
      this.emit({
        sandboxId: r.id,
        event: 'restored',
        level: 'info',
        message: `server restarted; sandbox is ${r.state}`,
      });
    }
    this.opts.logger.info(
      {
        running: this.count('running'),
        paused: this.count('paused'),
        pausedBytes: this.pausedBytes(),
        pausedQuotaBytes: this.pausedQuota.quotaBytes,
      },
      'sandboxes restored from the state store',
    );
  }

  startEviction(): void {
    const tick = () => {
      // Expiry before maintenance: maintenance holds each paused sandbox's lock, and expiry skips locked ones.
      const paused = this.expirePaused()
        .then(() => this.maintainPaused())
        .then(() => this.sweepMovedAway());
      void Promise.all([this.evictExpired(), paused]).finally(() => {
        if (!this.shuttingDown) this.evictTimer = setTimeout(tick, this.opts.autoEvictIntervalMs);
      });
    };
    this.evictTimer = setTimeout(tick, this.opts.autoEvictIntervalMs);
    this.evictTimer.unref();
  }

  /** Tells the lifecycle listener; its failure never affects the sandbox. */
  private emit(event: LifecycleEvent, record?: SandboxRecord): void {
    const r = record ?? this.sandboxes.get(event.sandboxId);
    if (r) {
      event.templateId ??= r.templateId;
      const instance = r.runtime?.instanceId ?? r.extensionInstanceId;
      if (instance) event.instanceId ??= instance;
    }
    try {
      this.opts.onLifecycle?.(event);
    } catch (err) {
      this.opts.logger.warn({ err, sandboxId: event.sandboxId }, 'lifecycle listener failed');
    }
  }

  private timed<T>(operation: string, fn: () => Promise<T>, stage?: string): Promise<T> {
    const run = stage ? () => phase(stage, fn) : fn;
    return this.opts.observe ? this.opts.observe(operation, run, stage) : run();
  }

  /** Number of sandboxes in each state (for metrics). */
  stateCounts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const r of this.sandboxes.values()) out[r.state] = (out[r.state] ?? 0) + 1;
    return out;
  }

  /** Bytes the pause artifacts of this node's paused sandboxes hold (what `paused_quota_mb` bounds). */
  pausedBytes(): number {
    return pausedBytesInUse(this.sandboxes.values());
  }

  private count(state: SandboxState): number {
    let n = 0;
    for (const r of this.sandboxes.values()) if (r.state === state) n++;
    return n;
  }

  counters(): SandboxCountersView {
    const c: SandboxCountersView = {
      sandboxCount: 0,
      sandboxStartingCount: 0,
      sandboxPausedCount: 0,
      allocatedCPU: 0,
      allocatedMemoryBytes: 0,
      pausedAllocatedCPU: 0,
      pausedAllocatedMemoryBytes: 0,
      createSuccesses: this.createSuccesses,
      createFails: this.createFails,
    };
    for (const r of this.sandboxes.values()) {
      const mem = r.resources.memoryMB * 1024 * 1024;
      if (r.state === 'paused') {
        c.sandboxPausedCount++;
        c.pausedAllocatedCPU += r.resources.cpuCount;
        c.pausedAllocatedMemoryBytes += mem;
        continue;
      }
      c.allocatedCPU += r.resources.cpuCount;
      c.allocatedMemoryBytes += mem;
      if (r.state === 'creating' || r.state === 'resuming') c.sandboxStartingCount++;
      else c.sandboxCount++;
    }
    return c;
  }

  // ---- reads ----

  get(id: string): SandboxRecord {
    const r = this.sandboxes.get(id);
    if (!r) throw notFound(id);
    return r;
  }

  find(id: string): SandboxRecord | undefined {
    return this.sandboxes.get(id);
  }

  all(): SandboxRecord[] {
    return [...this.sandboxes.values()];
  }

  /**
   * What this node lists: its sandboxes, and those it is taking over whose claim is already its own (as their pause
   * recorded them, paused). From the claim's swap on the repository no longer lists such a sandbox as held by no
   * node, so this node does, before its record is ready (docs/cluster.md#sandboxes-held-by-no-node).
   */
  listable(): SandboxRecord[] {
    const out = this.all();
    for (const [id, r] of this.claimed) if (!this.sandboxes.has(id)) out.push(r);
    return out;
  }

  /** Ids being taken over from the shared repository right now (not held yet; adoptShared). */
  takingOver(): string[] {
    return [...this.adopting];
  }

  // ---- lifecycle ----

  private assertOpen(): void {
    if (this.shuttingDown) throw shuttingDown();
  }

  /** New sandboxes (create, fork) and resumes are refused while the node drains (docs/cluster.md#draining). */
  private assertNotDraining(): void {
    if (!this.draining) return;
    throw new DomainError(
      ErrorKind.Unavailable,
      `node ${this.draining.node} is draining: it takes no new or resumed sandboxes (they start on another node)`,
      { expose: true },
    );
  }

  /** The drain's progress, or undefined when the node is not draining. */
  drainProgress(): DrainProgress | undefined {
    if (!this.draining) return undefined;
    return { ...this.draining, running: this.count('running'), paused: this.count('paused') };
  }

  /**
   * Drain (docs/cluster.md#draining): refuses new sandboxes from now on, pauses every running one with its memory,
   * and hands every paused one over to the shared repository (dropping this node's copy), so each resumes on
   * another node — except one that must stay (it mounts volumes only this node has), which stays here paused.
   * Repeated calls join the drain in progress.
   *
   * `reportRoster` (the heartbeat reporter's `report`) resolves once the scheduler has this node's roster as it
   * is now. A sandbox counts as handed over, and the drain as done, only after the roster without it was
   * reported: until then the scheduler still binds the sandbox here, and a request for it (a connect right after
   * `done`) would reach this node, which no longer holds it and, draining, takes nothing over: 404.
   */
  drain(node: string, opts: { reportRoster?: () => Promise<void> } = {}): Promise<void> {
    if (this.draining) return this.drainDone ?? Promise.resolve();
    this.draining = {
      node,
      startedAt: new Date().toISOString(),
      handedOver: 0,
      failed: 0,
      kept: 0,
      done: false,
    };
    this.drainDone = this.runDrain(opts.reportRoster).finally(() => {
      if (this.draining) this.draining.done = true;
    });
    return this.drainDone;
  }

  private async runDrain(reportRoster?: () => Promise<void>): Promise<void> {
    const progress = this.draining!;
    await Promise.all(
      [...this.sandboxes.values()].map(async (r) => {
        try {
          const stays = await this.withLock(r.id, async (cur) => {
            if (cur.state === 'running') await this.doPause(cur, true, true);
            const reason = cur.state === 'paused' ? this.opts.backend.staysHere?.(cur) : undefined;
            if (reason) return reason;
            if (cur.state !== 'paused' || !(await this.opts.backend.handOver?.(cur))) {
              throw new Error(`sandbox is ${cur.state} and could not be handed over`);
            }
            this.sandboxes.delete(cur.id);
            this.opts.store.delete(cur.id);
            this.extensionStopped(cur);
            return undefined;
          });
          if (stays) {
            progress.kept++;
            this.opts.logger.info(
              { sandboxId: r.id, reason: stays },
              `drain: sandbox kept on this node: ${stays}`,
            );
            return;
          }
          await reportRoster?.();
          progress.handedOver++;
          this.opts.logger.info({ sandboxId: r.id }, 'drain: sandbox handed over to the shared repository');
        } catch (e) {
          if (isDomainError(e, ErrorKind.NotFound)) return;
          progress.failed++;
          this.opts.logger.error({ err: e, sandboxId: r.id }, 'drain: could not hand the sandbox over');
        }
      }),
    );
  }

  /**
   * A sandbox this node does not hold: the backend may take it over from the shared repository
   * (docs/cluster.md#sandboxes-that-move). Misses are remembered for a few seconds, so a stream of requests for
   * ids nobody has does not turn into a stream of repository listings.
   */
  async adopt(id: string): Promise<SandboxRecord | undefined> {
    return this.sandboxes.get(id) ?? this.adoptShared(id);
  }

  private readonly adoptMisses = new Map<string, number>();
  private readonly adopting = new Set<string>();
  /** Of those, the ones whose claim is this node's already (see listable). */
  private readonly claimed = new Map<string, SandboxRecord>();

  private async adoptShared(id: string): Promise<SandboxRecord | undefined> {
    if (!this.opts.backend.adoptShared || this.draining || this.shuttingDown) return undefined;
    const missedAt = this.adoptMisses.get(id);
    if (missedAt !== undefined && Date.now() - missedAt < ADOPT_MISS_TTL_MS) return undefined;
    return this.locks.run(`adopt:${id}`, this.opts.transitionWaitMs, async () => {
      const known = this.sandboxes.get(id);
      if (known) return known;
      let r: SandboxRecord | undefined;
      try {
        // Named in the roster only once there is a copy to take: while the node merely looks, the sandbox may be
        // running on another node, and a roster naming it would move that node's binding here.
        r = await this.opts.backend.adoptShared!(id, {
          found: () => this.adopting.add(id),
          claimed: (claimed) => this.claimed.set(id, claimed),
        });
        if (r) this.sandboxes.set(r.id, r);
      } finally {
        this.adopting.delete(id);
        this.claimed.delete(id);
      }
      if (!r) {
        if (this.adoptMisses.size >= ADOPT_MISSES_MAX) this.adoptMisses.clear();
        this.adoptMisses.set(id, Date.now());
        return undefined;
      }
      this.adoptMisses.delete(id);
      this.opts.store.save(r, true);
      this.emit({
        sandboxId: r.id,
        event: 'restored',
        level: 'info',
        message: 'sandbox taken over from the shared repository; it is paused on this node',
      });
      return r;
    });
  }

  private setState(r: SandboxRecord, state: SandboxState, durable = false): void {
    r.state = state;
    if (!TRANSITIONAL_STATES.has(state) || state === 'pausing' || state === 'resuming') {
      this.opts.store.save(r, durable);
    }
    if (!TRANSITIONAL_STATES.has(state)) {
      const waiters = this.settledWaiters.get(r.id);
      this.settledWaiters.delete(r.id);
      for (const w of waiters ?? []) w();
    }
  }

  private applyTimeout(r: SandboxRecord, t: NewTimeout): void {
    const now = Date.now();
    let secs: number;
    if (t.kind === 'set') secs = t.secs;
    else if (t.kind === 'useExisting') secs = r.timeoutSecs;
    else secs = Math.max(r.timeoutSecs, t.secs);
    r.timeoutSecs = secs;
    r.expiresAt = new Date(now + secs * 1000).toISOString();
  }

  /** Runs `fn` under the sandbox's lock; waits (bounded) for an operation in progress. */
  private async withLock<T>(id: string, fn: (r: SandboxRecord) => Promise<T>): Promise<T> {
    const waitFrom = performance.now();
    try {
      return await this.locks.run(id, this.opts.transitionWaitMs, async () => {
        notePhase('lock-wait', performance.now() - waitFrom);
        const r = this.sandboxes.get(id);
        if (!r) throw notFound(id);
        return fn(r);
      });
    } catch (e) {
      if (e instanceof LockTimeoutError) {
        const state = this.sandboxes.get(id)?.state ?? 'unknown';
        throw conflict(
          id,
          `sandbox ${id} is still ${state}; gave up waiting after ${this.opts.transitionWaitMs / 1000} s`,
        );
      }
      throw e;
    }
  }

  async create(input: CreateSandboxInput): Promise<SandboxRecord> {
    this.assertOpen();
    this.assertNotDraining();
    const template = await phase('template', () => this.opts.templates.resolveLaunchable(input.templateId));
    return this.createFrom(template, input);
  }

  /** Creates a sandbox on `template` as given (a cold start's image: `POST /sandboxes-cold`). */
  async createFrom(
    template: LaunchableTemplate,
    input: Omit<CreateSandboxInput, 'templateId'>,
  ): Promise<SandboxRecord> {
    this.assertOpen();
    this.assertNotDraining();
    const volumeMounts = (await input.resolveVolumeMounts?.(template.volumeMounts ?? [])) ?? [];
    const id = this.opts.newId();
    const now = new Date().toISOString();
    const network =
      input.inheritNetwork && template.network
        ? inheritedNetwork(template.network, input.policy.allowInternetAccess)
        : networkOfInput(input);
    const policy = egressPolicyOf(network);
    const record: SandboxRecord = {
      id,
      templateId: template.templateId,
      ...(template.alias ? { alias: template.alias } : {}),
      state: 'creating',
      createdAt: now,
      expiresAt: null,
      timeoutSecs: input.timeoutSecs ?? this.opts.defaultTimeoutSecs,
      resources: template.resources,
      metadata: input.metadata,
      envVars: { ...template.envVars, ...input.envVars },
      secure: input.secure,
      network,
      onTimeout: input.onTimeout,
      ...(input.autoPauseMemory === false ? { autoPauseMemory: false } : {}),
      autoResume: input.autoResume,
      envdVersion: template.envdVersion,
      defaultUser: template.defaultUser,
      ...(template.defaultWorkdir ? { defaultWorkdir: template.defaultWorkdir } : {}),
      ...(input.customExtensionParams || template.customExtensionParams
        ? { customExtensionParams: input.customExtensionParams ?? template.customExtensionParams }
        : {}),
      backend: {},
      ...(volumeMounts.length ? { volumeMounts } : {}),
    };
    this.sandboxes.set(id, record);
    return this.locks.run(id, this.opts.transitionWaitMs, async () => {
      const hooks = this.startHooks(record);
      try {
        const started = await this.timed('create', () =>
          this.opts.backend.start(record, template, policy, hooks.beforeStart),
        );
        hooks.started(started.binding.instanceId);
        record.runtime = started.binding;
        record.backend = started.backend;
        this.applyTimeout(record, { kind: 'set', secs: record.timeoutSecs });
        this.setState(record, 'running');
        this.createSuccesses++;
        this.emit({
          sandboxId: id,
          event: 'created',
          level: 'info',
          message: `sandbox created from ${template.cold ? 'image' : 'template'} ${template.alias ?? template.templateId}`,
          fields: { templateID: template.templateId },
        });
        return record;
      } catch (e) {
        hooks.started(undefined);
        this.createFails++;
        this.sandboxes.delete(id);
        this.opts.store.delete(id);
        this.notifySettled(id);
        throw e;
      }
    });
  }

  private notifySettled(id: string): void {
    const waiters = this.settledWaiters.get(id);
    this.settledWaiters.delete(id);
    for (const w of waiters ?? []) w();
  }

  /** Resolves when the sandbox is in a non-transitional state or gone (at most the transition wait). */
  async settle(id: string): Promise<SandboxRecord | undefined> {
    const r = this.sandboxes.get(id);
    if (!r || !TRANSITIONAL_STATES.has(r.state)) return r;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, this.opts.transitionWaitMs);
      const list = this.settledWaiters.get(id) ?? [];
      list.push(() => {
        clearTimeout(timer);
        resolve();
      });
      this.settledWaiters.set(id, list);
    });
    return this.sandboxes.get(id);
  }

  async kill(id: string, cause?: 'timeout'): Promise<void> {
    if (!this.sandboxes.has(id)) throw notFound(id);
    await this.withLock(id, (r) =>
      this.destroyLocked(
        r,
        cause === 'timeout' ? 'sandbox killed (timed out)' : 'sandbox killed',
        cause ? { cause } : undefined,
      ),
    );
  }

  /** Removes a sandbox (record, host objects, pause artifacts) under its lock: DELETE and retention expiry. */
  private async destroyLocked(
    r: SandboxRecord,
    message: string,
    fields?: Record<string, string>,
  ): Promise<void> {
    const id = r.id;
    this.stopServing(r);
    this.setState(r, 'killing');
    try {
      await this.timed('kill', () => this.opts.backend.destroy(r));
    } catch (e) {
      this.opts.logger.error({ err: e, sandboxId: id }, 'kill failed; the sandbox is left as it was');
      this.setState(r, r.paused ? 'paused' : 'running');
      throw e;
    }
    this.sandboxes.delete(id);
    this.quotaBlocked.delete(id);
    this.opts.store.delete(id);
    this.notifySettled(id);
    this.emit({ sandboxId: id, event: 'killed', level: 'info', message, ...(fields ? { fields } : {}) }, r);
    this.extensionStopped(r);
  }

  /**
   * The start hooks of one start of `r` (docs/hooks.md). `beforeStart` tells the extension, `started` settles it:
   * every instance it was told of and that did not become the sandbox's (a failed start, a pre-started sandbox
   * given up) is told `stop`, so the extension holds nothing for it.
   */
  private startHooks(
    r: SandboxRecord,
    kind?: 'resume',
  ): { beforeStart?: BeforeInstanceStart; started(instanceId: string | undefined): void } {
    const ext = this.opts.extension;
    if (!ext) return { started: () => {} };
    const told: string[] = [];
    return {
      beforeStart: async (p) => {
        told.push(p.instanceId);
        const body = {
          sandboxId: r.id,
          sandboxInstanceId: p.instanceId,
          networkNamespacePath: p.netnsPath,
          hostInteractionIp: p.hostInteractionIp,
          ...(r.customExtensionParams ? { customExtensionParams: r.customExtensionParams } : {}),
        };
        if ((kind ?? p.kind) === 'resume') {
          await ext.startResume(body);
          return {};
        }
        const args = await ext.startFresh(body);
        return args === undefined ? {} : { extraEnv: { [EXTRA_BOOT_ARGS_ENV]: args } };
      },
      started: (instanceId) => {
        for (const i of told) if (i !== instanceId) ext.stop(r.id, i);
        if (instanceId !== undefined && told.includes(instanceId)) r.extensionInstanceId = instanceId;
      },
    };
  }

  /** Tells the extension (best effort) that the sandbox's instance stopped: kill, pause, a loss at restart. */
  private extensionStopped(r: SandboxRecord): void {
    if (!r.extensionInstanceId) return;
    this.opts.extension?.stop(r.id, r.extensionInstanceId);
    delete r.extensionInstanceId;
  }

  /** The sandbox's custom extension params (`{}` when none). */
  extensionParams(id: string): Record<string, unknown> {
    return this.get(id).customExtensionParams ?? {};
  }

  /**
   * `PATCH /custom-extension-params`: the extension computes the full new params from `patch`; they replace the
   * stored ones. Only a running sandbox (409 otherwise, docs/hooks.md); no extension or a failed hook → 400.
   */
  async patchExtensionParams(id: string, patch: Record<string, unknown>): Promise<Record<string, unknown>> {
    const ext = this.opts.extension;
    if (!ext)
      throw new DomainError(ErrorKind.InvalidArgument, 'no custom extension is configured on this node');
    return this.withLock(id, async (r) => {
      if (r.state !== 'running') {
        throw new DomainError(
          ErrorKind.Conflict,
          `custom extension params cannot be changed from ${r.state} state`,
        );
      }
      const params = await ext.patchParams(r.id, patch);
      r.customExtensionParams = params;
      this.opts.store.save(r);
      return params;
    });
  }

  private stopServing(r: SandboxRecord): void {
    if (r.runtime) this.opts.onInstanceStopped?.(r.runtime.instanceId);
  }

  /** `POST /timeout`: expiry = now + secs, may shorten. Only running sandboxes (the API answers others as the reference does). */
  async setTimeout(id: string, secs: number): Promise<void> {
    await this.withLock(id, async (r) => {
      if (r.state !== 'running') {
        throw invalidState(id, `sandbox ${id} timeout cannot be changed from ${r.state} state`);
      }
      this.applyTimeout(r, { kind: 'set', secs });
      this.opts.store.save(r);
    });
  }

  /** `POST /refreshes` and keep-alive on connect: only ever extends. */
  async refresh(id: string, secs: number): Promise<void> {
    await this.withLock(id, async (r) => {
      if (r.state !== 'running') {
        throw invalidState(id, `sandbox ${id} cannot be refreshed from ${r.state} state`);
      }
      this.extend(r, secs);
    });
  }

  private extend(r: SandboxRecord, secs: number): void {
    const proposed = Date.now() + secs * 1000;
    if (r.expiresAt && Date.parse(r.expiresAt) >= proposed) return;
    r.timeoutSecs = secs;
    r.expiresAt = new Date(proposed).toISOString();
    this.opts.store.save(r);
  }

  /** `POST /connect`: running → keep-alive (200); paused → resume (201). */
  async connect(
    id: string,
    timeoutSecs: number,
    opts: { memory?: boolean } = {},
  ): Promise<{ record: SandboxRecord; resumed: boolean }> {
    const current = this.sandboxes.get(id) ?? (await this.adoptShared(id));
    if (!current || current.state === 'killing') throw notFound(id);
    if (current.state === 'pausing') throw invalidState(id, 'sandbox cannot be resumed from pausing state');
    return this.withLock(id, async (r) => {
      if (r.state === 'running') {
        this.extend(r, timeoutSecs);
        return { record: r, resumed: false };
      }
      if (r.state === 'paused') {
        await this.doResume(r, { kind: 'set', secs: timeoutSecs }, opts.memory ?? true);
        return { record: r, resumed: true };
      }
      throw conflict(id, `sandbox cannot be resumed from ${r.state} state`);
    });
  }

  /**
   * Deprecated `POST /resume`: paused → resume; running → set timeout; 201 either way. `onTimeout` replaces the
   * sandbox's timeout action (E2B `ResumedSandbox.autoPause`), `memory: false` boots the saved disk.
   */
  async resume(
    id: string,
    timeoutSecs: number,
    opts: { memory?: boolean; onTimeout?: TimeoutAction } = {},
  ): Promise<SandboxRecord> {
    const current = this.sandboxes.get(id) ?? (await this.adoptShared(id));
    if (!current || current.state === 'killing') throw notFound(id);
    if (current.state !== 'running' && current.state !== 'paused') {
      throw conflict(id, `sandbox cannot be resumed from ${current.state} state`);
    }
    return this.withLock(id, async (r) => {
      if (r.state === 'running') {
        this.applyTimeout(r, { kind: 'set', secs: timeoutSecs });
        if (opts.onTimeout) r.onTimeout = opts.onTimeout;
        this.opts.store.save(r);
      } else if (r.state === 'paused') {
        await this.doResume(r, { kind: 'set', secs: timeoutSecs }, opts.memory ?? true);
        if (opts.onTimeout && opts.onTimeout !== r.onTimeout) {
          r.onTimeout = opts.onTimeout;
          this.opts.store.save(r);
        }
      } else {
        throw conflict(id, `sandbox cannot be resumed from ${r.state} state`);
      }
      return r;
    });
  }

  /**
   * Proxy auto-resume: timeout = max(existing, auto_resume_min_sandbox_timeout_secs). Refused for a sandbox that
   * did not enable it or was paused without its memory (see `autoResumable`).
   */
  async autoResume(id: string): Promise<SandboxRecord> {
    if (!this.sandboxes.has(id)) await this.adoptShared(id);
    return this.withLock(id, async (r) => {
      if (r.state !== 'paused') return r;
      if (!autoResumable(r)) {
        throw invalidState(
          id,
          r.autoResume
            ? `sandbox ${id} was paused without its memory; resume it with connect`
            : `sandbox ${id} does not auto-resume`,
        );
      }
      await this.doResume(r, { kind: 'ensureMinimum', secs: this.opts.autoResumeMinTimeoutSecs });
      return r;
    });
  }

  private async doResume(r: SandboxRecord, timeout: NewTimeout, memory = true): Promise<void> {
    this.assertOpen();
    this.assertNotDraining();
    this.setState(r, 'resuming');
    crashPoint('resume:recorded');
    const hooks = this.startHooks(r, 'resume');
    try {
      const started = await this.timed('resume', () =>
        this.opts.backend.resume(r, egressPolicyOf(r.network), {
          memory,
          ...(hooks.beforeStart ? { beforeStart: hooks.beforeStart } : {}),
        }),
      );
      hooks.started(started.binding.instanceId);
      r.runtime = started.binding;
      r.backend = started.backend;
      const kind = r.paused?.kind === 'memory' && memory ? 'memory' : 'filesystem';
      delete r.paused;
      this.applyTimeout(r, timeout);
      this.setState(r, 'running');
      this.emit({
        sandboxId: r.id,
        event: 'resumed',
        level: 'info',
        message: kind === 'memory' ? 'sandbox resumed' : 'sandbox resumed from its disk (cold boot)',
        fields: { kind },
      });
    } catch (e) {
      hooks.started(undefined);
      if (isSandboxMoved(e)) {
        await this.dropMoved(r, e.sandboxMovedTo);
        throw e;
      }
      this.opts.logger.error({ err: e, sandboxId: r.id }, 'resume failed; the sandbox stays paused');
      this.setState(r, 'paused');
      this.emit({
        sandboxId: r.id,
        event: 'resume_failed',
        level: 'error',
        message: `resume failed; the sandbox stays paused: ${(e as Error).message}`,
      });
      throw e;
    }
  }

  /**
   * Paused sandboxes that another node took over are dropped (docs/cluster.md#sandbox-ownership): at startup,
   * before the node reports its roster, and every MOVED_AWAY_CHECK_MS while it runs — a node that was thought
   * gone for a while and came back would otherwise keep them in its heartbeat roster, which binds them back
   * here. Returns how many.
   */
  async dropMovedAway(): Promise<number> {
    const movedTo = this.opts.backend.movedTo;
    if (!movedTo) return 0;
    let dropped = 0;
    const paused = [...this.sandboxes.values()].filter((r) => r.state === 'paused');
    await mapLimit(paused, MOVED_AWAY_CHECKS_IN_FLIGHT, async (r) => {
      try {
        const owner = await movedTo.call(this.opts.backend, r.id);
        if (owner === undefined) return;
        const gone = await this.withLock(r.id, async (cur) => {
          if (cur.state !== 'paused') return false; // resumed here meanwhile: its claim is this node's again
          await this.dropMoved(cur, owner);
          return true;
        });
        if (gone) dropped++;
      } catch (err) {
        if (isDomainError(err) && err.kind === ErrorKind.NotFound) return; // killed meanwhile
        this.opts.logger.warn({ err, sandboxId: r.id }, 'could not read the claim of a paused sandbox');
      }
    });
    return dropped;
  }

  private async sweepMovedAway(): Promise<void> {
    if (this.shuttingDown || performance.now() - this.movedAwayCheckedAt < MOVED_AWAY_CHECK_MS) return;
    this.movedAwayCheckedAt = performance.now();
    const dropped = await this.dropMovedAway();
    if (dropped > 0)
      this.opts.logger.info({ sandboxes: dropped }, 'dropped paused sandboxes that moved to other nodes');
  }

  /** Another node took the sandbox over while this node was away: this node's copy is stale and goes. */
  private async dropMoved(r: SandboxRecord, owner: string): Promise<void> {
    this.opts.logger.warn(
      { sandboxId: r.id, owner },
      'sandbox moved to another node; dropping the local copy',
    );
    await this.opts.backend.destroy(r).catch((err: unknown) => {
      this.opts.logger.warn({ err, sandboxId: r.id }, 'could not remove the stale copy of a moved sandbox');
    });
    this.sandboxes.delete(r.id);
    this.opts.store.delete(r.id);
    this.emit(
      { sandboxId: r.id, event: 'lost', level: 'info', message: `sandbox moved to node ${owner}` },
      r,
    );
  }

  /**
   * `POST /pause`: idempotent on paused; 409 from other non-running states, as the reference's API. With
   * `requireHealthyGuest`, and always for a filesystem-only pause (`memory: false`), a sandbox whose envd does
   * not answer is not paused (503) and keeps running (E2B's `SandboxPauseRequest`, docs/differences.md).
   */
  async pause(
    id: string,
    opts: { memory?: boolean; requireHealthyGuest?: boolean; cause?: 'timeout' } = {},
  ): Promise<void> {
    const current = this.sandboxes.get(id);
    if (!current || current.state === 'killing') throw notFound(id);
    if (current.state === 'paused') return;
    if (current.state !== 'running' && current.state !== 'pausing') {
      throw conflict(id, `sandbox cannot be paused from ${current.state} state`);
    }
    await this.withLock(id, async (r) => {
      if (r.state === 'paused') return;
      if (r.state !== 'running') throw conflict(id, `sandbox cannot be paused from ${r.state} state`);
      const memory = opts.memory ?? true;
      if (
        (opts.requireHealthyGuest || !memory) &&
        !(await this.opts.backend.guestAnswers(r, HEALTHY_GUEST_WAIT_MS))
      ) {
        throw unhealthyGuest({ requireHealthyGuest: opts.requireHealthyGuest === true, memory });
      }
      await this.doPause(r, memory, false, opts.cause);
    });
    // What the pause leaves resident but will never thaw (no grace, memory pressure, filesystem-only) is released
    // now, in the background, rather than at the next tick or by the next resume.
    if (!this.shuttingDown) void this.maintainPaused({ only: id });
  }

  /**
   * `exempt`: the shutdown pause, which the quota counts but never refuses (refusing it would lose the sandbox).
   * `cause` is what the pause event says caused it. A refused pause leaves nothing written and the sandbox running as it was.
   */
  private async doPause(r: SandboxRecord, memory = true, exempt = false, cause?: 'timeout'): Promise<void> {
    if (!exempt) {
      try {
        this.pausedQuota.checkRoom(r.id, this.sandboxes.values());
      } catch (e) {
        this.pauseFailed(r, e);
        throw e;
      }
    }
    this.stopServing(r);
    this.setState(r, 'pausing');
    try {
      const admit = (bytes: number) =>
        exempt
          ? this.pausedQuota.force(r.id, bytes)
          : this.pausedQuota.admit(r.id, bytes, this.sandboxes.values());
      try {
        r.paused = await this.timed('pause', () => this.opts.backend.pause(r, { memory, admit }));
      } finally {
        this.pausedQuota.release(r.id);
      }
      this.quotaBlocked.delete(r.id);
      const instanceId = r.runtime?.instanceId;
      delete r.runtime;
      const stopped = r.extensionInstanceId;
      delete r.extensionInstanceId;
      this.setState(r, 'paused', true);
      if (stopped) this.opts.extension?.stop(r.id, stopped);
      crashPoint('pause:recorded');
      this.opts.logger.info(
        { sandboxId: r.id, kind: r.paused.kind, reason: r.paused.reason },
        'sandbox paused',
      );
      this.emit({
        sandboxId: r.id,
        event: 'paused',
        level: 'info',
        message: r.paused.kind === 'memory' ? 'sandbox paused' : 'sandbox paused (filesystem only)',
        fields: {
          kind: r.paused.kind,
          ...(r.paused.reason ? { reason: r.paused.reason } : {}),
          ...(cause ? { cause } : {}),
        },
        ...(instanceId ? { instanceId } : {}),
      });
    } catch (e) {
      this.setState(r, 'running');
      this.pauseFailed(r, e);
      throw e;
    }
  }

  private pauseFailed(r: SandboxRecord, e: unknown): void {
    const quota = e instanceof PausedQuotaError;
    if (quota)
      this.opts.logger.warn(
        { sandboxId: r.id, quotaBytes: this.pausedQuota.quotaBytes, pausedBytes: this.pausedBytes() },
        'pause refused by the paused-sandbox quota; the sandbox keeps running',
      );
    else this.opts.logger.error({ err: e, sandboxId: r.id }, 'pause failed; the sandbox keeps running');
    this.emit({
      sandboxId: r.id,
      event: 'pause_failed',
      level: quota ? 'warn' : 'error',
      message: quota
        ? (e as Error).message
        : `pause failed; the sandbox keeps running: ${(e as Error).message}`,
      ...(quota ? { fields: { reason: 'paused_quota' } } : {}),
    });
  }

  async updateNetwork(id: string, policy: EgressPolicy): Promise<void> {
    await this.withLock(id, async (r) => {
      if (r.state !== 'running') {
        throw conflict(id, `sandbox network cannot be updated from ${r.state} state`);
      }
      await this.opts.backend.applyPolicy(r, policy);
      // The update replaces the whole policy: rules or an egressProxy it leaves out are gone.
      const { rules: _old, egressProxy: _replaced, ...kept } = r.network;
      r.network = { ...kept, ...policy };
      this.opts.store.save(r);
    });
  }

  /**
   * `POST /fork`: one checkpoint of the running source, restored into `count` children, each with its own id,
   * tokens and timeout (`timeoutSecs`, or the source's duration re-based at now). The source keeps its id and
   * expiry. Per-child failures come back in the array.
   */
  async fork(
    id: string,
    opts: { count: number; timeoutSecs?: number },
  ): Promise<({ ok: true; record: SandboxRecord } | { ok: false; error: DomainError })[]> {
    this.assertOpen();
    this.assertNotDraining();
    const current = this.sandboxes.get(id);
    if (!current || current.state === 'killing') throw notFound(id);
    if (current.state !== 'running')
      throw conflict(id, `sandbox cannot be forked from ${current.state} state`);
    return this.withLock(id, async (src) => {
      if (src.state !== 'running') throw conflict(id, `sandbox cannot be forked from ${src.state} state`);
      const now = new Date().toISOString();
      const children: SandboxRecord[] = Array.from({ length: opts.count }, () => ({
        ...structuredClone({ ...src, runtime: undefined, paused: undefined, extensionInstanceId: undefined }),
        id: this.opts.newId(),
        state: 'creating' as const,
        createdAt: now,
        expiresAt: null,
        timeoutSecs: opts.timeoutSecs ?? src.timeoutSecs,
      }));
      for (const c of children) this.sandboxes.set(c.id, c);
      this.setState(src, 'forking');
      const hooks = new Map(children.map((c) => [c.id, this.startHooks(c, 'resume')]));
      let results;
      try {
        results = await this.timed('fork', () =>
          this.opts.backend.fork(src, children, (c) => hooks.get(c.id)?.beforeStart),
        );
      } catch (e) {
        for (const h of hooks.values()) h.started(undefined);
        for (const c of children) this.sandboxes.delete(c.id);
        this.createFails += children.length;
        throw e;
      } finally {
        this.setState(src, 'running');
      }
      return children.map((child, i) => {
        const r = results[i]!;
        hooks.get(child.id)?.started(r.ok ? r.start.binding.instanceId : undefined);
        if (r.ok) {
          child.runtime = r.start.binding;
          child.backend = r.start.backend;
          this.applyTimeout(child, { kind: 'set', secs: child.timeoutSecs });
          this.setState(child, 'running');
          this.createSuccesses++;
          this.emit({
            sandboxId: child.id,
            event: 'created',
            level: 'info',
            message: `sandbox created as a fork of ${id}`,
            fields: { templateID: child.templateId, forkedFrom: id },
          });
          this.emit({
            sandboxId: id,
            event: 'forked',
            level: 'info',
            message: `sandbox forked into ${child.id}`,
            fields: { fork: child.id },
          });
          return { ok: true as const, record: child };
        }
        this.sandboxes.delete(child.id);
        this.notifySettled(child.id);
        this.createFails++;
        this.opts.logger.warn({ err: r.error, sandboxId: child.id, source: id }, 'fork child failed');
        const error = new DomainError(ErrorKind.Internal, `fork child failed: ${r.error.message}`, {
          cause: r.error,
        });
        return { ok: false as const, error };
      });
    });
  }

  /**
   * Snapshots a running sandbox. It is held in `snapshotting` only while its memory and disk are captured;
   * publishing into the repository follows with the sandbox running again (as the reference orders it).
   */
  async snapshot(id: string, target: CaptureTarget): Promise<SnapshotTimings> {
    this.assertOpen();
    const current = this.sandboxes.get(id);
    if (!current || current.state === 'killing') throw notFound(id);
    if (current.state !== 'running')
      throw invalidState(id, `sandbox cannot be snapshotted from ${current.state} state`);
    const t0 = performance.now();
    const captured = await this.timed('snapshot', () => this.snapshotCapture(id, target), 'capture');
    const t1 = performance.now();
    this.emit({
      sandboxId: id,
      event: 'snapshotted',
      level: 'info',
      message: `snapshot ${target.recordId} taken`,
      fields: { snapshotID: target.recordId },
    });
    const publishing = this.timed('snapshot', () => captured.publish(), 'publish');
    this.publishing.add(publishing);
    try {
      await publishing;
    } finally {
      this.publishing.delete(publishing);
    }
    return { captureMs: t1 - t0, publishMs: performance.now() - t1 };
  }

  private snapshotCapture(id: string, target: CaptureTarget): Promise<CapturedSandbox> {
    return this.withLock(id, async (r) => {
      if (r.state !== 'running')
        throw invalidState(id, `sandbox cannot be snapshotted from ${r.state} state`);
      this.setState(r, 'snapshotting');
      try {
        return await this.opts.backend.capture(r, target);
      } finally {
        this.setState(r, 'running');
      }
    });
  }

  /** Lets the backend release what paused sandboxes still hold (resident memory) when it is time. */
  async maintainPaused(opts: { releaseAll?: boolean; only?: string } = {}): Promise<void> {
    const candidates =
      opts.only === undefined ? [...this.sandboxes.values()] : [this.sandboxes.get(opts.only)];
    const paused = candidates.filter(
      (r): r is SandboxRecord => r?.state === 'paused' && !this.locks.isLocked(r.id),
    );
    await Promise.all(
      paused.map((p) =>
        this.locks
          .run(p.id, this.opts.transitionWaitMs, async () => {
            const r = this.sandboxes.get(p.id);
            if (r?.state !== 'paused') return;
            const before = JSON.stringify(r.backend);
            await this.opts.backend.maintain([r], { releaseAll: opts.releaseAll === true });
            if (JSON.stringify(r.backend) !== before) this.opts.store.save(r);
          })
          .catch((err: unknown) =>
            this.opts.logger.warn({ err, sandboxId: p.id }, 'paused-sandbox maintenance failed'),
          ),
      ),
    );
  }

  /**
   * Applies each expired running sandbox's timeout action; failures are retried on the next tick. A timeout
   * pause the paused-sandbox quota refuses leaves the sandbox running (killing it would lose what the pause was
   * to keep): it is paused once the quota has room for it (docs/security.md, "Starving the others or the host").
   */
  async evictExpired(): Promise<void> {
    const now = Date.now();
    const due = [...this.sandboxes.values()].filter(
      (r) =>
        r.state === 'running' &&
        r.expiresAt !== null &&
        Date.parse(r.expiresAt) <= now &&
        !this.locks.isLocked(r.id),
    );
    await Promise.all(
      due.map(async (r) => {
        const blocked = this.quotaBlocked.get(r.id);
        if (r.onTimeout === 'pause' && blocked !== undefined) {
          if (!this.pausedQuota.fits(blocked, this.sandboxes.values())) return;
          this.quotaBlocked.delete(r.id);
        }
        try {
          this.emit({
            sandboxId: r.id,
            event: 'timeout',
            level: 'info',
            message: `sandbox timed out; ${r.onTimeout === 'pause' ? 'pausing' : 'killing'} it`,
            fields: { action: r.onTimeout },
          });
          if (r.onTimeout === 'pause')
            await this.pause(r.id, { memory: r.autoPauseMemory ?? true, cause: 'timeout' });
          else await this.kill(r.id, 'timeout');
          this.opts.logger.info({ sandboxId: r.id, action: r.onTimeout }, 'sandbox timed out');
        } catch (e) {
          if (isDomainError(e, ErrorKind.NotFound)) return;
          if (e instanceof PausedQuotaError) {
            // The bytes it needed (at least 1: a refusal before measuring waits for any room at all).
            this.quotaBlocked.set(r.id, Math.max(1, e.neededBytes ?? 1));
            return;
          }
          this.opts.logger.warn({ err: e, sandboxId: r.id }, 'timeout action failed; will retry');
        }
      }),
    );
  }

  /** Deletes sandboxes paused longer than `paused_retention_secs`, the way DELETE does. */
  async expirePaused(): Promise<void> {
    const retentionMs = this.opts.pausedRetentionMs ?? 0;
    const expired = expiredPaused(this.sandboxes.values(), retentionMs, Date.now()).filter(
      (r) => !this.locks.isLocked(r.id),
    );
    for (const r of expired) {
      const pausedAt = r.paused?.pausedAt;
      try {
        await this.withLock(r.id, async (cur) => {
          // Resumed or paused again meanwhile: not expired any more.
          if (cur.state !== 'paused' || cur.paused?.pausedAt !== pausedAt) return;
          this.emit({
            sandboxId: r.id,
            event: 'expired',
            level: 'info',
            message: `paused since ${pausedAt}, longer than orchestrator.paused_retention_secs (${retentionMs / 1000} s); deleting it`,
          });
          await this.destroyLocked(cur, 'deleted after its paused retention', { cause: 'retention' });
          this.opts.logger.info(
            { sandboxId: r.id, pausedAt, retentionSecs: retentionMs / 1000 },
            'paused sandbox deleted: retention expired',
          );
        });
      } catch (e) {
        if (isDomainError(e, ErrorKind.NotFound)) continue;
        this.opts.logger.warn(
          { err: e, sandboxId: r.id },
          'could not delete an expired paused sandbox; will retry',
        );
      }
    }
  }

  /** Graceful shutdown (docs/operations.md): pause every running sandbox, wait for transitional ones. */
  async shutdown(): Promise<void> {
    this.shuttingDown = true;
    if (this.evictTimer) clearTimeout(this.evictTimer);
    for (let pass = 0; pass < 3; pass++) {
      const pending = [...this.sandboxes.values()].filter((r) => r.state !== 'paused');
      if (pending.length === 0) break;
      await Promise.all(
        pending.map(async (r) => {
          try {
            await this.withLock(r.id, async (cur) => {
              if (cur.state === 'running') await this.doPause(cur, true, true);
            });
          } catch (e) {
            this.opts.logger.error({ err: e, sandboxId: r.id }, 'could not pause sandbox at shutdown');
          }
        }),
      );
    }
    // Nothing stays frozen in memory while the server is down (a restart would discard it anyway).
    await this.maintainPaused({ releaseAll: true });
    // Snapshots whose sandbox is already paused may still be writing into the repository.
    await Promise.allSettled([...this.publishing]);
  }

  expiryOf(r: SandboxRecord): string {
    return r.expiresAt ?? NEVER;
  }
}
