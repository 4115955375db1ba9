// Per-sandbox metrics: `GET /sandboxes/{id}/metrics` and `GET /sandboxes/metrics?sandbox_ids=…` (docs/operations.md).
import type { FastifyInstance } from 'fastify';
import { isSandboxId, type SandboxMetric } from '@aenv/protocol';
import type { SandboxMetricSample } from '../../observability/sandbox-metrics.js';
import type { SandboxMetricsView } from '../../observability/views.js';
import { LogQueryError, parseQueryInt } from '../../observability/log-query.js';
import { ApiError } from '../errors.js';

export type MetricsRouteDeps = SandboxMetricsView;

/** Ids one batch request may name (E2B's dashboard asks for a page of sandboxes at a time). */
export const MAX_BATCH_IDS = 100;

const quoted = (s: string) => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s);

function queryInt(raw: unknown, name: string): number | undefined {
  try {
    return parseQueryInt(raw, name);
  } catch (e) {
    if (e instanceof LogQueryError) throw new ApiError(400, e.message);
    throw e;
  }
}

/** The E2B `SandboxMetric` shape; `timestamp` (deprecated) and `timestampUnix` name the same second. */
export function metricView(s: SandboxMetricSample): SandboxMetric {
  return {
    timestamp: new Date(s.timestampMs).toISOString(),
    timestampUnix: Math.floor(s.timestampMs / 1000),
    cpuCount: s.cpuCount,
    cpuUsedPct: s.cpuUsedPct,
    memUsed: s.memUsed,
    memCache: s.memCache,
    memTotal: s.memTotal,
    diskUsed: s.diskUsed,
    diskTotal: s.diskTotal,
  };
}

export function registerMetricsRoutes(app: FastifyInstance, deps: MetricsRouteDeps): void {
  app.get<{ Params: { id: string } }>('/sandboxes/:id/metrics', async (req) => {
    const id = req.params.id;
    if (!isSandboxId(id) || !deps.knows(id)) throw new ApiError(404, `sandbox ${quoted(id)} not found`);
    const q = req.query as Record<string, unknown>;
    // Unix seconds, both ends inclusive.
    const start = queryInt(q.start, 'start');
    const end = queryInt(q.end, 'end');
    if (start !== undefined && end !== undefined && start > end)
      throw new ApiError(400, `start (${start}) is after end (${end})`);
    const samples = deps.samples(
      id,
      start === undefined ? undefined : start * 1000,
      end === undefined ? undefined : end * 1000 + 999,
    );
    return (samples ?? []).map(metricView);
  });

  app.get('/sandboxes/metrics', async (req) => {
    const raw = (req.query as Record<string, unknown>).sandbox_ids;
    if (raw === undefined || raw === '') throw new ApiError(400, 'sandbox_ids is required');
    const ids = (Array.isArray(raw) ? raw : [raw])
      .flatMap((v) => String(v).split(','))
      .map((s) => s.trim())
      .filter(Boolean);
    if (ids.length > MAX_BATCH_IDS)
      throw new ApiError(400, `sandbox_ids names ${ids.length} sandboxes; at most ${MAX_BATCH_IDS}`);
    for (const id of ids) {
      if (!isSandboxId(id)) throw new ApiError(400, `invalid sandbox id ${quoted(id)} in sandbox_ids`);
    }
    const sandboxes: Record<string, ReturnType<typeof metricView>> = {};
    for (const id of new Set(ids)) {
      const last = deps.knows(id) ? deps.latest(id) : undefined;
      if (last) sandboxes[id] = metricView(last);
    }
    return { sandboxes };
  });
}
