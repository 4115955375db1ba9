// What the log and metrics routes read of the node's sandboxes (api/routes/logs.ts, api/routes/metrics.ts);
// SandboxObservability provides both.
import type { SandboxRecord } from '../orchestrator/types.js';
import type { SandboxLogLine } from './sandbox-log-store.js';
import type { SandboxMetricSample } from './sandbox-metrics.js';

export interface SandboxLogsView {
  /** The sandbox if the node knows it (running or paused). */
  find(sandboxId: string): SandboxRecord | undefined;
  /** Lifecycle lines of the sandbox, also of one killed within the retention (empty when none). */
  lifecycle(sandboxId: string): SandboxLogLine[];
  /** Whether lifecycle lines exist for it (a killed sandbox is still found while they do). */
  hasLifecycle(sandboxId: string): boolean;
  /** envd's log of a running sandbox (empty when it cannot be read). */
  envdLog(record: SandboxRecord): Promise<SandboxLogLine[]>;
}

export interface SandboxMetricsView {
  /** Samples of a sandbox in `[startMs, endMs]`; undefined when it has none. */
  samples(sandboxId: string, startMs?: number, endMs?: number): SandboxMetricSample[] | undefined;
  latest(sandboxId: string): SandboxMetricSample | undefined;
  /** Whether the node knows the sandbox (running or paused). */
  knows(sandboxId: string): boolean;
}
