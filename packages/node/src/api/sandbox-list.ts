// `GET /v2/sandboxes` as a node answers it: the query's filters and page, and each record's list entry. Shared by
// the node's own list (routes/sandboxes.ts) and the list of sandboxes held by no node (routes/unheld-sandboxes.ts),
// so the gateway merges entries and pages made by the same rules.
import type { FastifyReply } from 'fastify';
import { NEXT_TOKEN_HEADER, type ListedSandbox, type PageOrder } from '@aenv/protocol';
import { apiState, type SandboxRecord } from '../orchestrator/types.js';
import { ApiError } from './errors.js';
import { matchesMetadata, parseMetadataFilter } from './metadata-filter.js';
import { decodeCursor, paginate, parseLimit } from './pagination.js';

export interface V2ListQuery {
  /** The one state asked for, or undefined for both. */
  only: 'running' | 'paused' | undefined;
  order: PageOrder;
  limit: number | undefined;
  nextToken: string | undefined;
  /** The filters of the query other than `state`. */
  matches(r: SandboxRecord): boolean;
}

/** Reads the query of `GET /v2/sandboxes`; a bad value is the client's 400. */
export function parseV2ListQuery(q: Record<string, unknown>): V2ListQuery {
  const filter = parseMetadataFilter(q.metadata);
  const states = (Array.isArray(q.state) ? q.state : q.state === undefined ? [] : [q.state])
    .flatMap((s) => String(s).split(','))
    .map((s) => s.trim())
    .filter(Boolean);
  for (const s of states) {
    if (s !== 'running' && s !== 'paused')
      throw new ApiError(400, `invalid state "${s}": must be running or paused`);
  }
  const distinct = [...new Set(states)] as ('running' | 'paused')[];
  const order = q.order === undefined || q.order === '' ? 'desc' : q.order;
  if (order !== 'asc' && order !== 'desc')
    throw new ApiError(400, `invalid order "${String(order)}": must be asc or desc`);
  let startedAfter: number | undefined;
  if (typeof q.startedAfter === 'string' && q.startedAfter) {
    startedAfter = Date.parse(q.startedAfter);
    if (Number.isNaN(startedAfter))
      throw new ApiError(400, `invalid startedAfter "${q.startedAfter}": must be an RFC3339 time`);
  }
  const template = typeof q.template === 'string' && q.template ? q.template : undefined;
  const nextToken = typeof q.nextToken === 'string' && q.nextToken ? q.nextToken : undefined;
  // Checked here, not only when a page is cut: a bad token is a 400 even where nothing is listed.
  if (nextToken) decodeCursor(nextToken);
  return {
    only: distinct.length === 1 ? distinct[0] : undefined,
    order,
    limit: parseLimit(q.limit),
    nextToken,
    matches: (r) =>
      matchesMetadata(r.metadata, filter) &&
      (!template || r.templateId === template || r.alias === template) &&
      (startedAfter === undefined || Date.parse(r.createdAt) >= startedAfter),
  };
}

/** The page of `records` the query asks for (its next-page token set on `reply`), as list entries. */
export function v2ListPage(
  records: readonly SandboxRecord[],
  query: V2ListQuery,
  reply: FastifyReply,
  entry: (r: SandboxRecord) => ListedSandbox,
): ListedSandbox[] {
  const { only } = query;
  const items = records
    .filter(query.matches)
    .filter((r) =>
      only === 'running' ? r.state === 'running' : only === 'paused' ? r.state === 'paused' : true,
    )
    .map((r) => ({ id: r.id, createdAt: r.createdAt, r }));
  const page = paginate(items, query.limit, query.nextToken, query.order);
  if (page.nextToken) void reply.header(NEXT_TOKEN_HEADER, page.nextToken);
  return page.items.map((i) => entry(i.r));
}

/** A record's entry in a list (`ListedSandbox`); `endAt` is `expiry(r)`. */
export function listedSandbox(r: SandboxRecord, expiry: string): ListedSandbox {
  return {
    templateID: r.templateId,
    ...(r.alias ? { alias: r.alias } : {}),
    sandboxID: r.id,
    clientID: '',
    startedAt: r.createdAt,
    endAt: expiry,
    cpuCount: r.resources.cpuCount,
    memoryMB: r.resources.memoryMB,
    diskSizeMB: r.resources.diskSizeMB,
    ...(Object.keys(r.metadata).length ? { metadata: r.metadata } : {}),
    state: apiState(r.state),
    envdVersion: r.envdVersion,
    ...(r.volumeMounts?.length
      ? { volumeMounts: r.volumeMounts.map((m) => ({ name: m.name, path: m.path })) }
      : {}),
  };
}
