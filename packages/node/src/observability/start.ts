import type { AenvConfig } from '@aenv/config';
import type { Registry } from 'prom-client';
import type { SandboxRecord } from '../orchestrator/types.js';
import type { Runtime } from '../runtime/index.js';
import type { SandboxTokenIssuer } from '../secrets/index.js';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import { SandboxObservability } from './sandbox-observability.js';

/**
 * `[observability.sandbox_*]`: per-sandbox metrics and logs. Built before the orchestrator (it records the
 * lifecycle events of its start) and sampling once `observability.start(orchestrator)` ran.
 */
export function startSandboxObservability(
  config: Pick<AenvConfig, 'observability' | 'tools'>,
  deps: {
    db: StateDb;
    runtime: Runtime;
    backend: { containerIdOf(record: SandboxRecord): string };
    tokens: SandboxTokenIssuer;
    registry: Registry;
    logger: Logger;
  },
): Subsystem & { observability: SandboxObservability } {
  const o = config.observability;
  const observability = new SandboxObservability({
    db: deps.db,
    cgroupParent: deps.runtime.cgroupParent,
    sandboxesDir: deps.runtime.sandboxesDir,
    containerIdOf: (r) => deps.backend.containerIdOf(r),
    envdPort: config.tools.control_plane_port,
    envdToken: (id) => deps.tokens.envd(id),
    intervalMs: o.sandbox_metrics.interval_secs * 1000,
    maxSamples: o.sandbox_metrics.max_samples,
    logRetentionMs: o.sandbox_logs.retention_hours * 3600_000,
    registry: deps.registry,
    logger: deps.logger.child({ component: 'sandbox-observability' }),
  });
  return { observability, close: () => observability.stop() };
}
