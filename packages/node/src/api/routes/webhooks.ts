// Webhooks: `/events/webhooks` CRUD, delivery history and stats (E2B's webhooks API, docs/events.md#webhooks).
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { ApiError } from '../errors.js';
import { parseRequiredBody } from '../parse-body.js';
import { SANDBOX_EVENT_TYPES, type SandboxEventType } from '../../events/sandbox-events.js';
import { refusedUrl, type TargetPolicy } from '../../events/webhook-target.js';
import type { WebhookDefinitions } from '../../events/webhook-definitions.js';
import type { DeliveryAttempt, DeliveryFilter, Webhook, WebhookStore } from '../../events/webhook-store.js';
import { webhookStats } from '../../events/webhook-stats.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const MAX_NAME_LENGTH = 256;
export const MAX_SECRET_LENGTH = 1024;

const name = z.string().max(MAX_NAME_LENGTH, `must be at most ${MAX_NAME_LENGTH} characters`);
const url = z.string().min(1, 'must not be empty');
const events = z
  .array(z.enum(SANDBOX_EVENT_TYPES, { error: `must be one of ${SANDBOX_EVENT_TYPES.join(', ')}` }))
  .min(1, 'must name at least one event type')
  .max(SANDBOX_EVENT_TYPES.length, `must have at most ${SANDBOX_EVENT_TYPES.length} entries`)
  .refine((a) => new Set(a).size === a.length, 'must not repeat a type');
const secret = z
  .string()
  .min(1, 'must not be empty')
  .max(MAX_SECRET_LENGTH, `must be at most ${MAX_SECRET_LENGTH} characters`);

const CreateBody = z.strictObject({
  name: name.optional(),
  url,
  events,
  enabled: z.boolean().optional(),
  signatureSecret: secret,
});
const PatchBody = z.strictObject({
  name: name.optional(),
  url: url.optional(),
  events: events.optional(),
  enabled: z.boolean().optional(),
  signatureSecret: secret.optional(),
});

export interface WebhookRouteDeps {
  /** Delivery history (this node's attempts). */
  store: WebhookStore;
  /** The definitions (node-local or the cluster's). */
  definitions: WebhookDefinitions;
  policy: TargetPolicy;
  maxWebhooks: number;
  teamId: string;
}

/** E2B's `WebhookDetail`: everything but the secret. */
function detail(w: Webhook, teamId: string) {
  return {
    id: w.id,
    teamId,
    name: w.name,
    createdAt: w.createdAt,
    url: w.url,
    enabled: w.enabled,
    events: w.events,
  };
}

function checkUrl(raw: string | undefined, policy: TargetPolicy): void {
  if (raw === undefined) return;
  const why = refusedUrl(raw, policy);
  if (why) throw new ApiError(400, `invalid webhook: url: ${why}`);
}

function single(q: Record<string, unknown>, key: string): string | undefined {
  const v = q[key];
  if (Array.isArray(v)) throw new ApiError(400, `${key} may be given only once`);
  return v === undefined || v === '' ? undefined : String(v);
}

function many(q: Record<string, unknown>, key: string, allowed: readonly string[]): string[] {
  const v = q[key];
  const list = v === undefined ? [] : Array.isArray(v) ? v : [v];
  if (list.length > allowed.length) throw new ApiError(400, `too many ${key}`);
  for (const x of list)
    if (typeof x !== 'string' || !allowed.includes(x))
      throw new ApiError(
        400,
        `invalid ${key} "${String(x).slice(0, 100)}": must be one of ${allowed.join(', ')}`,
      );
  return list as string[];
}

function time(q: Record<string, unknown>, key: string): number | undefined {
  const v = single(q, key);
  if (v === undefined) return undefined;
  const ms = /^\d{4}-\d\d-\d\dT/.test(v) ? Date.parse(v) : NaN;
  if (Number.isNaN(ms))
    throw new ApiError(400, `invalid ${key} "${v.slice(0, 100)}": must be an RFC 3339 time`);
  return ms;
}

function bool(q: Record<string, unknown>, key: string): boolean {
  const v = single(q, key);
  if (v === undefined) return false;
  if (v !== 'true' && v !== 'false')
    throw new ApiError(400, `invalid ${key} "${v.slice(0, 100)}": must be true or false`);
  return v === 'true';
}

function limitOf(q: Record<string, unknown>): number {
  const v = single(q, 'limit');
  if (v === undefined) return 25;
  const n = /^\d{1,4}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= 100))
    throw new ApiError(400, `invalid limit "${v.slice(0, 100)}": must be an integer between 1 and 100`);
  return n;
}

