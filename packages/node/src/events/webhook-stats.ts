/** E2B's `WebhookDeliveryDurationStats`. */
export interface DurationStats {
  minimum: number;
  average: number;
  maximum: number;
}

/** E2B's `WebhookDeliveryStats`: totals of a range and hourly buckets (only the hours with attempts). */
export interface DeliveryStats {
  buckets: { timestamp: string; total: number; failed: number; durationMs: DurationStats }[];
  total: number;
  failed: number;
  durationMs: DurationStats;
}

const HOUR_MS = 3600_000;

function summarize(rows: readonly { status: string; durationMs: number }[]) {
  const durations = rows.map((r) => r.durationMs);
  return {
    total: rows.length,
    failed: rows.filter((r) => r.status !== 'success').length,
    durationMs: {
      minimum: durations.length ? Math.min(...durations) : 0,
      average: durations.length ? durations.reduce((a, b) => a + b, 0) / durations.length : 0,
      maximum: durations.length ? Math.max(...durations) : 0,
    },
  };
}

/** Stats of delivery attempts (oldest first): every attempt counts, a retried event once per attempt. */
export function webhookStats(
  rows: readonly { status: string; at: number; durationMs: number }[],
): DeliveryStats {
  const byHour = new Map<number, { status: string; durationMs: number }[]>();
  for (const r of rows) {
    const hour = Math.floor(r.at / HOUR_MS) * HOUR_MS;
    const list = byHour.get(hour) ?? [];
    list.push(r);
    byHour.set(hour, list);
  }
  return {
    buckets: [...byHour.entries()]
      .sort(([a], [b]) => a - b)
      .map(([hour, list]) => ({ timestamp: new Date(hour).toISOString(), ...summarize(list) })),
    ...summarize(rows),
  };
}
