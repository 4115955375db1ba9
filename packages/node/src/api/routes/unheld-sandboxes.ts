import type { FastifyInstance } from 'fastify';
import type { SandboxRecord } from '../../orchestrator/types.js';
import { ApiError } from '../errors.js';
import { listedSandbox, parseV2ListQuery, v2ListPage } from '../sandbox-list.js';

/** Most node ids one request may name (a cluster of more nodes is not served). */
export const MAX_LISTED_NODES = 4096;
/** The scheduler's bound on an id (docs/cluster.md#rpcs). */
export const MAX_NODE_ID_BYTES = 512;
const BODY_LIMIT_BYTES = 3 * 1024 * 1024;

export interface UnheldRouteDeps {
  /**
   * The paused sandboxes no node holds, given the nodes that list their own (backend/unheld-pauses.ts); absent
   * when this node has no shared repository (then there are none it could know of).
   */
  unheld?: (listed: ReadonlySet<string>) => Promise<SandboxRecord[]>;
  /** A record's `endAt`, as the node's own list shows it. */
  expiry: (r: SandboxRecord) => string;
}

/** `{"listedNodes": [...]}`: every other field, a non-string, an empty or over-long id is the caller's 400. */
function listedNodes(body: unknown): Set<string> {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new ApiError(400, 'the body must be a JSON object {"listedNodes": [<node id>, ...]}');
  const { listedNodes: ids, ...rest } = body as { listedNodes?: unknown };
  const unknown = Object.keys(rest)[0];
  if (unknown !== undefined) throw new ApiError(400, `unknown field "${unknown.slice(0, 64)}" in the body`);
  if (!Array.isArray(ids)) throw new ApiError(400, 'listedNodes must be an array of node ids');
  if (ids.length > MAX_LISTED_NODES)
    throw new ApiError(400, `listedNodes names ${ids.length} nodes; at most ${MAX_LISTED_NODES} are taken`);
  for (const id of ids) {
    if (typeof id !== 'string' || id.trim() === '' || Buffer.byteLength(id) > MAX_NODE_ID_BYTES)
      throw new ApiError(400, `listedNodes must hold node ids of 1 to ${MAX_NODE_ID_BYTES} bytes`);
  }
  return new Set(ids as string[]);
}

/**
 * `POST /cluster/unheld-sandboxes` (aenv's, for the gateway's cluster list; docs/cluster.md#sandboxes-held-by-no-node):
 * the paused sandboxes whose only copy is in the shared repository, except those of the nodes the body lists (they
 * list their own), filtered and paged exactly as `GET /v2/sandboxes` with the same query. A POST because the node
 * list can be long.
 */
export function registerUnheldSandboxesRoute(app: FastifyInstance, deps: UnheldRouteDeps): void {
  app.post('/cluster/unheld-sandboxes', { bodyLimit: BODY_LIMIT_BYTES }, async (req, reply) => {
    const query = parseV2ListQuery(req.query as Record<string, unknown>);
    const listed = listedNodes(req.body);
    // They are all paused: a list of running sandboxes reads nothing.
    if (!deps.unheld || query.only === 'running') return [];
    return v2ListPage(await deps.unheld(listed), query, reply, (r) => listedSandbox(r, deps.expiry(r)));
  });
}
