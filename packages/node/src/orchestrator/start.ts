import type { AenvConfig } from '@aenv/config';
import type { HookClient } from '../extension/hook-client.js';
import { filesystemBytes } from '../util/disk-usage.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import type { SandboxBackend } from './backend.js';
import { Orchestrator, type OrchestratorOptions } from './orchestrator.js';
import type { SandboxStore } from './store.js';

export interface OrchestratorDeps {
  store: SandboxStore;
  backend: SandboxBackend;
  templates: OrchestratorOptions['templates'];
  newId: () => string;
  /** Where pause artifacts live: the paused quota's default is half its volume. */
  captureRoot: string;
  onInstanceStopped: (instanceId: string) => void;
  onLifecycle: NonNullable<OrchestratorOptions['onLifecycle']>;
  observe: NonNullable<OrchestratorOptions['observe']>;
  extension?: HookClient;
  logger: Logger;
}

/**
 * `[orchestrator]`: the sandbox state machine, with its records reconciled against the backend. Closing it
 * pauses every running sandbox (graceful shutdown); eviction starts with `orchestrator.startEviction()`.
 */
export async function startOrchestrator(
  config: AenvConfig['orchestrator'],
  deps: OrchestratorDeps,
): Promise<Subsystem & { orchestrator: Orchestrator }> {
  const orchestrator = new Orchestrator({
    store: deps.store,
    backend: deps.backend,
    templates: deps.templates,
    newId: deps.newId,
    defaultTimeoutSecs: config.default_sandbox_timeout_secs,
    autoEvictIntervalMs: config.auto_evict_interval_ms,
    autoResumeMinTimeoutSecs: config.auto_resume_min_sandbox_timeout_secs,
    transitionWaitMs: config.max_transition_wait_secs * 1000,
    pausedQuotaBytes: await pausedQuotaBytes(config.paused_quota_mb, deps.captureRoot),
    pausedRetentionMs: config.paused_retention_secs * 1000,
    logger: deps.logger.child({ component: 'orchestrator' }),
    onInstanceStopped: deps.onInstanceStopped,
    onLifecycle: deps.onLifecycle,
    ...(deps.extension ? { extension: deps.extension } : {}),
    observe: deps.observe,
  });
  await orchestrator.init();
  return { orchestrator, close: () => orchestrator.shutdown() };
}

/** `[orchestrator].paused_quota_mb`, 0 = half the size of the volume the pause artifacts live on. */
async function pausedQuotaBytes(mb: number, captureRoot: string): Promise<number> {
  if (mb > 0) return mb * 1024 ** 2;
  return Math.floor((await filesystemBytes(captureRoot)) / 2);
}
