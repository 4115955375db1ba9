// The events API across the cluster (docs/cluster.md#events-and-webhooks): webhook definitions live in the shared
// repository (any node serves their CRUD), but each node keeps its own events and its own delivery attempts, so
// the gateway merges those. A write is sent to one node, then every other node is asked to copy the definitions
// at once (a list call makes a node sync) instead of at its next timer.
import type { IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Node } from '@aenv/protocol';
import { forwardedHeaders } from '@aenv/proxy';
import { ListError } from './cluster-list.js';

export type EventsRoute =
  | { op: 'webhook-write' }
  | { op: 'deliveries'; webhookId: string }
  | { op: 'stats'; webhookId: string }
  | { op: 'sandbox-events' };

/** The events routes the gateway answers itself; the rest (webhook list/get) go to any node. */
export function eventsRoute(method: string, path: string): EventsRoute | undefined {
  if (method === 'POST' && path === '/events/webhooks') return { op: 'webhook-write' };
  const one = /^\/events\/webhooks\/([^/]+)$/.exec(path);
  if (one && (method === 'PATCH' || method === 'DELETE')) return { op: 'webhook-write' };
  const sub = /^\/events\/webhooks\/([^/]+)\/(deliveries|stats)$/.exec(path);
  if (sub && method === 'GET') return { op: sub[2] === 'stats' ? 'stats' : 'deliveries', webhookId: sub[1]! };
  if (method === 'GET' && /^\/events\/sandboxes(\/[^/]+)?$/.test(path)) return { op: 'sandbox-events' };
  return undefined;
}

export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface EventsContext {
  nodes(): Promise<Node[]>;
  /** The node a write goes to (Schedule's pick: a healthy one). */
  pick(): Promise<Node>;
  agent: Dispatcher;
  timeoutMs: number;
}

/** Through a gateway, `offset + limit` of an events list is bounded (each node is read from its start). */
export const MAX_MERGED_EVENTS = 10_000;
const NODE_PAGE = 100;

async function ask(
  ctx: EventsContext,
  n: Node,
  method: string,
  path: string,
  headers: Record<string, string | string[]>,
  body?: Buffer,
): Promise<Answer> {
  let a: Dispatcher.ResponseData;
  try {
    a = await ctx.agent.request({
      origin: new URL(n.endpoint).origin,
      path,
      method: method as Dispatcher.HttpMethod,
      headers,
      ...(body ? { body } : {}),
      headersTimeout: ctx.timeoutMs,
      bodyTimeout: ctx.timeoutMs,
    });
  } catch {
    throw new ListError(502, `events unavailable: node ${n.nodeId} unreachable`);
  }
  const text = await a.body.text().catch(() => {
    throw new ListError(502, `events unavailable: node ${n.nodeId} broke off`);
  });
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(a.headers)) if (typeof v === 'string') out[k] = v;
  return { status: a.statusCode, headers: out, body: text };
}

function messageOf(a: Answer): string {
  try {
    return (JSON.parse(a.body) as { message?: string }).message ?? a.body;
  } catch {
    return a.body;
  }
}

function parse<T>(n: Node, a: Answer): T {
  if (a.status >= 400 && a.status < 500) throw new ListError(a.status, messageOf(a));
  if (a.status !== 200) throw new ListError(502, `events unavailable: node ${n.nodeId} answered ${a.status}`);
  try {
    return JSON.parse(a.body) as T;
  } catch {
    throw new ListError(502, `events unavailable: node ${n.nodeId} answered no JSON`);
  }
}

function readHeaders(req: IncomingMessage): Record<string, string | string[]> {
  const h = forwardedHeaders(req);
  delete h['content-length'];
  delete h['content-type'];
  return h;
}

/** A webhook create/update/delete: to one node, then a sync on every other (best effort: they also copy every 2 s). */
export function webhookWrite(
  ctx: EventsContext,
  req: IncomingMessage,
  url: string,
  body: Buffer,
): Promise<Answer> {
  return writeThenSync(ctx, req, url, body, '/events/webhooks');
}

/**
 * A write of something the nodes keep in the shared repository (webhooks, secrets): to one node, then a read of
 * `syncPath` on every other, which copies the repository into that node (best effort: they also copy every 2 s).
 */
