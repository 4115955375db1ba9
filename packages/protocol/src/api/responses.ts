// Answer bodies of the control plane as the node sends them (the node's route views are typed with these, so
// a change to either side fails the type check). Field names follow E2B's OpenAPI types.
import type { ErrorBody } from './errors.js';

export type SandboxState = 'running' | 'paused';
export type TimeoutAction = 'pause' | 'kill';

/** `Sandbox`: the answer of create, connect and resume. */
export interface SandboxResponse {
  templateID: string;
  sandboxID: string;
  alias?: string;
  clientID: string;
  envdVersion: string;
  /** Only for secure sandboxes. */
  envdAccessToken?: string;
  /** null when the sandbox's ports are public. */
  trafficAccessToken: string | null;
  domain?: string;
}

/** `ListedSandbox`: an entry of `GET /sandboxes` and `GET /v2/sandboxes`. */
export interface ListedSandbox {
  templateID: string;
  alias?: string;
  sandboxID: string;
  clientID: string;
  startedAt: string;
  endAt: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  metadata?: Record<string, string>;
  state: SandboxState;
  envdVersion: string;
  /** `SandboxVolumeMount[]`: the volumes it mounts (docs/volumes.md); absent when none. */
  volumeMounts?: { name: string; path: string }[];
}

/** `SandboxDetail`: `GET /sandboxes/{id}`. */
export interface SandboxDetail extends ListedSandbox {
  envdAccessToken?: string;
  allowInternetAccess: boolean | null;
  domain?: string;
  network?: {
    allowPublicTraffic: boolean;
    allowOut?: string[];
    denyOut?: string[];
    /** `SandboxNetworkRuleInfo` lists by domain; aenv masks the header values. */
    rules?: Record<string, { transform?: { headers?: Record<string, string> } }[]>;
    /** `SandboxEgressProxyInfo`: never the password. */
    egressProxy?: { address: string; username?: string };
    httpsPorts?: number[];
    maskRequestHost?: string;
  };
  lifecycle: { autoResume: boolean; onTimeout: TimeoutAction };
  /** How a paused sandbox was paused (with or without its memory). */
  pauseKind?: string;
}

/** One entry of `POST /sandboxes/{id}/fork`: a child, or why it could not be made. */
export type ForkResult = { sandbox: SandboxResponse } | { error: ErrorBody };

/** `SnapshotInfo`. */
export interface SnapshotInfo {
  snapshotID: string;
  names: string[];
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  createdAt: string;
  updatedAt: string;
}

/** `SandboxMetric`; `timestamp` (deprecated) and `timestampUnix` name the same second. */
export interface SandboxMetric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memCache: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}

/** `GET /sandboxes/metrics?sandbox_ids=`: the latest sample of each sandbox that has one. */
export interface SandboxesWithMetrics {
  sandboxes: Record<string, SandboxMetric>;
}

export type SandboxLogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface SandboxLogEntry {
  timestamp: string;
  level: SandboxLogLevel;
  message: string;
  fields: Record<string, string>;
}

/** `GET /v2/sandboxes/{id}/logs`. */
export interface SandboxLogsV2 {
  logs: SandboxLogEntry[];
}

/** `GET /sandboxes/{id}/logs`. */
export interface SandboxLogsV1 {
  logs: { timestamp: string; line: string }[];
  logEntries: SandboxLogEntry[];
}

export type TemplateBuildStatus = 'waiting' | 'building' | 'ready' | 'error';

/** `Template`: an entry of `GET /templates` and `GET /v2/templates`. */
export interface TemplateResponse {
  templateID: string;
  buildID: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  public: boolean;
  names: string[];
  aliases: string[];
  createdAt: string;
  updatedAt: string;
  createdBy: null;
  lastSpawnedAt: null;
  spawnCount: number;
  buildCount: number;
  envdVersion: string;
  buildStatus: TemplateBuildStatus;
}

