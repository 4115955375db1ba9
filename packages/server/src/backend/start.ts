import type { AenvConfig } from '@aenv/config';
import { join } from 'node:path';
import type { ImageService } from '../image/index.js';
import type { NetworkManager } from '../network/index.js';
import type { Runtime, ToolsMount } from '../runtime/index.js';
import type { SandboxTokenIssuer } from '../secrets/index.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import { ContainerBackend } from './container-backend.js';

export type BackendSection = Pick<
  AenvConfig,
  'snapshot' | 'pool' | 'deps_path' | 'orchestrator' | 'tools' | 'envd' | 'sandbox_proxy'
>;

export interface BackendDeps {
  runtime: Runtime;
  network: NetworkManager;
  images: ImageService;
  repository: SnapshotRepository;
  tools: ToolsMount;
  tokens: SandboxTokenIssuer;
  envdVersion: string;
  logger: Logger;
}

/** The sandbox backend over the runtime, the network slots, the image cache and the repository. */
export function startBackend(
  config: BackendSection,
  deps: BackendDeps,
): Subsystem & { backend: ContainerBackend } {
  const { runtime, tokens } = deps;
  const backend = new ContainerBackend({
    runtime: runtime.driver,
    network: deps.network,
    images: deps.images,
    repository: deps.repository,
    sharePaused: config.snapshot.repository_backend === 'oss',
    warmSandboxes: config.pool.warm_sandboxes,
    tools: deps.tools,
    toolsRoot: join(config.deps_path, 'tools'),
    residentPauseGraceMs: config.orchestrator.resident_pause_grace_secs * 1000,
    runtimeVersions: { envd: deps.envdVersion, ...runtime.versions },
    envdPort: config.tools.control_plane_port,
    envdPollMs: config.envd.poll_ms,
    envdInitTimeoutMs: config.envd.init_timeout_secs * 1000,
    pidsLimit: runtime.pidsPerSandbox,
    envdToken: (id) => tokens.envd(id),
    envdInitKey: (id) => tokens.envdInit(id),
    signedUrlMaxLifetimeSecs: config.sandbox_proxy.signed_url_max_lifetime_secs,
    idRanges: runtime.idRanges,
    logger: deps.logger.child({ component: 'backend' }),
  });
  return { backend, close: () => backend.close() };
}