export async function writeThenSync(
  ctx: EventsContext,
  req: IncomingMessage,
  url: string,
  body: Buffer,
  syncPath: string,
): Promise<Answer> {
  const target = await ctx.pick();
  const a = await ask(ctx, target, req.method ?? 'POST', url, forwardedHeaders(req, body.length), body);
  if (a.status >= 200 && a.status < 300) {
    // The write is done: a failure here only leaves a node to its own timer.
    const others = (await ctx.nodes().catch(() => [])).filter((n) => n.nodeId !== target.nodeId);
    await Promise.all(
      others.map((n) => ask(ctx, n, 'GET', syncPath, readHeaders(req)).catch(() => undefined)),
    );
  }
  return a;
}

interface Group {
  eventId: string;
  attempts: { timestamp: string }[];
  [k: string]: unknown;
}

/** The gateway's deliveries cursor: how many groups of each node were served, base64url JSON. */
export function decodeDeliveriesCursor(raw: string | null): Record<string, number> {
  if (raw === null || raw === '') return {};
  const bad = new ListError(400, 'invalid cursor: pass the nextCursor of an earlier answer');
  if (raw.length > 8192 || !/^[A-Za-z0-9_-]+$/.test(raw)) throw bad;
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(raw, 'base64url').toString());
  } catch {
    throw bad;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw bad;
  const out: Record<string, number> = {};
  for (const [k, n] of Object.entries(v)) {
    if (k.length > 253 || !Number.isInteger(n) || (n as number) < 0 || (n as number) > 10_000_000) throw bad;
    out[k] = n as number;
  }
  return out;
}

function limitOf(raw: string | null, dflt: number): number {
  if (raw === null || raw === '') return dflt;
  const n = /^\d{1,4}$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= 1 && n <= 100))
    throw new ListError(400, `invalid limit "${raw.slice(0, 100)}": must be an integer between 1 and 100`);
  return n;
}

function single(params: URLSearchParams, key: string): string | null {
  if (params.getAll(key).length > 1) throw new ListError(400, `${key} may be given only once`);
  return params.get(key);
}

/** Every node's groups from its own offset, merged by first attempt; a node that never had the webhook adds none. */
export async function mergedDeliveries(
  ctx: EventsContext,
  req: IncomingMessage,
  path: string,
  search: string,
): Promise<unknown> {
  const params = new URLSearchParams(search);
  const limit = limitOf(single(params, 'limit'), 25);
  const offsets = decodeDeliveriesCursor(single(params, 'cursor'));
  const asc = params.get('orderAsc') === 'true';
  params.delete('limit');
  params.delete('cursor');
  const nodes = await ctx.nodes();
  const pages = await Promise.all(
    nodes.map(async (n) => {
      const q = new URLSearchParams(params);
      q.set('limit', String(limit));
      const offset = offsets[n.nodeId] ?? 0;
      if (offset) q.set('cursor', Buffer.from(String(offset)).toString('base64url'));
      const a = await ask(ctx, n, 'GET', `${path}?${q}`, readHeaders(req));
      if (a.status === 404) return { n, offset, missing: messageOf(a), groups: [] as Group[], more: false };
      const doc = parse<{ data?: Group[]; nextCursor?: string | null }>(n, a);
      if (!Array.isArray(doc.data))
        throw new ListError(502, `events unavailable: node ${n.nodeId} answered no deliveries`);
      return { n, offset, missing: undefined, groups: doc.data, more: Boolean(doc.nextCursor) };
    }),
  );
  if (pages.length && pages.every((p) => p.missing !== undefined))
    throw new ListError(404, pages[0]!.missing!);
  const key = (g: Group) => Date.parse(g.attempts[0]?.timestamp ?? '') || 0;
  const all = pages.flatMap((p) => p.groups.map((g) => ({ g, node: p.n.nodeId })));
  all.sort((a, b) => (asc ? key(a.g) - key(b.g) : key(b.g) - key(a.g)));
  const page = all.slice(0, limit);
  const next: Record<string, number> = { ...offsets };
  let more = all.length > limit;
  for (const p of pages) {
    const taken = page.filter((x) => x.node === p.n.nodeId).length;
    next[p.n.nodeId] = p.offset + taken;
    if (p.more) more = true;
  }
  return {
    data: page.map((x) => x.g),
    nextCursor: more ? Buffer.from(JSON.stringify(next)).toString('base64url') : null,
  };
}

