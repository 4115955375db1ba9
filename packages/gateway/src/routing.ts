// Where a request through the gateway goes (docs/cluster.md#how-the-gateway-routes): the routing table as one
// pure decision, so every branch is unit-tested without sockets.
import { parseProxyHost, RoutingError } from '@aenv/proxy';
import { volumeRoute, type VolumeOp } from './volume-routes.js';
import { eventsRoute, type EventsRoute } from './cluster-events.js';
import { templateRoute, type TemplateOp } from './template-routes.js';
import { secretsRoute } from './secret-routes.js';

export type Route =
  /** `/health` not routed to a sandbox: answered 204 by the gateway. */
  | { kind: 'health' }
  /** `/metrics` not routed: 404 (the gateway's metrics are on their own address). */
  | { kind: 'metrics' }
  /** A client error decided before anything is looked up. */
  | { kind: 'reject'; status: number; message: string; dataPlane: boolean }
  /** Sandbox traffic: forwarded to the bound node's `/proxy` + `path`. */
  | { kind: 'data'; sandboxId: string; port: number; hostRouted: boolean }
  /** `GET /sandboxes`, `GET /v2/sandboxes`: the cluster list. */
  | { kind: 'list' }
  | { kind: 'nodes' }
  /** `GET /nodes/{id}` (`op` '') and `POST /nodes/{id}/drain` (`op` 'drain'): to the named node. */
  | { kind: 'node'; nodeId: string; op: NodeOp }
  /** A control-plane call about one sandbox: to its node. `op` is the last path segment (or '' for the sandbox). */
  | { kind: 'sandbox'; sandboxId: string; op: string }
  /** A create: placed by Schedule with the body's hint, the new sandbox recorded. */
  | { kind: 'create'; cold: boolean }
  /** `/volumes…` and `/volumecontent/…`: to the node holding the volume (docs/cluster.md#volumes-in-a-cluster). */
  | { kind: 'volume'; op: VolumeOp }
  /** Templates and snapshots: lists merged, calls naming one to a node holding it (template-locator.ts). */
  | { kind: 'template'; op: TemplateOp }
  /** `GET /sandboxes/metrics`: every node's metrics of the named sandboxes, joined (cluster-metrics.ts). */
  | { kind: 'sandbox-metrics' }
  /** Webhook writes, delivery history and stats, lifecycle events: across the nodes (cluster-events.ts). */
  | { kind: 'events'; events: EventsRoute }
  /** `/secrets…`: reads to a node Schedule picks, writes there and then copied by every node (secret-routes.ts). */
  | { kind: 'secrets'; write: boolean }
  /** Any other control-plane call: to a node Schedule picks. */
  | { kind: 'any' };

/** `[a-z0-9]([a-z0-9-]*[a-z0-9])?`, at most 63 characters (a DNS label). */
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** Lowercased, without a trailing dot, deduplicated, the longest first (so `a.b.test` wins over `b.test`). */
export function normalizeDomains(domains: readonly string[]): string[] {
  const set = new Set(domains.map((d) => d.trim().toLowerCase().replace(/\.$/, '')).filter((d) => d !== ''));
  return [...set].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
}

/** `{port}-{sandboxID}.{domain}` with the sandbox id a DNS label (the node's rule is stricter). */
export function hostRoute(
  hostHeader: string | undefined,
  domains: readonly string[],
): { sandboxId: string; port: number } | undefined {
  return parseProxyHost(hostHeader, domains, (id) => DNS_LABEL.test(id));
}

type Headers = Record<string, string | string[] | undefined>;

function header(headers: Headers, ...names: string[]): string | undefined {
  for (const n of names) {
    const v = headers[n];
    const s = Array.isArray(v) ? v[0] : v;
    if (s !== undefined && s.trim() !== '') return s.trim();
  }
  return undefined;
}

const SANDBOX_ID_HEADERS = ['x-agentenv-sandbox-id', 'e2b-sandbox-id'];
const PORT_HEADERS = ['x-agentenv-target-port', 'e2b-sandbox-port'];

/** The routing headers, checked: a sandbox id that is a DNS label and a port 1..65535. */
function headerRoute(headers: Headers): { sandboxId: string; port: number } | RoutingError {
  const id = header(headers, ...SANDBOX_ID_HEADERS);
  if (id === undefined) return new RoutingError(400, 'sandbox id header required');
  const portText = header(headers, ...PORT_HEADERS);
  if (portText === undefined) return new RoutingError(400, 'target port header required');
  const sandboxId = id.toLowerCase();
  if (!DNS_LABEL.test(sandboxId)) return new RoutingError(400, 'invalid sandbox id header');
  const port = /^\d{1,5}$/.test(portText) ? Number(portText) : NaN;
  if (!(port >= 1 && port <= 65535)) return new RoutingError(400, 'invalid target port header');
  return { sandboxId, port };
}

/** Control-plane paths naming one sandbox, by method (docs/cluster.md#how-the-gateway-routes). */
const SANDBOX_OPS: Record<string, readonly string[]> = {
  GET: ['', 'custom-extension-params', 'logs', 'metrics'],
  DELETE: [''],
  POST: ['pause', 'resume', 'fork', 'connect', 'timeout', 'refreshes', 'snapshots'],
  PUT: ['network'],
  PATCH: ['custom-extension-params'],
};

/** The node's own routes under `/nodes/{nodeID}`, by method (docs/cluster.md#how-the-gateway-routes). */
export type NodeOp = '' | 'drain';
const NODE_OPS: Record<string, readonly string[]> = { GET: [''], POST: ['drain'] };

/** The scheduler's limit (scheduler-service.ts MAX_ID_BYTES): a longer id can name no node. */
const MAX_NODE_ID_BYTES = 512;

