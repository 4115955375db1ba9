// The gateway's template and snapshot calls (docs/cluster.md#templates-and-snapshots-in-a-cluster). A template
// lives on the node that built it (a snapshot on the node of its sandbox) unless the nodes share a repository,
// when every node holds every record. The gateway finds the holders of a name by asking every node
// (`GET /templates/{name}`) and remembers them for a short while; lists are merged across the nodes.
import { performance } from 'node:perf_hooks';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Node } from '@aenv/protocol';
import { ListError } from './cluster-list.js';
import type { SchedulerCalls } from './scheduler-calls.js';
import {
  allAnswers,
  askAll,
  askHeaders,
  askNode,
  relayAnswer,
  type Asked,
  type FanoutContext,
} from './node-fanout.js';
import {
  buildBodyName,
  createBodyTemplate,
  isLookupName,
  listedRecords,
  lookupName,
  mergeRecords,
  pageRecords,
  parseRecordPageQuery,
  rendezvousOrder,
  tagsBodyName,
  uploadTokenProblem,
  type TemplateOp,
} from './template-routes.js';
import { recordedMounts, type RecordedMount } from './volume-routes.js';

/**
 * The holders of a name are remembered this long: long enough that a burst of creates from one template and a
 * build's status polls ask the nodes once, short enough that a template deleted or built through another gateway
 * is seen soon (docs/cluster.md#templates-and-snapshots-in-a-cluster).
 */
const HOLDERS_TTL_MS = 10_000;
const HOLDERS_MAX = 10_000;
/** Build requests and tag requests are small JSON documents (a name, tags, cpu and memory). */
const MAX_TEMPLATE_BODY_BYTES = 64 * 1024;

export interface TemplateLocatorDeps extends FanoutContext {
  scheduler: Pick<SchedulerCalls, 'listNodes' | 'schedule' | 'unfit'>;
  /** The cluster's key: holder lookups are the gateway's own (an upload carries no key). */
  apiKey: string;
  readBody: (req: IncomingMessage, max: number) => Promise<Buffer>;
  /** Forwards the client's request to `node`; `unbounded`: no request timeout (an upload's body streams). */
  forward: (
    req: IncomingMessage,
    res: ServerResponse,
    node: Node,
    opts: { body?: Buffer; unbounded?: boolean },
  ) => Promise<void>;
  json: (res: ServerResponse, status: number, value: unknown, extra?: Record<string, string>) => void;
}

interface Holders {
  held: Node[];
  /** The name the holders are ordered by (the record's alias, else its id): the same for every call about it. */
  key: string;
  /** Every node asked held it (a shared repository, or a template built on each): creates are placed as usual. */
  all: boolean;
  unreachable: Node[];
  /** The volumes a launch of it mounts again (a snapshot's, from its holder's answer; docs/volumes.md). */
  volumeMounts: RecordedMount[];
}

/** What placing a create that launches a template or snapshot needs to know about it. */
export interface Launch {
  /** The name its holders are ordered by. */
  key: string;
  /** The name the create gave (in messages). */
  name: string;
  /** The nodes that can launch it; undefined: any (every node holds it). */
  held: Node[] | undefined;
  /** The volumes a launch of it mounts again (a snapshot of a sandbox that mounted volumes). */
  volumeMounts: RecordedMount[];
}

export class TemplateLocator {
  private readonly known = new Map<string, { holders: Holders; at: number }>();

  constructor(private readonly deps: TemplateLocatorDeps) {}

  async serve(op: TemplateOp, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const search = q < 0 ? '' : url.slice(q + 1);
    switch (op.kind) {
      case 'list': {
        const answers = allAnswers('template list', await this.askEveryNode(req, url));
        return this.deps.json(
          res,
          200,
          mergeRecords(answers.map((a) => records('templates', a))).map((r) => r.item),
        );
      }
      case 'page': {
        const query = parseRecordPageQuery(search);
        const what = op.of === 'templates' ? 'template list' : 'snapshot list';
        const answers = allAnswers(what, await this.askEveryNode(req, path + query.nodeQuery));
        const page = pageRecords(mergeRecords(answers.map((a) => records(op.of, a))), query);
        return this.deps.json(res, 200, page.items, page.nextToken ? { 'x-next-token': page.nextToken } : {});
      }
      case 'build': {
        const body = await this.deps.readBody(req, MAX_TEMPLATE_BODY_BYTES);
        const node = await this.buildNode(buildBodyName(body));
        this.known.clear();
        return this.deps.forward(req, res, node, { body });
      }
      case 'alias':
        return this.alias(op.alias, req, res);
      case 'tags': {
        const body = await this.deps.readBody(req, MAX_TEMPLATE_BODY_BYTES);
        return this.forwardTo(tagsBodyName(body), req, res, { body });
      }
      case 'one':
        if (req.method === 'DELETE') return this.deleteEverywhere(lookupName(op.ref), req, res);
        return this.forwardTo(lookupName(op.ref), req, res, {});
      case 'upload': {
        const problem = uploadTokenProblem(search, Date.now());
        if (problem) {
          req.resume();
          const text = JSON.stringify({ code: 403, message: problem });
          res
            .writeHead(403, {
              'content-type': 'application/json',
              'content-length': String(Buffer.byteLength(text)),
              connection: 'close',
            })
            .end(text);
          return;
        }
        return this.forwardTo(op.ref, req, res, { unbounded: true });
      }
    }
  }

