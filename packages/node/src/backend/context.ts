// What every operation of the container backend shares: its options, the sandbox factory, the record codec, the
// capture dirs, and the few small helpers over a sandbox record (its state, its container id, its /init body).
import type { InitBody } from '@aenv/protocol';
import type { Registry } from 'prom-client';
import type { ImageService } from '../image/index.js';
import type { SingleFlight } from '../image/single-flight.js';
import type { NetworkManager } from '../network/index.js';
import type { EgressPolicy } from '../network/types.js';
import { egressPolicyOf, type RuntimeBinding, type SandboxRecord } from '../orchestrator/types.js';
import type { RuntimeDriver, ToolsMount, VolumeMountSpec } from '../runtime/driver.js';
import type { IdRangeAllocator } from '../runtime/index.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import type { CaptureDirs } from './capture-dirs.js';
import type { BackendRecordCodec, BackendState } from './record-state.js';
import type { AssembledSandbox, SandboxFactory } from './sandbox-factory.js';
import type { NodeVolumes } from './volume-affinity.js';

/** How the warm sandbox pool is sized (from `[pool]`). */
export interface WarmPoolSizing {
  /** `warm_sandboxes`: ready sandboxes per template in use without demand; 0 disables the pool. */
  low: number;
  /** `high_watermark`: the most a template's refill target grows to. */
  high: number;
  /** `sandbox_idle_secs` in ms: a target above `low` halves after this long without a create. */
  quietMs: number;
  /** `sandbox_fill_concurrency`: sandboxes booted at once while refilling. */
  fillConcurrency: number;
  /** `sandbox_min_available_memory_ratio`: no refill while MemAvailable / MemTotal is below it. */
  minAvailableMemoryRatio: number;
  /** Prometheus registry for the pool's metrics (none: not exported). */
  registry?: Registry;
}

export interface ContainerBackendOptions {
  runtime: RuntimeDriver;
  /** The host directory of a persistent volume (docs/volumes.md); absent: no sandbox mounts any. */
  volumeDir?: (volumeId: string) => Promise<string>;
  /** Which volumes this node has and whether every node has them (a sandbox mounting node-affine ones stays). */
  volumes?: NodeVolumes;
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
  /** `[limits].max_concurrent_restores`: memory restores run at once (the rest wait their turn). */
  maxConcurrentRestores: number;
  /** `[orchestrator].resident_pause_grace_secs` in ms: how long a paused sandbox stays frozen in memory. */
  residentPauseGraceMs: number;
  /** Below this share of available RAM, paused sandboxes release their memory at once. */
  memoryPressureRatio?: number;
  /** Versions recorded with every capture (envd, tools, the runtime driver's host components, ...). */
  runtimeVersions: Record<string, string>;
  /** The warm sandbox pool (`[pool]`; docs/architecture.md, "Warm sandbox pool"). */
  warmPool: WarmPoolSizing;
  /** `[pool].start_captures`: cold creates of an image-based template restore a node-local start capture. */
  startCaptures: boolean;
  /** Copy paused sandboxes into the repository (a shared one lets other nodes resume them). */
  sharePaused: boolean;
  /** `[node_identity].node_id`: whom the sandbox claims of a shared repository name (docs/cluster.md). */
  nodeId?: string;
  /** `[orchestrator].paused_retention_secs`, recorded in each shared pause (0 or absent = kept). */
  pausedRetentionSecs?: number;
  /** envd access token of a sandbox (secure sandboxes). */
  envdToken(sandboxId: string): string;
  /** The node's credential for envd's /init of the container or sandbox with this id (docs/security.md). */
  envdInitKey(id: string): string;
  /** `[sandbox_proxy].signed_url_max_lifetime_secs`, handed to envd with /init. */
  signedUrlMaxLifetimeSecs: number;
  /** Each sandbox's own uid range, held by its sandbox id (a pre-started one's by its container id). */
  idRanges: IdRangeAllocator;
  /** Template builds: scratch dir for disk archives, and the versions a disk-only template capture records. */
  templateBuilds: { workDir: string; diskCaptureVersions: Record<string, string> };
  logger: Logger;
}

