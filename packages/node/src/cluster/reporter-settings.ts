import { ConfigError, type AenvConfig } from '@aenv/config';

export interface ReporterSettings {
  /** `[cluster].scheduler_endpoint`. */
  endpoint: string;
  intervalMs: number;
}

/**
 * `[observability.scheduler_report]` with its endpoint: undefined when reporting is off. Reporting on
 * without an endpoint is refused (the node would otherwise run believing it is in a cluster).
 */
export function reporterSettings(
  config: Pick<AenvConfig, 'cluster' | 'observability'>,
): ReporterSettings | undefined {
  const report = config.observability.scheduler_report;
  if (!report.enabled) return undefined;
  const endpoint = config.cluster.scheduler_endpoint;
  if (!endpoint) {
    throw new ConfigError([
      {
        key: 'cluster.scheduler_endpoint',
        hasValue: false,
        rule:
          'needed when observability.scheduler_report.enabled = true (AENV_OBSERVABILITY_SCHEDULER_REPORT_ENABLED): ' +
          'set the scheduler gRPC endpoint (AENV_OBSERVABILITY_SCHEDULER_ENDPOINT), or turn scheduler reporting off',
      },
    ]);
  }
  return { endpoint, intervalMs: report.interval_secs * 1000 };
}