/** The cursor is opaque to clients: the offset of the next group, base64url. */
function offsetOf(q: Record<string, unknown>): number {
  const v = single(q, 'cursor');
  if (v === undefined) return 0;
  const decoded = /^[A-Za-z0-9_-]{1,16}$/.test(v) ? Buffer.from(v, 'base64url').toString() : '';
  if (!/^\d{1,7}$/.test(decoded))
    throw new ApiError(400, 'invalid cursor: pass the nextCursor of an earlier answer');
  return Number(decoded);
}

export function registerWebhookRoutes(app: FastifyInstance, d: WebhookRouteDeps): void {
  const find = async (id: string): Promise<Webhook> => {
    const w = UUID.test(id) ? await d.definitions.get(id) : undefined;
    if (!w) throw new ApiError(404, `webhook ${id.slice(0, 100)} not found`);
    return w;
  };

  app.post('/events/webhooks', async (req, reply) => {
    const b = parseRequiredBody(CreateBody, req.body, 'webhook');
    checkUrl(b.url, d.policy);
    const w = await d.definitions.create(
      {
        name: b.name ?? '',
        url: b.url,
        events: b.events as SandboxEventType[],
        enabled: b.enabled ?? true,
        secret: b.signatureSecret,
      },
      d.maxWebhooks,
    );
    if (!w)
      throw new ApiError(
        400,
        `invalid webhook: there are ${d.maxWebhooks} webhooks already ([events.webhooks].max_webhooks); delete one first`,
      );
    return reply.code(201).send(detail(w, d.teamId));
  });

  app.get('/events/webhooks', async () => (await d.definitions.list()).map((w) => detail(w, d.teamId)));

  app.get<{ Params: { id: string } }>('/events/webhooks/:id', async (req) =>
    detail(await find(req.params.id), d.teamId),
  );

  app.patch<{ Params: { id: string } }>('/events/webhooks/:id', async (req) => {
    await find(req.params.id);
    const b = parseRequiredBody(PatchBody, req.body, 'webhook');
    checkUrl(b.url, d.policy);
    const w = await d.definitions.update(req.params.id, {
      ...(b.name !== undefined ? { name: b.name } : {}),
      ...(b.url !== undefined ? { url: b.url } : {}),
      ...(b.events !== undefined ? { events: b.events as SandboxEventType[] } : {}),
      ...(b.enabled !== undefined ? { enabled: b.enabled } : {}),
      ...(b.signatureSecret !== undefined ? { secret: b.signatureSecret } : {}),
    });
    if (!w) throw new ApiError(404, `webhook ${req.params.id} not found`);
    return detail(w, d.teamId);
  });

  app.delete<{ Params: { id: string } }>('/events/webhooks/:id', async (req, reply) => {
    if (!UUID.test(req.params.id) || !(await d.definitions.delete(req.params.id)))
      throw new ApiError(404, `webhook ${req.params.id.slice(0, 100)} not found`);
    return reply.code(200).send();
  });

  app.get<{ Params: { id: string } }>('/events/webhooks/:id/deliveries', async (req) => {
    const w = await find(req.params.id);
    const q = req.query as Record<string, unknown>;
    const filter: DeliveryFilter = {
      statuses: many(q, 'deliveryStatus', ['success', 'failed']) as ('success' | 'failed')[],
      eventTypes: many(q, 'eventType', SANDBOX_EVENT_TYPES),
      startMs: time(q, 'start'),
      endMs: time(q, 'end'),
    };
    const limit = limitOf(q);
    const offset = offsetOf(q);
    const groups = d.store.deliveryGroups(w.id, filter, {
      offset,
      limit: limit + 1,
      orderAsc: bool(q, 'orderAsc'),
    });
    const page = groups.slice(0, limit);
    return {
      data: page.map((g) => ({
        eventId: g.eventId,
        eventType: g.attempts[0]!.eventType,
        sandboxId: g.attempts[0]!.sandboxId,
        attempts: g.attempts.map((a: DeliveryAttempt) => ({ ...a, teamId: d.teamId })),
      })),
      nextCursor: groups.length > limit ? Buffer.from(String(offset + limit)).toString('base64url') : null,
    };
  });

  app.get<{ Params: { id: string } }>('/events/webhooks/:id/stats', async (req) => {
    const w = await find(req.params.id);
    const q = req.query as Record<string, unknown>;
    const endMs = time(q, 'end') ?? Date.now();
    const startMs = time(q, 'start') ?? endMs - 24 * 3600_000;
    if (startMs >= endMs) throw new ApiError(400, 'invalid start: must be before end');
    return webhookStats(d.store.attemptFigures(w.id, { statuses: [], eventTypes: [], startMs, endMs }));
  });
}