export interface BackendContext {
  readonly o: ContainerBackendOptions;
  readonly factory: SandboxFactory;
  readonly records: BackendRecordCodec;
  readonly dirs: CaptureDirs;
  /** One download at a time per snapshot (local-snapshots.ts). */
  readonly snapshotDownloads: SingleFlight<void>;
  readonly log: Logger;
}

/** Who holds a sandbox's image lease. */
export const leaseHolder = (id: string) => `sandbox:${id}`;

/** Who holds the image lease of a start capture (start-captures.ts): its layers stay while it does. */
export const START_CAPTURE_LEASE_PREFIX = 'start-capture:';
export const startCaptureLease = (seedId: string) => `${START_CAPTURE_LEASE_PREFIX}${seedId}`;

export function stateOf(ctx: BackendContext, r: SandboxRecord): BackendState {
  return ctx.records.decodeState(r.id, r.backend);
}

/** As stateOf, or undefined while the record has none yet (a start in progress, or cut short by a crash). */
export function stateIfAny(ctx: BackendContext, r: SandboxRecord): BackendState | undefined {
  return Object.keys(r.backend).length === 0 ? undefined : stateOf(ctx, r);
}

/** Stores `state` as the record's backend state (the orchestrator persists the record afterwards). */
export function setState(ctx: BackendContext, r: SandboxRecord, state: BackendState): void {
  r.backend = ctx.records.encodeState(state);
}

/** The runtime's id of the sandbox's container: the sandbox id, or the id of the warm sandbox it was given. */
export function containerIdOf(ctx: BackendContext, record: SandboxRecord): string {
  return stateIfAny(ctx, record)?.containerId ?? record.id;
}

/**
 * The host directories and mount paths of the volumes the sandbox mounts (docs/volumes.md), asked for right
 * before the mount (on a shared volume directory, that writes this node's lease).
 */
export async function volumesOf(ctx: BackendContext, record: SandboxRecord): Promise<VolumeMountSpec[]> {
  const mounts = record.volumeMounts ?? [];
  const volumeDir = ctx.o.volumeDir;
  if (!mounts.length) return [];
  if (!volumeDir) throw new Error(`sandbox ${record.id} mounts volumes, and this backend has no volumes`);
  const out: VolumeMountSpec[] = [];
  for (const m of mounts) out.push({ source: await volumeDir(m.volumeId), destination: m.path });
  return out;
}

export function policyOf(r: SandboxRecord): EgressPolicy {
  return egressPolicyOf(r.network);
}

export function bindingOf(s: Pick<AssembledSandbox, 'slot' | 'instanceId'>): RuntimeBinding {
  return { slotIndex: s.slot.index, hostInteractionIp: s.slot.hostInteractionIp, instanceId: s.instanceId };
}

/** envd's `/init`: the sandbox's identity, env, user, workdir and token (every start and resume). */
export function initBody(
  ctx: BackendContext,
  record: SandboxRecord,
  extraEnv?: Record<string, string>,
): InitBody {
  const o = ctx.o;
  return {
    envVars: { ...record.envVars, ...extraEnv },
    accessToken: record.secure ? o.envdToken(record.id) : '',
    sandboxId: record.id,
    templateId: record.templateId,
    defaultUser: record.defaultUser,
    ...(record.defaultWorkdir ? { defaultWorkdir: record.defaultWorkdir } : {}),
    timestamp: new Date().toISOString(),
    initKey: o.envdInitKey(record.id),
    signatureMaxLifetimeSecs: o.signedUrlMaxLifetimeSecs,
    unexpiringSignaturesUntil: Math.floor(Date.parse(record.createdAt) / 1000) + o.signedUrlMaxLifetimeSecs,
  };
}
