// `GET /sandboxes` and `GET /v2/sandboxes` across the cluster (docs/cluster.md#the-cluster-list): every node is
// asked at once and all must answer; their items are merged, deduplicated, sorted and paged with the nodes' own
// token format. A v2 page is asked of each node as that node's own page after the same cursor (the merged page
// is within the union of those), so a walk does not make every node list everything once per page.
import {
  decodePageToken,
  encodePageToken,
  PageTokenError,
  timestampNs,
  type PageCursor,
  type PageOrder,
} from '@aenv/protocol';

export interface ListedSandbox {
  sandboxID: string;
  startedAt: string;
  [k: string]: unknown;
}

export class ListError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The largest `limit` a node takes (api/pagination.ts on the node, as the reference's). */
export const NODE_MAX_LIMIT = 100;

export interface ListQuery {
  /** The query sent to every node: the client's without `limit` and `nextToken`. */
  nodeQuery: string;
  /**
   * The query that asks a node for only its part of the page (`GET /v2/sandboxes`): `nodeQuery` plus the
   * client's `nextToken`, and its `limit` when a node takes it (1..100). The node sorts and cuts as the merge
   * does (in `order`), so it is `nodeQuery` when the client's `order` is not one a node takes (its 400 answers).
   */
  nodePageQuery: string;
  /** `desc` (newest first, the default) or `asc`, as one node orders its list. */
  order: PageOrder;
  /** undefined = all. 0 = an empty page (limit <= 0). */
  limit: number | undefined;
  cursor: PageCursor | undefined;
}

/**
 * Splits a list query into what every node is sent (the rest, without `limit` and `nextToken`), the limit read by
 * `readLimit` (given the raw value when there is one) and the page cursor; throws ListError(400) for a malformed
 * token.
 */
export function splitPageQuery<L>(
  search: string,
  readLimit: (raw: string) => L,
): { nodeQuery: string; limit: L | undefined; cursor: PageCursor | undefined } {
  const params = new URLSearchParams(search);
  const rawLimit = params.get('limit');
  const rawToken = params.get('nextToken');
  params.delete('limit');
  params.delete('nextToken');
  const limit = rawLimit !== null && rawLimit !== '' ? readLimit(rawLimit) : undefined;
  let cursor: PageCursor | undefined;
  if (rawToken !== null && rawToken !== '') {
    try {
      cursor = decodePageToken(rawToken);
    } catch (e) {
      if (e instanceof PageTokenError) throw new ListError(400, e.message);
      throw e;
    }
  }
  const q = params.toString();
  return { nodeQuery: q ? `?${q}` : '', limit, cursor };
}

/** Reads `limit` and `nextToken`; throws ListError(400) for a non-integer limit or a malformed token. */
export function parseListQuery(search: string): ListQuery {
  const q = splitPageQuery(search, (raw) => {
    if (!/^[+-]?\d{1,15}$/.test(raw)) throw new ListError(400, `invalid limit "${raw}": must be an integer`);
    return Math.max(0, Number(raw));
  });
  const params = new URLSearchParams(q.nodeQuery);
  const asked = params.get('order');
  const order: PageOrder = asked === 'asc' ? 'asc' : 'desc';
  if (asked !== null && asked !== '' && asked !== 'asc' && asked !== 'desc')
    return { ...q, order, nodePageQuery: q.nodeQuery };
  const token = new URLSearchParams(search).get('nextToken');
  if (q.limit !== undefined && q.limit >= 1 && q.limit <= NODE_MAX_LIMIT)
    params.set('limit', String(q.limit));
  if (q.cursor && token) params.set('nextToken', token);
  const page = params.toString();
  return { ...q, order, nodePageQuery: page ? `?${page}` : '' };
}

/** Validates one node's answer: a JSON array of objects with a string sandboxID and startedAt. */
export function nodeItems(node: string, body: unknown): ListedSandbox[] {
  if (!Array.isArray(body))
    throw new ListError(502, `cluster list unavailable: node ${node} answered no list`);
  return body.filter((x): x is ListedSandbox => {
    if (x === null || typeof x !== 'object') return false;
    const s = x as ListedSandbox;
    if (typeof s.sandboxID !== 'string' || typeof s.startedAt !== 'string') return false;
    try {
      timestampNs(s.startedAt);
      return true;
    } catch {
      return false;
    }
  });
}

export interface MergedPage {
  items: ListedSandbox[];
  nextToken?: string;
}

export function mergePages(perNode: ListedSandbox[][], q: ListQuery): MergedPage {
  const seen = new Set<string>();
  const all: { s: ListedSandbox; t: bigint }[] = [];
  for (const items of perNode)
    for (const s of items) {
      if (seen.has(s.sandboxID)) continue;
      seen.add(s.sandboxID);
      all.push({ s, t: timestampNs(s.startedAt) });
    }
  // As one node orders its list: by start time in `order`, then sandboxID ascending.
  const newer = q.order === 'desc' ? -1 : 1;
  all.sort((a, b) => (a.t !== b.t ? (a.t > b.t ? newer : -newer) : a.s.sandboxID < b.s.sandboxID ? -1 : 1));
  const c = q.cursor;
  const beyond = (t: bigint) => (q.order === 'desc' ? t < c!.timeNs : t > c!.timeNs);
  const rest = c ? all.filter((x) => beyond(x.t) || (x.t === c.timeNs && x.s.sandboxID > c.id)) : all;
  if (q.limit === undefined) return { items: rest.map((x) => x.s) };
  const page = rest.slice(0, q.limit);
  // As the reference: a full page always names the next one (which may be empty).
  if (q.limit === 0 || page.length < q.limit) return { items: page.map((x) => x.s) };
  const last = page[page.length - 1]!;
  return {
    items: page.map((x) => x.s),
    nextToken: encodePageToken({ id: last.s.sandboxID, createdAt: last.s.startedAt }, q.order),
  };
}
