import type { AenvConfig } from '@aenv/config';
import type { NodeIdentity } from '../identity/index.js';
import type { HostMetricsSampler } from '../observability/host-metrics.js';
import type { Orchestrator } from '../orchestrator/orchestrator.js';
import type { Logger } from '../util/log.js';
import { startHeartbeatReporter, type HeartbeatReporter } from './heartbeat-reporter.js';
import { reporterSettings } from './reporter-settings.js';

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