/** `TemplateBuild`: a build of `GET /templates/{id}`. */
export interface TemplateBuild {
  buildID: string;
  status: TemplateBuildStatus;
  createdAt: string;
  updatedAt: string;
  finishedAt?: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  envdVersion?: string;
}

/** `TemplateWithBuilds`: `GET /templates/{id}`. */
export interface TemplateWithBuilds {
  templateID: string;
  public: boolean;
  names: string[];
  aliases: string[];
  createdAt: string;
  updatedAt: string;
  lastSpawnedAt: null;
  spawnCount: number;
  builds: TemplateBuild[];
}

/** `TemplateRequestResponseV3`: `POST /v3/templates`. */
export interface TemplateBuildRequested {
  templateID: string;
  buildID: string;
  public: boolean;
  names: string[];
  tags: string[];
  aliases: string[];
}

export interface TemplateBuildLogEntry {
  timestamp: string;
  level: SandboxLogLevel;
  message: string;
  step?: string;
}

/** `TemplateBuildInfo`: `GET /templates/{id}/builds/{buildID}/status`. */
export interface TemplateBuildInfo {
  templateID: string;
  buildID: string;
  status: TemplateBuildStatus;
  logs: string[];
  logEntries: TemplateBuildLogEntry[];
  reason?: { message: string; step?: string };
}

/** An entry of `GET /templates/{id}/tags`. */
export interface TemplateTag {
  tag: string;
  buildID: string;
  createdAt: string;
}

/** `POST /templates/tags`. */
export interface AssignedTemplateTags {
  buildID: string;
  tags: string[];
}

/** `GET /templates/aliases/{alias}`. */
export interface TemplateAliasResponse {
  templateID: string;
  public: boolean;
}

/** `GET /templates/{id}/files/{hash}`: where to upload a COPY step's files, unless they are there. */
export interface TemplateFilesUpload {
  present: boolean;
  url?: string;
}

export interface DiskMetrics {
  mountPoint: string;
  device: string;
  filesystemType: string;
  usedBytes: number;
  totalBytes: number;
}

export interface NodeMetrics {
  allocatedCPU: number;
  cpuPercent: number;
  cpuCount: number;
  allocatedMemoryBytes: number;
  memoryUsedBytes: number;
  memoryTotalBytes: number;
  disks: DiskMetrics[];
  pausedAllocatedCPU: number;
  pausedAllocatedMemoryBytes: number;
}

/** `Node`: an entry of `GET /nodes`. */
export interface NodeResponse {
  version: string;
  commit: string;
  id: string;
  serviceInstanceID: string;
  clusterID: string;
  machineInfo: { cpuFamily: string; cpuModel: string; cpuModelName: string; cpuArchitecture: string };
  /** `draining` after `POST /nodes/{nodeID}/drain` (aenv's; docs/cluster.md#draining). */
  status: 'ready' | 'draining';
  sandboxCount: number;
  metrics: NodeMetrics;
  createSuccesses: number;
  createFails: number;
  sandboxStartingCount: number;
  sandboxPausedCount: number;
}

/** `NodeDetail`: `GET /nodes/{id}`. */
export type NodeDetail = Omit<NodeResponse, 'sandboxStartingCount'> & {
  cachedBuilds: string[];
  /** aenv's: the drain's progress while the node drains (docs/cluster.md#draining). */
  drain?: NodeDrainProgress;
};

/** The answer of `POST /nodes/{nodeID}/drain` and `drain` of `GET /nodes/{nodeID}` (aenv's). */
export interface NodeDrainProgress {
  node: string;
  startedAt: string;
  handedOver: number;
  failed: number;
  /** Paused and kept on the node: they mount volumes only it has (docs/cluster.md#draining). */
  kept: number;
  running: number;
  paused: number;
  done: boolean;
}

/** `Team`: an entry of `GET /teams`. */
export interface TeamResponse {
  teamID: string;
  name: string;
  apiKey: string;
  isDefault: boolean;
}
