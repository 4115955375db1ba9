// The gateway's request handling (docs/cluster.md#the-gateway): authenticate, route (routing.ts), find or
// pick the node through the scheduler, forward with @aenv/proxy's relay, record what a create or fork made.
// It keeps no state of its own: any number can run side by side, and one can die without losing anything.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { Agent, type Dispatcher } from 'undici';
import type { Node } from '@aenv/protocol';
import {
  FramingError,
  forwardedHeaders,
  relayRequest,
  relayUpgrade,
  RelayResponseTooLarge,
  RelayTimeout,
  RelayUpstreamError,
  requestFraming,
  type BufferedAnswer,
} from '@aenv/proxy';
import type { Logger } from 'pino';
import type { GatewaySection } from '@aenv/scheduler';
import { createdSandboxIds } from './assignments.js';
import { ListError, mergePages, nodeItems, parseListQuery, type ListedSandbox } from './cluster-list.js';
import { clusterEvents } from './cluster-events-serve.js';
import type { EventsContext } from './cluster-events.js';
import { secretWrite } from './secret-routes.js';
import type { GatewayMetrics } from './metrics.js';
import { nodeView } from './nodes-view.js';
import { MAX_HINT_BODY_BYTES, placementHint } from './placement.js';
import { needsApiKey, normalizeDomains, route, type Route } from './routing.js';
import type { SchedulerCalls } from './scheduler-calls.js';
import { isNotFound, schedulerErrorAnswer } from './scheduler-errors.js';
import { VolumeLocator } from './volume-locator.js';
import { TemplateLocator } from './template-locator.js';
import { clusterSandboxMetrics } from './cluster-metrics.js';
import { unheldItems } from './unheld-list.js';
import { appendServerTiming } from './server-timing.js';

export interface GatewayDeps {
  config: GatewaySection;
  apiKey: string;
  scheduler: SchedulerCalls;
  metrics: GatewayMetrics;
  log: Logger;
}

/** An answer the gateway gives itself: `{"code":N,"message":"..."}`. */
class Reply extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const MOVABLE_OPS = new Set(['connect', 'resume']);
const NEXT_TOKEN_HEADER = 'x-next-token';

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Exactly one X-API-Key header, equal to the key (compared in constant time). */
export function apiKeyMatches(req: IncomingMessage, expected: Buffer): boolean {
  let value: string | undefined;
  let count = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i]!.toLowerCase() !== 'x-api-key') continue;
    count++;
    value = req.rawHeaders[i + 1];
  }
  if (count !== 1 || value === undefined) return false;
  return timingSafeEqual(digest(value), expected);
}

/** Streams (Connect/gRPC, SSE, trailers) are never time-bounded (docs/cluster.md#how-the-gateway-routes). */
export function isStreaming(req: IncomingMessage): boolean {
  const ct = String(req.headers['content-type'] ?? '').toLowerCase();
  if (ct.startsWith('application/grpc') || ct.startsWith('application/connect')) return true;
  if (req.headers['connect-protocol-version'] !== undefined) return true;
  if (
    String(req.headers.accept ?? '')
      .toLowerCase()
      .includes('text/event-stream')
  )
    return true;
  return String(req.headers.te ?? '')
    .toLowerCase()
    .includes('trailers');
}

/** Parsed node endpoints (a handful of nodes, each parsed once rather than on every request). */
const endpoints = new Map<string, URL>();
const MAX_ENDPOINTS = 10_000;

function origin(node: Node): URL {
  let url = endpoints.get(node.endpoint);
  if (!url) {
    url = new URL(node.endpoint);
    if (endpoints.size >= MAX_ENDPOINTS) endpoints.clear();
    endpoints.set(node.endpoint, url);
  }
  return url;
}