  /**
   * The template or snapshot a create launches, when a node holds it: which nodes can launch it and which volumes
   * it mounts again. undefined: the create names none, or no node holds it (the node the create lands on answers
   * its 404). A node that did not answer while no other has it: 502.
   */
  async launchOf(body: Buffer): Promise<Launch | undefined> {
    const name = createBodyTemplate(body);
    if (name === undefined || !isLookupName(name)) return undefined;
    const h = await this.holders(name);
    if (h.held.length === 0) {
      if (h.unreachable.length > 0) throw unavailable(name, h.unreachable[0]!);
      return undefined;
    }
    return { key: h.key, name, held: h.all ? undefined : h.held, volumeMounts: h.volumeMounts };
  }

  /**
   * The node a create launching `launch` must go to, when not every node has it: a fit holder (Schedule's pick
   * if it is one). undefined: place it as usual.
   */
  async nodeForCreate(launch: Launch | undefined, schedule: () => Promise<Node>): Promise<Node | undefined> {
    if (!launch?.held) return undefined;
    const fit = launch.held.filter((n) => !this.deps.scheduler.unfit(n));
    if (fit.length === 0)
      throw new ListError(
        503,
        `the nodes holding template ${shown(launch.name)} (${launch.held.map((n) => n.nodeId).join(', ')}) are draining or unhealthy; try again later`,
      );
    if (fit.length === 1) return fit[0];
    const picked = await schedule();
    return fit.find((n) => n.nodeId === picked.nodeId) ?? rendezvousOrder(launch.key, fit)[0];
  }

  /** The holders of `name`: remembered, else every node asked `GET /templates/{name}` (200 = holds it). */
  private async holders(name: string): Promise<Holders> {
    const hit = this.known.get(name);
    if (hit && performance.now() - hit.at < HOLDERS_TTL_MS) return hit.holders;
    const nodes = await this.deps.scheduler.listNodes();
    const asked = await askAll(this.deps, nodes, 'GET', `/templates/${encodeURIComponent(name)}`, {
      'x-api-key': this.deps.apiKey,
    });
    const held: Node[] = [];
    const unreachable: Node[] = [];
    let key: string | undefined;
    let volumeMounts: RecordedMount[] | undefined;
    for (const a of asked) {
      // 400 (a name no record can have) and 404 are a node's "not here".
      if ('unreachable' in a || (a.status !== 200 && a.status !== 404 && a.status !== 400)) {
        unreachable.push(a.node);
        continue;
      }
      if (a.status !== 200) continue;
      held.push(a.node);
      key ??= recordKey(a.text);
      volumeMounts ??= mountsOf(a.text);
    }
    const holders: Holders = {
      held,
      key: key ?? name,
      all: held.length === nodes.length && nodes.length > 0,
      unreachable,
      volumeMounts: volumeMounts ?? [],
    };
    if (held.length > 0) {
      this.known.delete(name);
      if (this.known.size >= HOLDERS_MAX) this.known.delete(this.known.keys().next().value!);
      this.known.set(name, { holders, at: performance.now() });
    }
    return holders;
  }

  /** The holder a call about `name` goes to: the first fit one in the name's order (every gateway's same choice). */
  private async holderOf(name: string): Promise<Node | undefined> {
    const h = await this.holders(name);
    if (h.held.length === 0) {
      if (h.unreachable.length > 0) throw unavailable(name, h.unreachable[0]!);
      return undefined;
    }
    const ordered = rendezvousOrder(h.key, h.held);
    return ordered.find((n) => !this.deps.scheduler.unfit(n)) ?? ordered[0];
  }

