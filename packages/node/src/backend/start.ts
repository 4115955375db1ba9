import type { AenvConfig } from '@aenv/config';
import { join } from 'node:path';
import type { Registry } from 'prom-client';
import type { ImageService } from '../image/index.js';
import type { NetworkManager } from '../network/index.js';
import type { Runtime, ToolsMount } from '../runtime/index.js';
import type { SandboxTokenIssuer } from '../secrets/index.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import { ContainerBackend } from './container-backend.js';
import type { NodeVolumes } from './volume-affinity.js';

export type BackendSection = Pick<
  AenvConfig,
  | 'snapshot'
  | 'pool'
  | 'deps_path'
  | 'orchestrator'
  | 'limits'
  | 'tools'
  | 'envd'
  | 'sandbox_proxy'
  | 'cluster'
  | 'home_path'
>;

export interface BackendDeps {
  runtime: Runtime;
  network: NetworkManager;
  images: ImageService;
  repository: SnapshotRepository;
  tools: ToolsMount;
  tokens: SandboxTokenIssuer;
  envdVersion: string;
  /** `[node_identity].node_id`: whom the claims of shared sandboxes name (docs/cluster.md). */
  nodeName: string;
  /** The host directory of a persistent volume (docs/volumes.md). */
  volumeDir: (volumeId: string) => Promise<string>;
  /** This node's volume catalog and whether every node shares it (a sandbox mounting node-affine ones stays). */
  volumes: NodeVolumes;
  /** Where the warm pool's metrics are registered. */
  registry?: Registry;
  logger: Logger;
}

/**
 * Whether paused sandboxes are copied to the repository for other nodes (docs/cluster.md#sandboxes-that-move):
 * always with oss; with posix_fs when the node is part of a cluster, whose repository directory must be shared.
 */
export function sharesPausedSandboxes(config: Pick<AenvConfig, 'snapshot' | 'cluster'>): boolean {
  return (
    config.snapshot.repository_backend === 'oss' ||
    (config.snapshot.repository_backend === 'posix_fs' && Boolean(config.cluster.scheduler_endpoint))
  );
}

/** The sandbox backend over the runtime, the network slots, the image cache and the repository. */
export function startBackend(
  config: BackendSection,
  deps: BackendDeps,
): Subsystem & { backend: ContainerBackend } {
  const { runtime, tokens } = deps;
  const backend = new ContainerBackend({
    runtime: runtime.driver,
    // A volume not in this node's catalog (a sandbox paused on another node) is a clear 404, not a failed mount.
    volumeDir: deps.volumeDir,
    volumes: deps.volumes,
    network: deps.network,
    images: deps.images,
    repository: deps.repository,
    sharePaused: sharesPausedSandboxes(config),
    nodeId: deps.nodeName,
    pausedRetentionSecs: config.orchestrator.paused_retention_secs,
    warmPool: {
      low: config.pool.warm_sandboxes,
      high: config.pool.high_watermark,
      quietMs: config.pool.sandbox_idle_secs * 1000,
      fillConcurrency: config.pool.sandbox_fill_concurrency,
      minAvailableMemoryRatio: config.pool.sandbox_min_available_memory_ratio,
      registry: deps.registry,
    },
    startCaptures: config.pool.start_captures,
    tools: deps.tools,
    toolsRoot: join(config.deps_path, 'tools'),
    residentPauseGraceMs: config.orchestrator.resident_pause_grace_secs * 1000,
    runtimeVersions: { envd: deps.envdVersion, ...runtime.versions },
    envdPort: config.tools.control_plane_port,
    envdPollMs: config.envd.poll_ms,
    envdInitTimeoutMs: config.envd.init_timeout_secs * 1000,
    pidsLimit: runtime.pidsPerSandbox,
    maxConcurrentRestores: config.limits.max_concurrent_restores,
    envdToken: (id) => tokens.envd(id),
    envdInitKey: (id) => tokens.envdInit(id),
    signedUrlMaxLifetimeSecs: config.sandbox_proxy.signed_url_max_lifetime_secs,
    idRanges: runtime.idRanges,
    templateBuilds: {
      workDir: join(config.home_path, 'template-work'),
      diskCaptureVersions: { envd: deps.envdVersion, tools: deps.tools.version },
    },
    logger: deps.logger.child({ component: 'backend' }),
  });
  return { backend, close: () => backend.close() };
}
