// Lifecycle events: `GET /events/sandboxes` and `GET /events/sandboxes/{id}` (E2B's lifecycle events API,
// docs/events.md).
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors.js';
import {
  SANDBOX_EVENT_TYPES,
  type EventQuery,
  type SandboxEventStore,
  type SandboxEventType,
} from '../../events/sandbox-events.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const KNOWN = new Set<string>(SANDBOX_EVENT_TYPES);

function intParam(raw: unknown, name: string, dflt: number, min: number, max: number): number {
  if (raw === undefined || raw === '') return dflt;
  const n = typeof raw === 'string' && /^\d{1,9}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new ApiError(400, `invalid ${name} "${String(raw)}": must be an integer between ${min} and ${max}`);
  }
  return n;
}

/** The query of an events request (E2B: offset ≥ 0, limit 1..100 default 10, orderAsc, repeated types). */
export function parseEventQuery(q: Record<string, unknown>): Omit<EventQuery, 'sandboxId'> {
  const single = (name: string) => {
    const v = q[name];
    if (Array.isArray(v)) throw new ApiError(400, `${name} may be given only once`);
    return v;
  };
  const order = single('orderAsc');
  if (order !== undefined && order !== 'true' && order !== 'false') {
    throw new ApiError(400, `invalid orderAsc "${String(order)}": must be true or false`);
  }
  const rawTypes = q.types === undefined ? [] : Array.isArray(q.types) ? q.types : [q.types];
  if (rawTypes.length > SANDBOX_EVENT_TYPES.length) throw new ApiError(400, 'too many types');
  const types = rawTypes.map((t) => {
    if (typeof t !== 'string' || !KNOWN.has(t)) {
      throw new ApiError(
        400,
        `invalid types "${String(t).slice(0, 100)}": must be one of ${SANDBOX_EVENT_TYPES.join(', ')}`,
      );
    }
    return t as SandboxEventType;
  });
  return {
    offset: intParam(single('offset'), 'offset', 0, 0, 1_000_000),
    limit: intParam(single('limit'), 'limit', 10, 1, 100),
    orderAsc: order === 'true',
    types,
  };
}

export function registerEventRoutes(app: FastifyInstance, events: SandboxEventStore): void {
  app.get('/events/sandboxes', async (req) =>
    events.list(parseEventQuery(req.query as Record<string, unknown>)),
  );

  // Events outlive their sandbox (within the retention), so an unknown id is an empty list, not a 404.
  app.get<{ Params: { id: string } }>('/events/sandboxes/:id', async (req) => {
    if (!UUID.test(req.params.id)) throw new ApiError(404, `sandbox ${req.params.id} not found`);
    return events.list({
      ...parseEventQuery(req.query as Record<string, unknown>),
      sandboxId: req.params.id,
    });
  });
}