  /**
   * To the holder of `name`; when no node holds it (or the request names none readably) to a node Schedule
   * picks, whose 400 or 404 is then the answer one node gives.
   */
  private async forwardTo(
    name: string | undefined,
    req: IncomingMessage,
    res: ServerResponse,
    opts: { body?: Buffer; unbounded?: boolean },
  ): Promise<void> {
    const holder = name !== undefined && isLookupName(name) ? await this.holderOf(name) : undefined;
    const node = holder ?? (await this.deps.scheduler.schedule(undefined));
    try {
      await this.deps.forward(req, res, node, opts);
    } catch (e) {
      if (name !== undefined) this.known.delete(name);
      throw e;
    }
    // Gone from the node this gateway thought held it (deleted through another gateway).
    if (name !== undefined && res.statusCode === 404) this.known.delete(name);
  }

  /** The build goes to a node holding the name (a rebuild), else to the name's first fit node. */
  private async buildNode(name: string | undefined): Promise<Node> {
    if (name === undefined || !isLookupName(name)) return this.deps.scheduler.schedule(undefined);
    this.known.delete(name);
    const h = await this.holders(name);
    const pool = h.held.length > 0 ? h.held : await this.deps.scheduler.listNodes();
    const fit = rendezvousOrder(h.held.length > 0 ? h.key : name, pool).filter(
      (n) => !this.deps.scheduler.unfit(n),
    );
    if (fit.length > 0) return fit[0]!;
    if (h.held.length > 0)
      throw new ListError(
        503,
        `the nodes holding template ${shown(name)} are draining or unhealthy; try again later`,
      );
    return this.deps.scheduler.schedule(undefined);
  }

  /** `GET /templates/aliases/{alias}`: the first node's 200, else (every node answered) the nodes' own answer. */
  private async alias(alias: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const asked = await this.askEveryNode(req, req.url ?? '/');
    const found = asked.find(
      (a): a is Extract<Asked, { status: number }> => 'status' in a && a.status === 200,
    );
    if (found) return relayAnswer(res, found);
    const silent = asked.find((a) => 'unreachable' in a || a.status >= 500);
    if (silent) throw unavailable(alias, silent.node);
    const first = asked.find((a): a is Extract<Asked, { status: number }> => 'status' in a);
    if (!first) throw new ListError(503, 'no nodes available');
    relayAnswer(res, first);
  }

  /**
   * A delete reaches every holder (a template of one name built on several nodes is deleted from each), in the
   * name's order; a holder's refusal (409: sandboxes use it) stops there and is the answer, and with a shared
   * repository the record is gone after the first, so the others' 404 is expected. Nothing is deleted while a
   * node does not answer (it may hold the name too): 502.
   */
  private async deleteEverywhere(name: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!isLookupName(name)) return this.forwardTo(undefined, req, res, {});
    this.known.delete(name);
    const h = await this.holders(name);
    this.known.clear();
    if (h.unreachable.length > 0) throw unavailable(name, h.unreachable[0]!);
    if (h.held.length === 0) return this.forwardTo(undefined, req, res, {});
    let first: Extract<Asked, { status: number }> | undefined;
    for (const node of rendezvousOrder(h.key, h.held)) {
      const a = await askNode(this.deps, node, 'DELETE', req.url ?? '/', askHeaders(req));
      if ('unreachable' in a) throw unavailable(name, node);
      if (a.status === 404 && first) continue;
      if (a.status < 200 || a.status >= 300) return relayAnswer(res, a);
      first ??= a;
    }
    relayAnswer(res, first!);
  }

  private async askEveryNode(req: IncomingMessage, path: string): Promise<Asked[]> {
    return askAll(this.deps, await this.deps.scheduler.listNodes(), 'GET', path, askHeaders(req));
  }
}

function records(of: 'templates' | 'snapshots', a: { node: Node; doc: unknown }) {
  const r = listedRecords(of, a.doc);
  if (!r)
    throw new ListError(
      502,
      `${of === 'templates' ? 'template' : 'snapshot'} list unavailable: node ${a.node.nodeId} answered no list`,
    );
  return r;
}

/** The alias of a `GET /templates/{id}` answer, else its id. */
function recordKey(text: string): string | undefined {
  try {
    const doc = JSON.parse(text) as { aliases?: unknown; templateID?: unknown } | null;
    const alias = Array.isArray(doc?.aliases) ? doc.aliases[0] : undefined;
    if (typeof alias === 'string') return alias;
    return typeof doc?.templateID === 'string' ? doc.templateID : undefined;
  } catch {
    return undefined;
  }
}

/** The volumes a `GET /templates/{id}` answer says a launch mounts again (aenv's extension field). */
function mountsOf(text: string): RecordedMount[] | undefined {
  try {
    return recordedMounts(JSON.parse(text));
  } catch {
    return undefined;
  }
}

const shown = (s: string) => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s);

function unavailable(name: string, node: Node): ListError {
  return new ListError(
    502,
    `template lookup unavailable: node ${node.nodeId} did not answer, template ${shown(name)} may be there`,
  );
}
