import { describe, expect, it } from 'vitest';
import { ConfigError } from '@aenv/config';
import { reporterSettings } from './reporter-settings.js';

const cfg = (enabled: boolean, endpoint?: string) => ({
  cluster: { scheduler_endpoint: endpoint },
  observability: { scheduler_report: { enabled, interval_secs: 5 } },
});

describe('scheduler report settings', () => {
  it('is off unless enabled, whether or not an endpoint is set', () => {
    expect(reporterSettings(cfg(false) as never)).toBeUndefined();
    expect(reporterSettings(cfg(false, 'http://10.0.0.1:9090') as never)).toBeUndefined();
  });

  it('gives the endpoint and the interval in ms when enabled', () => {
    expect(reporterSettings(cfg(true, 'http://10.0.0.1:9090') as never)).toEqual({
      endpoint: 'http://10.0.0.1:9090',
      intervalMs: 5000,
    });
  });

  it('refuses reporting without an endpoint, naming both keys and their env vars', () => {
    let err: unknown;
    try {
      reporterSettings(cfg(true) as never);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const msg = (err as Error).message;
    expect(msg).toMatch(/^cluster\.scheduler_endpoint is not set: /);
    for (const k of [
      'observability.scheduler_report.enabled',
      'AENV_OBSERVABILITY_SCHEDULER_ENDPOINT',
      'AENV_OBSERVABILITY_SCHEDULER_REPORT_ENABLED',
    ])
      expect(msg).toContain(k);
  });
});
