// Templates and snapshots through the gateway (docs/cluster.md#templates-and-snapshots-in-a-cluster): which
// requests are about them, and the pure decisions — how node lists merge and page, which of several holders a
// call goes to. A template (or snapshot) lives on the node that built it unless the nodes share a repository;
// the gateway finds its holders by asking the nodes (template-locator.ts).
import { createHash } from 'node:crypto';
import { encodePageToken, isCanonicalUuid, timestampNs, type PageCursor } from '@aenv/protocol';
import { ListError, splitPageQuery } from './cluster-list.js';
import { jsonObjectOf } from './json-body.js';

export type TemplateOp =
  /** `GET /templates`: every node's list, merged. */
  | { kind: 'list' }
  /** `GET /v2/templates`, `GET /snapshots`: every node's list, merged, then paged as one node pages. */
  | { kind: 'page'; of: 'templates' | 'snapshots' }
  /** `POST /v3/templates`: to the node holding the name, else the name's node among the fit ones. */
  | { kind: 'build' }
  /** `GET /templates/aliases/{alias}`: the first node that has it. */
  | { kind: 'alias'; alias: string }
  /** `POST|DELETE /templates/tags`: to the node holding the template the body names. */
  | { kind: 'tags' }
  /** Every other call naming one template or snapshot (`/templates/{ref}…`, `/v2/templates/{ref}…`, `/snapshots/{ref}`). */
  | { kind: 'one'; ref: string }
  /** `PUT /templates/{id}/files/{hash}/upload?token=…`: the SDK's COPY upload (the node checks the link's token). */
  | { kind: 'upload'; ref: string };

const ONE_RE = /^\/(?:v2\/)?templates\/([^/]+)(?:\/.*)?$/;
const SNAPSHOT_RE = /^\/snapshots\/([^/]+)\/?$/;
const UPLOAD_RE = /^\/templates\/([^/]+)\/files\/[0-9a-f]{64}\/upload$/;

function decoded(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

/** The template request `method path` is, if any. `path` is the raw path (no query). */
export function templateRoute(method: string, path: string): TemplateOp | undefined {
  if (method === 'GET' && (path === '/templates' || path === '/templates/')) return { kind: 'list' };
  if (method === 'GET' && path === '/v2/templates') return { kind: 'page', of: 'templates' };
  if (method === 'GET' && path === '/snapshots') return { kind: 'page', of: 'snapshots' };
  if (method === 'POST' && path === '/v3/templates') return { kind: 'build' };
  if (path === '/templates/tags')
    return method === 'POST' || method === 'DELETE' ? { kind: 'tags' } : undefined;
  const alias = /^\/templates\/aliases\/([^/]+)$/.exec(path);
  if (alias) {
    const a = decoded(alias[1]!);
    return method === 'GET' && a !== undefined ? { kind: 'alias', alias: a } : undefined;
  }
  const upload = method === 'PUT' ? UPLOAD_RE.exec(path) : null;
  if (upload) {
    const ref = decoded(upload[1]!);
    return ref !== undefined && isCanonicalUuid(ref) ? { kind: 'upload', ref } : undefined;
  }
  const one = ONE_RE.exec(path) ?? (method === 'GET' ? SNAPSHOT_RE.exec(path) : null);
  if (one) {
    const ref = decoded(one[1]!);
    return ref !== undefined && ref !== '' ? { kind: 'one', ref } : undefined;
  }
  return undefined;
}

/** The name a node finds a template by: an id as is, else `ns/name:tag` → `name` (the node's candidate names). */
export function lookupName(ref: string): string {
  if (isCanonicalUuid(ref)) return ref;
  const slash = ref.lastIndexOf('/');
  const bare = slash >= 0 ? ref.slice(slash + 1) : ref;
  const colon = bare.indexOf(':');
  return colon >= 0 ? bare.slice(0, colon) : bare;
}

/** Whether `name` can name a template on a node (an id, or an alias of `[A-Za-z0-9_-]`); nothing else is asked about. */
export function isLookupName(name: string): boolean {
  return isCanonicalUuid(name) || /^[A-Za-z0-9_-]{1,255}$/.test(name);
}

/**
 * The order in which nodes take a name (rendezvous hashing): every gateway computes the same order from the same
 * node ids, so a template's build, its uploads and its status polls reach one node even when several hold its
 * record (a shared repository) and no gateway remembers where the build started.
 */
export function rendezvousOrder<T extends { nodeId: string }>(name: string, nodes: readonly T[]): T[] {
  const score = (id: string) => createHash('sha256').update(`${name}\0${id}`).digest('hex');
  return [...nodes]
    .map((n) => ({ n, s: score(n.nodeId) }))
    .sort((a, b) => (a.s < b.s ? 1 : a.s > b.s ? -1 : 0))
    .map((x) => x.n);
}

export interface ListedRecord {
  id: string;
  createdAt: string;
  updatedAt: string;
  item: Record<string, unknown>;
}

const ID_FIELD = { templates: 'templateID', snapshots: 'snapshotID' } as const;

/** A node's list answer, checked: an array of objects with a string id (`templateID` / `snapshotID`) and times. */
export function listedRecords(of: 'templates' | 'snapshots', doc: unknown): ListedRecord[] | undefined {
  if (!Array.isArray(doc)) return undefined;
  const out: ListedRecord[] = [];
  for (const v of doc) {
    if (v === null || typeof v !== 'object') return undefined;
    const item = v as Record<string, unknown>;
    const id = item[ID_FIELD[of]];
    const { createdAt, updatedAt } = item;
    if (typeof id !== 'string' || typeof createdAt !== 'string') return undefined;
    try {
      timestampNs(createdAt);
    } catch {
      return undefined;
    }
    out.push({ id, createdAt, updatedAt: typeof updatedAt === 'string' ? updatedAt : createdAt, item });
  }
  return out;
}

function newer(a: ListedRecord, b: ListedRecord): boolean {
  try {
    return timestampNs(a.updatedAt) > timestampNs(b.updatedAt);
  } catch {
    return false;
  }
}

/**
 * Every node's records as one list: one per id (the most recently updated: with a shared repository every node
 * lists the same record, and one that just finished a build is newer than a copy read before), newest first,
 * then id ascending (the nodes' page order).
 */
export function mergeRecords(lists: readonly ListedRecord[][]): ListedRecord[] {
  const byId = new Map<string, ListedRecord>();
  for (const l of lists)
    for (const r of l) {
      const have = byId.get(r.id);
      if (!have || newer(r, have)) byId.set(r.id, r);
    }
  return [...byId.values()].sort((a, b) => {
    const ta = timestampNs(a.createdAt);
    const tb = timestampNs(b.createdAt);
    if (ta !== tb) return ta > tb ? -1 : 1;
    return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  });
}

export interface RecordPageQuery {
  /** The query every node is sent (the client's, without `limit` and `nextToken`). */
  nodeQuery: string;
  limit: number | undefined;
  cursor: PageCursor | undefined;
}

/** `limit` (1..100) and `nextToken` as one node checks them; the rest of the query goes to every node. */
export function parseRecordPageQuery(search: string): RecordPageQuery {
  return splitPageQuery(search, (raw) => {
    const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isInteger(n) || n < 1 || n > 100)
      throw new ListError(400, `invalid limit "${raw}": must be an integer between 1 and 100`);
    return n;
  });
}

