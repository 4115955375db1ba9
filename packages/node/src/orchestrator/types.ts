// The orchestrator's view of a sandbox: lifecycle state, what the API shows, and what the runtime needs to find it.
import type { EgressPolicy, EgressProxyConfig, NetworkRules } from '../network/types.js';
import type { VolumeMountRecord } from '../volume/types.js';

export type SandboxState =
  'creating' | 'resuming' | 'running' | 'snapshotting' | 'forking' | 'pausing' | 'paused' | 'killing';

export const TRANSITIONAL_STATES: ReadonlySet<SandboxState> = new Set([
  'creating',
  'resuming',
  'snapshotting',
  'forking',
  'pausing',
  'killing',
]);

/** API `state`: snapshotting/forking report "paused", as the reference's API does. */
export function apiState(state: SandboxState): 'running' | 'paused' {
  return state === 'pausing' || state === 'paused' || state === 'snapshotting' || state === 'forking'
    ? 'paused'
    : 'running';
}

export type TimeoutAction = 'pause' | 'kill';

/**
 * Whether traffic may wake the paused sandbox: it enabled auto-resume and kept its memory. A filesystem-only
 * pause cold-boots on resume, so only an explicit connect or resume brings it back (E2B `SandboxPauseRequest`).
 */
export function autoResumable(r: Pick<SandboxRecord, 'autoResume' | 'paused'>): boolean {
  return r.autoResume && r.paused?.kind !== 'filesystem';
}

export interface SandboxNetworkSettings {
  allowPublicTraffic: boolean;
  allowOut: string[];
  denyOut: string[];
  /** true / false when the creator set it; null when not set. */
  allowInternetAccess: boolean | null;
  /** `network.rules` (header values are credentials: API answers mask them, docs/networking.md). */
  rules?: NetworkRules;
  /** The SOCKS5 upstream (its password too: the record is the node's, 0600; the API never shows it). */
  egressProxy?: EgressProxyConfig;
  /** Ingress (set at create): sandbox ports the proxy reaches over TLS, and the Host their services see. */
  httpsPorts?: number[];
  maskRequestHost?: string;
}

/** The egress policy `network` holds (what a start, resume, fork child or snapshot launch installs). */
export function egressPolicyOf(network: SandboxNetworkSettings): EgressPolicy {
  return {
    allowOut: network.allowOut,
    denyOut: network.denyOut,
    allowInternetAccess: network.allowInternetAccess,
    ...(network.rules ? { rules: network.rules } : {}),
    ...(network.egressProxy ? { egressProxy: network.egressProxy } : {}),
  };
}

export interface SandboxResourcesView {
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
}

/** Where a running sandbox lives on this node. Absent while paused (memory released) or before start. */
export interface RuntimeBinding {
  slotIndex: number;
  hostInteractionIp: string;
  /** Changes on every start/resume, so pooled proxy connections never outlive the instance they were made for. */
  instanceId: string;
}

/** How the sandbox was paused: with memory (a checkpoint of its processes) or filesystem only (processes restart on resume). */
export type PauseKind = 'memory' | 'filesystem';

export interface PausedState {
  kind: PauseKind;
  pausedAt: string;
  /** Directory of the pause artifacts (checkpoint images, disk). */
  artifactDir: string;
  /** Why a filesystem-only pause happened, when it did. */
  reason?: string;
  /** Bytes the artifacts take on disk (counted against `[orchestrator].paused_quota_mb`). */
  bytes?: number;
}

export interface SandboxRecord {
  id: string;
  templateId: string;
  alias?: string;
  state: SandboxState;
  /** Creation time; kept across pause/resume (API `startedAt`). */
  createdAt: string;
  /** Expiry (API `endAt`); null = never. */
  expiresAt: string | null;
  /** Last timeout duration in seconds (fork without a timeout re-applies it from now). */
  timeoutSecs: number;
  resources: SandboxResourcesView;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  secure: boolean;
  network: SandboxNetworkSettings;
  onTimeout: TimeoutAction;
  /** Whether a timeout pause keeps memory (false: filesystem only; E2B `autoPauseMemory`). */
  autoPauseMemory?: boolean;
  autoResume: boolean;
  envdVersion: string;
  /** Default user and workdir given to envd's /init. */
  defaultUser: string;
  defaultWorkdir?: string;
  runtime?: RuntimeBinding;
  paused?: PausedState;
  /** Opaque params for the custom extension (kept across pause/resume, recorded in snapshots; docs/hooks.md). */
  customExtensionParams?: Record<string, unknown>;
  /** The instance the custom extension was last told started and not yet told stopped. */
  extensionInstanceId?: string;
  /** Backend-private data needed to restart or resume the sandbox (image layers, tools version, ...). */
  backend: Record<string, unknown>;
  /** Persistent volumes it mounts (docs/volumes.md): mounted again on every resume, kept by forks and snapshots. */
  volumeMounts?: VolumeMountRecord[];
}
