// Sandbox logs: `GET /sandboxes/{id}/logs` (v1) and `GET /v2/sandboxes/{id}/logs` (docs/operations.md).
import type { FastifyInstance } from 'fastify';
import { isSandboxId } from '@aenv/protocol';
import type { SandboxLogLine } from '../../observability/sandbox-log-store.js';
import type { SandboxLogsView } from '../../observability/views.js';
import {
  LogQueryError,
  mergeLines,
  parseLogQueryV1,
  parseLogQueryV2,
  shapeV1,
  shapeV2,
} from '../../observability/log-query.js';
import { ApiError } from '../errors.js';

export type LogRouteDeps = SandboxLogsView;

export function registerLogRoutes(app: FastifyInstance, deps: LogRouteDeps): void {
  const linesOf = async (id: string): Promise<SandboxLogLine[]> => {
    const record = isSandboxId(id) ? deps.find(id) : undefined;
    if (!record && !(isSandboxId(id) && deps.hasLifecycle(id))) {
      throw new ApiError(
        404,
        `sandbox ${JSON.stringify(id.length > 80 ? `${id.slice(0, 80)}…` : id)} not found`,
      );
    }
    const envd = record?.state === 'running' && record.runtime ? await deps.envdLog(record) : [];
    return mergeLines(deps.lifecycle(id), envd);
  };
  const query = <T>(parse: () => T): T => {
    try {
      return parse();
    } catch (e) {
      if (e instanceof LogQueryError) throw new ApiError(400, e.message);
      throw e;
    }
  };

  app.get<{ Params: { id: string } }>('/sandboxes/:id/logs', async (req) => {
    const q = query(() => parseLogQueryV1(req.query as Record<string, unknown>));
    return shapeV1(await linesOf(req.params.id), q);
  });

  app.get<{ Params: { id: string } }>('/v2/sandboxes/:id/logs', async (req) => {
    const q = query(() => parseLogQueryV2(req.query as Record<string, unknown>));
    return shapeV2(await linesOf(req.params.id), q);
  });
}
