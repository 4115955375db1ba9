import type { AenvConfig } from '@aenv/config';
import { createSchedulerClient } from '@aenv/protocol';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { LifecycleEvent } from '../orchestrator/orchestrator.js';
import type { NodeIdentity } from '../identity/index.js';
import type { HostMetricsSampler } from '../observability/host-metrics.js';
import type { Orchestrator } from '../orchestrator/orchestrator.js';
import type { Logger } from '../util/log.js';
import { startHeartbeatReporter, type HeartbeatReporter } from './heartbeat-reporter.js';
import { reporterSettings } from './reporter-settings.js';
import { schedulerView, UNHELD_SWEEP_HEARTBEATS, UnheldRetention } from './unheld-retention.js';

/**
 * `[cluster]` and `[observability.scheduler_report]`: the heartbeat reporter to the scheduler, or none when
 * the node does not report. Started once the API listens (the scheduler may route to the node as soon as it
 * registers).
 */
export function startSchedulerReport(
  config: AenvConfig,
  deps: { identity: NodeIdentity; orchestrator: Orchestrator; host: HostMetricsSampler; logger: Logger },
): HeartbeatReporter | undefined {
  const report = reporterSettings(config);
  if (!report) {
    if (config.cluster.scheduler_endpoint) {
      deps.logger.warn(
        'cluster.scheduler_endpoint is set but observability.scheduler_report.enabled is false: this node does not report to the scheduler',
      );
    }
    return undefined;
  }
  const { orchestrator } = deps;
  const reporter = startHeartbeatReporter(report, {
    identity: deps.identity,
    counters: () => orchestrator.counters(),
    host: deps.host,
    sandboxes: () => orchestrator.all().map((r) => ({ id: r.id, resources: r.resources })),
    takingOver: () => orchestrator.takingOver(),
    resourcesOf: (id) => orchestrator.find(id)?.resources,
    logger: deps.logger.child({ component: 'scheduler-report' }),
  });
  deps.logger.info(
    { endpoint: report.endpoint, intervalSecs: report.intervalMs / 1000 },
    'reporting to the scheduler',
  );
  return reporter;
}

/**
 * The paused retention of sandboxes no node holds (docs/cluster.md#sandboxes-held-by-no-node), on a node of a
 * cluster (`[cluster].scheduler_endpoint`, which names who is up) that shares its paused sandboxes (`shares`).
 * Undefined otherwise: a single node holds all of its sandboxes itself.
 */
export function startUnheldRetention(
  config: Pick<AenvConfig, 'cluster' | 'orchestrator' | 'observability'>,
  deps: {
    shares: boolean;
    nodeId: string;
    repository: SnapshotRepository;
    onLifecycle: (e: LifecycleEvent) => void;
    logger: Logger;
  },
): UnheldRetention | undefined {
  const endpoint = config.cluster.scheduler_endpoint;
  if (!endpoint || !deps.shares) return undefined;
  const client = createSchedulerClient(endpoint);
  const retentionSecs = config.orchestrator.paused_retention_secs;
  const retention = new UnheldRetention({
    nodeId: deps.nodeId,
    repository: deps.repository,
    fallbackRetentionMs: retentionSecs * 1000,
    view: () => schedulerView(client),
    onKilled: (p) => {
      const base = { sandboxId: p.sandbox.id, level: 'info' as const, templateId: p.sandbox.templateId };
      const recorded = p.retentionSecs ?? retentionSecs;
      deps.onLifecycle({
        ...base,
        event: 'expired',
        message: `paused since ${p.sandbox.paused?.pausedAt ?? '?'} with no node holding it (node ${p.node} lost or drained), longer than its paused_retention_secs (${recorded} s); deleting it`,
      });
      deps.onLifecycle({
        ...base,
        event: 'killed',
        message: 'deleted after its paused retention',
        fields: { cause: 'retention' },
      });
    },
    logger: deps.logger.child({ component: 'unheld-retention' }),
    intervalMs: UNHELD_SWEEP_HEARTBEATS * config.observability.scheduler_report.interval_secs * 1000,
  });
  retention.start();
  return retention;
}