interface Duration {
  minimum: number;
  average: number;
  maximum: number;
}
interface Totals {
  total: number;
  failed: number;
  durationMs: Duration;
}
interface Stats extends Totals {
  buckets: (Totals & { timestamp: string })[];
}

/** Totals added up; durations: the extremes, the average weighted by attempts. */
export function mergeTotals(list: readonly Totals[]): Totals {
  const seen = list.filter((t) => t.total > 0);
  const total = seen.reduce((s, t) => s + t.total, 0);
  return {
    total,
    failed: seen.reduce((s, t) => s + t.failed, 0),
    durationMs: {
      minimum: seen.length ? Math.min(...seen.map((t) => t.durationMs.minimum)) : 0,
      average: total ? seen.reduce((s, t) => s + t.durationMs.average * t.total, 0) / total : 0,
      maximum: seen.length ? Math.max(...seen.map((t) => t.durationMs.maximum)) : 0,
    },
  };
}

export function mergeStats(list: readonly Stats[]): Stats {
  const byHour = new Map<string, Totals[]>();
  for (const s of list)
    for (const b of s.buckets) byHour.set(b.timestamp, [...(byHour.get(b.timestamp) ?? []), b]);
  return {
    buckets: [...byHour.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([timestamp, t]) => ({ timestamp, ...mergeTotals(t) })),
    ...mergeTotals(list),
  };
}

export async function mergedStats(ctx: EventsContext, req: IncomingMessage, url: string): Promise<Stats> {
  const answers = await Promise.all(
    (await ctx.nodes()).map(async (n) => ({ n, a: await ask(ctx, n, 'GET', url, readHeaders(req)) })),
  );
  const found = answers.filter(({ a }) => a.status !== 404);
  if (!found.length)
    throw new ListError(404, answers.length ? messageOf(answers[0]!.a) : 'webhook not found');
  return mergeStats(found.map(({ n, a }) => parse<Stats>(n, a)));
}

interface Event {
  id: string;
  timestamp: string;
}

/**
 * `GET /events/sandboxes[/{id}]`: a sandbox that moved has events on several nodes, so every node is read from its
 * start (offset 0) up to `offset + limit` and the union is ordered by time, then paged.
 */
export async function mergedSandboxEvents(
  ctx: EventsContext,
  req: IncomingMessage,
  path: string,
  search: string,
): Promise<Event[]> {
  const params = new URLSearchParams(search);
  const intOf = (key: string, dflt: number, min: number, max: number) => {
    const raw = single(params, key);
    if (raw === null || raw === '') return dflt;
    const n = /^\d{1,9}$/.test(raw) ? Number(raw) : NaN;
    if (!(n >= min && n <= max))
      throw new ListError(
        400,
        `invalid ${key} "${raw.slice(0, 100)}": must be an integer between ${min} and ${max}`,
      );
    return n;
  };
  const offset = intOf('offset', 0, 0, 1_000_000);
  const limit = intOf('limit', 10, 1, 100);
  if (offset + limit > MAX_MERGED_EVENTS)
    throw new ListError(
      400,
      `invalid offset: through a gateway offset + limit must be at most ${MAX_MERGED_EVENTS}`,
    );
  const asc = single(params, 'orderAsc') === 'true';
  params.delete('offset');
  params.delete('limit');
  const want = offset + limit;
  const perNode = await Promise.all(
    (await ctx.nodes()).map(async (n) => {
      const out: Event[] = [];
      while (out.length < want) {
        const q = new URLSearchParams(params);
        q.set('offset', String(out.length));
        q.set('limit', String(Math.min(NODE_PAGE, want - out.length)));
        const page = parse<Event[]>(n, await ask(ctx, n, 'GET', `${path}?${q}`, readHeaders(req)));
        if (!Array.isArray(page))
          throw new ListError(502, `events unavailable: node ${n.nodeId} answered no list`);
        out.push(...page);
        if (page.length < Math.min(NODE_PAGE, want - (out.length - page.length))) break;
      }
      return out;
    }),
  );
  const seen = new Set<string>();
  const all = perNode.flat().filter((e) => !seen.has(e.id) && seen.add(e.id));
  const t = (e: Event) => Date.parse(e.timestamp) || 0;
  all.sort((a, b) => (asc ? t(a) - t(b) : t(b) - t(a)) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return all.slice(offset, offset + limit);
}