/**
 * A call naming one node, or a 400 for an id that cannot be one: empty, a bad escape, over-long, or holding a
 * slash, a backslash or a control character (which would name another path at the node).
 */
function nodePath(method: string, path: string): Route | undefined {
  const m = /^\/nodes\/([^/]*)(?:\/([^/]+))?$/.exec(path);
  if (!m) return undefined;
  const op = m[2] ?? '';
  if (!(NODE_OPS[method] ?? []).includes(op)) return undefined;
  const id = safeDecode(m[1]!);
  if (
    id === undefined ||
    id.trim() === '' ||
    Buffer.byteLength(id) > MAX_NODE_ID_BYTES ||
    /[/\\\p{Cc}]/u.test(id)
  )
    return { kind: 'reject', status: 400, message: 'invalid node id', dataPlane: false };
  return { kind: 'node', nodeId: id, op: op as NodeOp };
}

function sandboxPath(method: string, path: string): { sandboxId: string; op: string } | undefined {
  const m = /^\/(?:v2\/)?sandboxes\/([^/]+)(?:\/([^/]+))?\/?$/.exec(path);
  if (!m) return undefined;
  const id = decodeURIComponent(m[1]!);
  const op = m[2] ?? '';
  const v2 = path.startsWith('/v2/');
  // The node serves /v2/ only for connect and logs.
  if (v2 && op !== 'connect' && op !== 'logs') return undefined;
  if (id === 'metrics' && op === '') return undefined;
  if (!(SANDBOX_OPS[method] ?? []).includes(op)) return undefined;
  return { sandboxId: id, op };
}

/** Paths of the node's API: with routing headers they are still control plane (not sandbox traffic). */
const CONTROL_PREFIXES = [
  '/sandboxes',
  '/v2/sandboxes',
  '/sandboxes-cold',
  '/templates',
  '/v2/templates',
  '/v3/templates',
  '/snapshots',
  '/nodes',
  '/teams',
  '/events',
  '/volumes',
  '/volumecontent',
  '/secrets',
];

function isControlPath(path: string): boolean {
  return CONTROL_PREFIXES.some((p) => path === p || path.startsWith(`${p}/`));
}

function safeDecode(path: string): string | undefined {
  try {
    return decodeURIComponent(path);
  } catch {
    return undefined;
  }
}

/** The route of a request (method, target, headers) through a gateway serving `domains` host routes. */
export function route(method: string, url: string, headers: Headers, domains: readonly string[]): Route {
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  let host: { sandboxId: string; port: number } | undefined;
  try {
    host = hostRoute(header(headers, 'host'), domains);
  } catch (e) {
    if (e instanceof RoutingError)
      return { kind: 'reject', status: e.status, message: e.message, dataPlane: true };
    throw e;
  }
  // Host routing takes precedence over everything (routing headers that disagree are ignored).
  if (host) return { kind: 'data', ...host, hostRouted: true };
  if (path === '/proxy' || path.startsWith('/proxy/')) {
    const r = headerRoute(headers);
    if (r instanceof RoutingError)
      return { kind: 'reject', status: r.status, message: r.message, dataPlane: true };
    return { kind: 'data', ...r, hostRouted: false };
  }
  const hasId = header(headers, ...SANDBOX_ID_HEADERS) !== undefined;
  const hasPort = header(headers, ...PORT_HEADERS) !== undefined;
  if (hasId && hasPort && !isControlPath(path)) {
    const r = headerRoute(headers);
    if (r instanceof RoutingError)
      return { kind: 'reject', status: r.status, message: r.message, dataPlane: true };
    return { kind: 'data', ...r, hostRouted: false };
  }
  if (path === '/health') return { kind: 'health' };
  if (path === '/metrics') return { kind: 'metrics' };
  const volume = volumeRoute(method, path);
  if (volume) return { kind: 'volume', op: volume };
  if (method === 'GET' && (path === '/sandboxes' || path === '/v2/sandboxes')) return { kind: 'list' };
  if (method === 'GET' && path === '/sandboxes/metrics') return { kind: 'sandbox-metrics' };
  const template = templateRoute(method, path);
  if (template) return { kind: 'template', op: template };
  if (method === 'GET' && path === '/nodes') return { kind: 'nodes' };
  const node = nodePath(method, path);
  if (node) return node;
  if (method === 'POST' && (path === '/sandboxes' || path === '/v2/sandboxes'))
    return { kind: 'create', cold: false };
  if (method === 'POST' && path === '/sandboxes-cold') return { kind: 'create', cold: true };
  if (safeDecode(path) === undefined)
    return { kind: 'reject', status: 400, message: 'invalid path', dataPlane: false };
  const sbx = sandboxPath(method, path);
  if (sbx) {
    if (sbx.sandboxId === '' || sbx.sandboxId.length > 128)
      return { kind: 'reject', status: 400, message: 'invalid sandbox id', dataPlane: false };
    return { kind: 'sandbox', ...sbx };
  }
  const events = eventsRoute(method, path);
  if (events) return { kind: 'events', events };
  const secrets = secretsRoute(method, path);
  if (secrets) return secrets;
  return { kind: 'any' };
}

/** Whether the route needs the API key (everything but sandbox traffic, `/health` and `/metrics`). */
export function needsApiKey(r: Route): boolean {
  if (r.kind === 'reject') return !r.dataPlane;
  // The content API takes the volume's own token (the gateway checks it: volume-locator.ts).
  if (r.kind === 'volume' && r.op.kind === 'content') return false;
  // An upload link carries its own token, which the node that issued it checks (docs/templates.md).
  if (r.kind === 'template' && r.op.kind === 'upload') return false;
  return r.kind !== 'data' && r.kind !== 'health' && r.kind !== 'metrics';
}