/** The page of merged records after the cursor; a token only when more follow (as one node pages). */
export function pageRecords(
  merged: readonly ListedRecord[],
  q: RecordPageQuery,
): { items: Record<string, unknown>[]; nextToken?: string } {
  const c = q.cursor;
  const rest = c
    ? merged.filter((r) => {
        const t = timestampNs(r.createdAt);
        return t !== c.timeNs ? t < c.timeNs : r.id > c.id;
      })
    : [...merged];
  if (q.limit === undefined || rest.length <= q.limit) return { items: rest.map((r) => r.item) };
  const page = rest.slice(0, q.limit);
  return { items: page.map((r) => r.item), nextToken: encodePageToken(page[page.length - 1]!) };
}

/**
 * Why an upload link's `token` (`<expiry unix seconds>.<hmac hex>`, docs/templates.md) cannot be one a node
 * issued, checked before any node is asked: a caller without the API key makes the gateway ask nothing unless
 * it holds a well-formed, unexpired link. The node checks the signature.
 */
export function uploadTokenProblem(search: string, nowMs: number): string | undefined {
  const token = new URLSearchParams(search).get('token') ?? '';
  const m = /^(\d{1,12})\.[0-9a-f]{64}$/.exec(token);
  if (!m) return 'invalid upload link';
  return Number(m[1]) * 1000 < nowMs ? 'the upload link has expired' : undefined;
}

/** The template a `POST|DELETE /templates/tags` body names (`target` "name:tag", or `name`), if readable. */
export function tagsBodyName(body: Buffer): string | undefined {
  const doc = jsonObjectOf(body);
  if (!doc) return undefined;
  const { target, name } = doc;
  const ref = typeof target === 'string' ? target : typeof name === 'string' ? name : undefined;
  return ref === undefined ? undefined : lookupName(ref);
}

/** The name a `POST /v3/templates` body builds (`name`, or the deprecated `alias`; `:tag` dropped). */
export function buildBodyName(body: Buffer): string | undefined {
  const doc = jsonObjectOf(body);
  if (!doc) return undefined;
  const { name, alias } = doc;
  const full = typeof name === 'string' ? name : typeof alias === 'string' ? alias : undefined;
  if (full === undefined) return undefined;
  const bare = full.trim();
  const colon = bare.indexOf(':');
  return colon >= 0 ? bare.slice(0, colon) : bare;
}

/** The template a create's body launches (`templateID`), as a lookup name; undefined when there is none. */
export function createBodyTemplate(body: Buffer): string | undefined {
  const ref = jsonObjectOf(body)?.templateID;
  return typeof ref === 'string' && ref !== '' ? lookupName(ref) : undefined;
}