async function readBody(req: IncomingMessage, max: number): Promise<Buffer> {
  const framing = requestFraming(req);
  if (!framing.hasBody) return Buffer.alloc(0);
  if (framing.length !== undefined && framing.length > max)
    throw new Reply(413, `request body larger than ${max} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > max) throw new Reply(413, `request body larger than ${max} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

export class Gateway {
  private readonly domains: string[];
  private readonly key: Buffer;
  private readonly agent: Dispatcher;
  private readonly volumes: VolumeLocator;
  private readonly templates: TemplateLocator;
  /** Which node the next list asks for the sandboxes held by no node (they take turns). */
  private unheldTurn = 0;

  constructor(private readonly deps: GatewayDeps) {
    this.domains = normalizeDomains(deps.config.sandboxProxyDomains);
    this.key = digest(deps.apiKey);
    this.agent = new Agent({ connect: { timeout: 5_000 }, headersTimeout: 0, bodyTimeout: 0 });
    this.volumes = new VolumeLocator({
      scheduler: deps.scheduler,
      agent: this.agent,
      apiKey: deps.apiKey,
      requestTimeoutMs: deps.config.requestTimeoutMs,
      apiKeyMatches: (req) => apiKeyMatches(req, this.key),
      readBody,
      forward: (req, res, node, body, unbounded) =>
        this.forward(req, res, { kind: 'any' }, node, req.url ?? '/', {
          ...(body ? { body } : {}),
          ...(unbounded ? { unbounded: true } : {}),
        }),
      json: (res, status, value) => this.json(res, status, value),
    });
    this.templates = new TemplateLocator({
      scheduler: deps.scheduler,
      agent: this.agent,
      apiKey: deps.apiKey,
      timeoutMs: deps.config.requestTimeoutMs,
      readBody,
      forward: (req, res, node, opts) =>
        this.forward(req, res, { kind: 'any' }, node, req.url ?? '/', {
          ...(opts.body ? { body: opts.body } : {}),
          ...(opts.unbounded ? { unbounded: true } : {}),
        }),
      json: (res, status, value, extra) => this.json(res, status, value, extra),
    });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    let r: Route;
    try {
      r = route(req.method ?? 'GET', req.url ?? '/', req.headers, this.domains);
    } catch (e) {
      this.deps.log.warn({ err: (e as Error).message }, 'routing failed');
      r = { kind: 'reject', status: 400, message: 'invalid request', dataPlane: false };
    }
    const end = this.deps.metrics.httpRequest.startTimer({ route: r.kind, method: req.method ?? '' });
    res.once('close', () => end({ status: String(res.statusCode) }));
    if (needsApiKey(r) && !apiKeyMatches(req, this.key)) {
      req.resume();
      res.writeHead(401, { 'content-length': '0' }).end();
      return;
    }
    this.serve(r, req, res).catch((e: unknown) => this.fail(res, e));
  }

  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const refuse = (status: number, message: string) => {
      const body = status === 401 ? '' : JSON.stringify({ code: status, message });
      socket.end(
        `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : 'Error'}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    };
    socket.on('error', () => socket.destroy());
    let r: Route;
    try {
      r = route(req.method ?? 'GET', req.url ?? '/', req.headers, this.domains);
    } catch {
      return refuse(400, 'invalid request');
    }
    if (needsApiKey(r) && !apiKeyMatches(req, this.key)) return refuse(401, '');
    if (r.kind === 'reject') return refuse(r.status, r.message);
    if (r.kind !== 'data') return refuse(400, 'only sandbox traffic can be upgraded');
    this.dataNode(r.sandboxId).then(
      (node) => {
        const url = origin(node);
        let headers;
        try {
          headers = this.upstreamHeaders(req, r, node);
        } catch (e) {
          return refuse(400, (e as Error).message);
        }
        const tls = url.protocol === 'https:';
        relayUpgrade(
          req,
          socket,
          head,
          {
            host: url.hostname.replace(/^\[|\]$/g, ''),
            port: Number(url.port || (tls ? 443 : 80)),
            tls,
            path: `/proxy${req.url ?? '/'}`,
            headers,
          },
          () => {
            this.deps.scheduler.forget(r.sandboxId);
            refuse(502, 'upstream unavailable');
          },
        );
      },
      (e: unknown) => {
        const a = e instanceof Reply ? e : schedulerErrorAnswer(e);
        refuse(a.status, a.message);
      },
    );
  }

  private fail(res: ServerResponse, e: unknown): void {
    let status: number;
    let message: string;
    if (e instanceof Reply || e instanceof ListError) ({ status, message } = e);
    else if (e instanceof FramingError) [status, message] = [400, e.message];
    else if (e instanceof RelayTimeout) [status, message] = [504, 'upstream timeout'];
    else if (e instanceof RelayResponseTooLarge) [status, message] = [502, 'upstream response too large'];
    else if (e instanceof RelayUpstreamError) [status, message] = [502, 'upstream unavailable'];
    else ({ status, message } = schedulerErrorAnswer(e));
    if (status >= 500 && !(e instanceof Reply))
      this.deps.log.warn({ err: (e as Error)?.message, status }, message);
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    const body = JSON.stringify({ code: status, message });
    res
      .writeHead(status, {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
      })
      .end(body);
  }

  private json(
    res: ServerResponse,
    status: number,
    value: unknown,
    extra: Record<string, string> = {},
  ): void {
    const body = JSON.stringify(value);
    res
      .writeHead(status, {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
        ...extra,
      })
      .end(body);
  }

  private async serve(r: Route, req: IncomingMessage, res: ServerResponse): Promise<void> {
    switch (r.kind) {
      case 'health':
        res.writeHead(204).end();
        return;
      case 'metrics':
        throw new Reply(404, 'not found');
      case 'reject':
        throw new Reply(r.status, r.message);
      case 'list':
        return this.clusterList(req, res);
      case 'nodes':
        return this.json(res, 200, (await this.deps.scheduler.observed()).map(nodeView));
      case 'node':
        return this.forward(req, res, r, await this.namedNode(r.nodeId), req.url ?? '/');
      case 'data': {
        const node = await this.dataNode(r.sandboxId);
        try {
          return await this.forward(req, res, r, node, `/proxy${req.url ?? '/'}`);
        } catch (e) {
          this.deps.scheduler.forget(r.sandboxId);
          throw e;
        }
      }
      case 'sandbox':
        return this.sandboxCall(r, req, res);
      case 'create': {
        const started = performance.now();
        const body = await readBody(req, MAX_HINT_BODY_BYTES);
        const schedule = () => this.deps.scheduler.schedule(placementHint(body, r.cold));
        // A create mounting volumes goes to their node (docs/cluster.md#volumes-in-a-cluster); one launching a
        // template or snapshot that only some nodes hold, to one of those (#templates-and-snapshots-in-a-cluster).
        // A launch of a snapshot taken with volumes mounted mounts them again: it goes to their node too.
        const launch = r.cold ? undefined : await this.templates.launchOf(body);
        const node =
          (await this.volumes.nodeForMounts(body, schedule, launch)) ??
          (await this.templates.nodeForCreate(launch, schedule)) ??
          (await schedule());
        const placeMs = performance.now() - started;
        return this.forward(req, res, r, node, req.url ?? '/', { body, record: 'created', placeMs });
      }
      case 'volume':
        return this.volumes.serve(r.op, req, res);
      case 'template':
        return this.templates.serve(r.op, req, res);
      case 'sandbox-metrics':
        return this.json(
          res,
          200,
          await clusterSandboxMetrics(
            {
              nodes: () => this.deps.scheduler.listNodes(),
              agent: this.agent,
              timeoutMs: this.deps.config.requestTimeoutMs,
            },
            req,
          ),
        );
      case 'events':
        return clusterEvents(this.eventsContext(), r.events, req, res);
      case 'secrets': {
        if (r.write) return secretWrite(this.eventsContext(), req, res);
        const node = await this.deps.scheduler.schedule(undefined);
        return this.forward(req, res, r, node, req.url ?? '/');
      }
      case 'any': {
        const node = await this.deps.scheduler.schedule(undefined);
        return this.forward(req, res, r, node, req.url ?? '/');
      }
    }
  }

  /**
   * The node a `/nodes/{id}…` call names, by `GetNode` (the scheduler trims ids: only the exact id counts, so the
   * node is never handed a path naming another). 404 when the scheduler has no such node; 502 when it has no
   * address for it.
   */
  private async namedNode(nodeId: string): Promise<Node> {
    const notFound = () => new Reply(404, `node ${nodeId} not found`);
    const n = await this.deps.scheduler.getNode(nodeId).catch((e: unknown) => {
      throw isNotFound(e) ? notFound() : e;
    });
    if (!n || n.nodeId !== nodeId) throw notFound();
    if (n.endpoint === '') throw new Reply(502, `node ${nodeId} has no address`);
    return { nodeId: n.nodeId, endpoint: n.endpoint } as Node;
  }

  /** What the calls that span the nodes (events, secrets) need. */
  private eventsContext(): EventsContext {
    return {
      nodes: () => this.deps.scheduler.listNodes(),
      pick: () => this.deps.scheduler.schedule(undefined),
      agent: this.agent,
      timeoutMs: this.deps.config.requestTimeoutMs,
    };
  }

  /**
   * The node for sandbox traffic: the bound one, or — when there is no binding or the bound node is draining,
   * unhealthy or gone — one Schedule picks, which resumes the sandbox from the shared repository (docs/cluster.md).
   */
  private async dataNode(sandboxId: string): Promise<Node> {
    const calls = this.deps.scheduler;
    try {
      const node = await calls.lookupForTraffic(sandboxId);
      if (!calls.unfit(node)) return node;
    } catch (e) {
      if (!isNotFound(e)) throw e;
    }
    // Bound to the node that will resume it, so the requests that follow (here or at another gateway) go
    // there too, not to a second node; a sandbox no node has drops out at that node's next heartbeat.
    const node = await calls.schedule(undefined);
    await calls
      .record(sandboxId, node)
      .catch((e: unknown) =>
        this.deps.log.warn({ sandboxId, err: (e as Error).message }, 'moved binding not recorded'),
      );
    calls.remember(sandboxId, node);
    return node;
  }

  private async sandboxCall(
    r: Extract<Route, { kind: 'sandbox' }>,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    this.deps.scheduler.forget(r.sandboxId);
    const movable = MOVABLE_OPS.has(r.op);
    // GET and DELETE of a sandbox whose node is lost reach a node that can take it over from the shared
    // repository: it shows the paused sandbox, or kills it for good (docs/cluster.md#node-loss). A draining node
    // still holds its sandboxes until it hands them over, so only a lost one is passed by.
    const findable = r.op === '';
    let node: Node | undefined;
    let moved = false;
    try {
      node = await this.deps.scheduler.lookup(r.sandboxId);
      if (movable && this.deps.scheduler.unfit(node)) node = undefined;
      else if (findable && this.deps.scheduler.lost(node)) node = undefined;
    } catch (e) {
      if (!((movable || findable) && isNotFound(e))) throw e;
    }
    if (!node) {
      node = await this.deps.scheduler.schedule(undefined);
      moved = true;
    }
    // A moved sandbox is bound to its new node (a killed one is bound nowhere); a fork's children to the parent's.
    const record =
      moved && req.method !== 'DELETE'
        ? { sandboxId: r.sandboxId }
        : !moved && r.op === 'fork'
          ? 'created'
          : undefined;
    return this.forward(req, res, r, node, req.url ?? '/', record ? { record } : {});
  }

  private upstreamHeaders(req: IncomingMessage, r: Route, node: Node, bodyLength?: number) {
    const headers = forwardedHeaders(req, bodyLength);
    if (r.kind === 'data' && r.hostRouted) {
      // The node routes by these (its own host routes may differ); the original Host is in X-Forwarded-Host.
      headers['x-agentenv-sandbox-id'] = r.sandboxId;
      headers['x-agentenv-target-port'] = String(r.port);
      headers.host = origin(node).host;
    }
    return headers;
  }

  private async forward(
    req: IncomingMessage,
    res: ServerResponse,
    r: Route,
    node: Node,
    path: string,
    opts: {
      body?: Buffer;
      record?: 'created' | { sandboxId: string };
      unbounded?: boolean;
      /** Time spent choosing the node (reported in Server-Timing with the recording's). */
      placeMs?: number;
    } = {},
  ): Promise<void> {
    const headers = this.upstreamHeaders(req, r, node, opts.body?.length);
    if (this.deps.config.debugMode) res.setHeader('x-agentenv-node-id', node.nodeId);
    const streaming = opts.unbounded === true || isStreaming(req);
    const end = this.deps.metrics.upstreamProxy.startTimer({ route: r.kind });
    try {
      await relayRequest(
        req,
        res,
        { origin: origin(node).origin, path, headers },
        {
          dispatcher: this.agent,
          ...(streaming ? {} : { timeoutMs: this.deps.config.requestTimeoutMs }),
          ...(opts.body ? { body: opts.body } : {}),
          ...(opts.record
            ? {
                buffer: {
                  maxBytes: this.deps.config.forwardResponseSize,
                  onAnswer: async (a: BufferedAnswer) => {
                    const recording = performance.now();
                    await this.recordCreated(a, node, opts.record!);
                    appendServerTiming(a.headers, {
                      ...(opts.placeMs === undefined ? {} : { 'gateway-place': opts.placeMs }),
                      'gateway-record': performance.now() - recording,
                    });
                  },
                },
              }
            : {}),
        },
      );
      end({ outcome: 'ok' });
    } catch (e) {
      end({ outcome: (e as Error).name });
      throw e;
    }
  }

  private async recordCreated(
    a: BufferedAnswer,
    node: Node,
    what: 'created' | { sandboxId: string },
  ): Promise<void> {
    if (a.status < 200 || a.status >= 300) return;
    const ids = what === 'created' ? createdSandboxIds(a.headers, a.body) : [what.sandboxId];
    await Promise.all(
      ids.map((id) =>
        this.deps.scheduler.record(id, node).catch((e: unknown) =>
          // The node's next heartbeat binds it anyway; the create itself succeeded.
          this.deps.log.warn(
            { sandboxId: id, nodeId: node.nodeId, err: (e as Error).message },
            'assignment not recorded',
          ),
        ),
      ),
    );
  }

  private async clusterList(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const query = parseListQuery(q < 0 ? '' : url.slice(q + 1));
    // A node lost by its heartbeats is not asked (its paused sandboxes are listed from the shared repository, its
    // running ones are lost: docs/cluster.md#the-cluster-list).
    const nodes = (await this.deps.scheduler.listNodes()).filter((n) => !this.deps.scheduler.silent(n));
    const headers = forwardedHeaders(req);
    delete headers['content-length'];
    const v2 = path === '/v2/sandboxes';
    const unheld =
      v2 && nodes.length > 0
        ? unheldItems(
            {
              agent: this.agent,
              timeoutMs: this.deps.config.requestTimeoutMs,
              node: nodes[this.unheldTurn++ % nodes.length]!,
              listedNodes: nodes.map((n) => n.nodeId),
              query: query.nodePageQuery,
            },
            req,
          )
        : Promise.resolve([]);
    const pages = Promise.all(
      nodes.map(async (n): Promise<ListedSandbox[]> => {
        let answer: Dispatcher.ResponseData;
        try {
          answer = await this.agent.request({
            origin: origin(n).origin,
            // A node's v1 list has no pages: it is asked for all of it.
            path: path + (v2 ? query.nodePageQuery : query.nodeQuery),
            method: 'GET',
            headers,
            headersTimeout: this.deps.config.requestTimeoutMs,
            bodyTimeout: this.deps.config.requestTimeoutMs,
          });
        } catch {
          throw new ListError(502, `cluster list unavailable: node ${n.nodeId} unreachable`);
        }
        const text = await answer.body.text().catch(() => {
          throw new ListError(502, `cluster list unavailable: node ${n.nodeId} broke off`);
        });
        if (answer.statusCode >= 400 && answer.statusCode < 500) {
          // The client's fault (a bad filter): every node says the same; relay the first one's answer.
          let message = text;
          try {
            message = (JSON.parse(text) as { message?: string }).message ?? text;
          } catch {
            // plain text
          }
          throw new ListError(answer.statusCode, message);
        }
        if (answer.statusCode !== 200)
          throw new ListError(
            502,
            `cluster list unavailable: node ${n.nodeId} answered ${answer.statusCode}`,
          );
        let doc: unknown;
        try {
          doc = JSON.parse(text);
        } catch {
          throw new ListError(502, `cluster list unavailable: node ${n.nodeId} answered no list`);
        }
        return nodeItems(n.nodeId, doc);
      }),
    );
    // The nodes' entries first: a sandbox both a node and the repository name (a take-over in flight) is the node's.
    const [own, shared] = await Promise.all([pages, unheld]);
    const page = mergePages([...own, shared], query);
    this.json(res, 200, page.items, page.nextToken ? { [NEXT_TOKEN_HEADER]: page.nextToken } : {});
  }
}
