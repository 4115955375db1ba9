// The gateway's volume calls (docs/cluster.md#volumes-in-a-cluster). A volume lives on the node that created
// it and never moves — or on a directory several nodes share, and then any of them serves it — so the gateway
// finds it by asking every node (`GET /volumes/{id}`, `GET /volumes`) and keeps what it learnt about an id for a
// short while; names are looked up afresh for every create that mounts them (a name can be deleted on one node
// and made again on another).
import { performance } from 'node:perf_hooks';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { volumeContentTokenMatches, type Node } from '@aenv/protocol';
import { ListError } from './cluster-list.js';
import { jsonObjectOf } from './json-body.js';
import { askAll, type Asked } from './node-fanout.js';
import type { SchedulerCalls } from './scheduler-calls.js';
import type { Launch } from './template-locator.js';
import {
  isVolumeId,
  mergeVolumeLists,
  mountedPaths,
  mountedVolumeNames,
  normalMountPath,
  placeMounts,
  volumeItems,
  type ListedVolume,
  type VolumeOp,
} from './volume-routes.js';

/** A volume's node is remembered this long: it cannot change, but the node's endpoint can (a new pod IP). */
const VOLUME_NODE_TTL_MS = 30_000;
const VOLUME_NODES_MAX = 10_000;
/** `POST /volumes` takes `{"name": "..."}`; the node refuses anything else. */
const MAX_CREATE_BODY_BYTES = 4096;

export interface VolumeLocatorDeps {
  scheduler: Pick<SchedulerCalls, 'listNodes' | 'schedule' | 'unfit'>;
  agent: Dispatcher;
  apiKey: string;
  requestTimeoutMs: number;
  /** Whether the request carries the cluster's API key (the gateway's own check). */
  apiKeyMatches: (req: IncomingMessage) => boolean;
  /** Reads a request body of at most `max` bytes (413 over). */
  readBody: (req: IncomingMessage, max: number) => Promise<Buffer>;
  /** Forwards the client's request to `node` (the gateway's relay, with its framing and timeouts). */
  /** `unbounded`: no request timeout (a file's content streams for as long as it takes). */
  forward: (
    req: IncomingMessage,
    res: ServerResponse,
    node: Node,
    body?: Buffer,
    unbounded?: boolean,
  ) => Promise<void>;
  json: (res: ServerResponse, status: number, value: unknown) => void;
}

const shown = (s: string) => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s);
const notFound = (id: string) => new ListError(404, `volume ${JSON.stringify(id.slice(0, 80))} not found`);

export class VolumeLocator {
  private readonly known = new Map<string, { node: Node; at: number }>();

  constructor(private readonly deps: VolumeLocatorDeps) {}

  async serve(op: VolumeOp, req: IncomingMessage, res: ServerResponse): Promise<void> {
    switch (op.kind) {
      case 'list':
        return this.deps.json(res, 200, await this.listAll());
      case 'create': {
        const body = await this.deps.readBody(req, MAX_CREATE_BODY_BYTES);
        await this.refuseTakenName(body);
        return this.deps.forward(req, res, await this.deps.scheduler.schedule(undefined), body);
      }
      case 'one': {
        if (!isVolumeId(op.volumeId)) throw notFound(op.volumeId);
        const node = await this.locate(op.volumeId);
        if (req.method === 'DELETE') this.known.delete(op.volumeId);
        return this.forward(op.volumeId, req, res, node);
      }
      case 'content': {
        // Checked here as the node checks it, before anything is looked up: an unauthorised caller learns nothing
        // about which volumes exist and costs the nodes nothing.
        if (!isVolumeId(op.volumeId) || !this.contentAuthorized(req, op.volumeId)) {
          req.resume();
          const body = JSON.stringify({
            code: 401,
            message: 'a valid volume token (Authorization: Bearer) is required',
          });
          res
            .writeHead(401, {
              'content-type': 'application/json',
              'content-length': String(Buffer.byteLength(body)),
              connection: 'close',
            })
            .end(body);
          return;
        }
        // A file's content, read or written, takes as long as its size needs: not bounded by request_timeout
        // (as sandbox streams are not); its size is bounded by the volume's quota, which its node enforces as the
        // bytes arrive (docs/volumes.md).
        const file = (req.url ?? '').split('?')[0]!.endsWith('/file');
        return this.forward(op.volumeId, req, res, await this.locate(op.volumeId), file);
      }
    }
  }

  /**
   * The node a create must go to for the volumes it mounts — those its body's `volumeMounts` names, and those the
   * snapshot it launches recorded (less any at a path the body mounts something else at; docs/volumes.md) —
   * undefined when it mounts none: the one holding them all, or — volumes on a directory several nodes share —
   * the one Schedule picks among those holding them all, and of those only the nodes holding the snapshot.
   * Different nodes, a name meaning different volumes on several nodes, a snapshot none of those nodes holds:
   * 409; an unknown name: 404; holders all draining or unhealthy: 503.
   */
  async nodeForMounts(
    body: Buffer,
    schedule: () => Promise<Node>,
    launch?: Launch,
  ): Promise<Node | undefined> {
    const names = mountedVolumeNames(body) ?? [];
    const replaced = mountedPaths(body);
    const recorded = (launch?.volumeMounts ?? []).filter((m) => !replaced.has(normalMountPath(m.path)));
    if (names.length === 0 && recorded.length === 0) return undefined;
    const asked = await this.askAll('/volumes');
    const holders = new Map<string, Map<string, string>>();
    const unreachable: string[] = [];
    for (const a of asked) {
      const items = 'unreachable' in a || a.status !== 200 ? undefined : parseList(a.text);
      if (!items) unreachable.push(a.node.nodeId);
      else holders.set(a.node.nodeId, new Map(items.map((v) => [v.name, v.volumeID])));
    }
    const placed = placeMounts(names, holders, unreachable, recorded);
    if (!placed.ok) throw new ListError(placed.status, placed.message);
    if (!placed.nodeIds) return undefined;
    let held = placed.nodeIds.map((id) => asked.find((a) => a.node.nodeId === id)!.node);
    const what =
      recorded.length === 0
        ? 'the volumes of volumeMounts'
        : `the volumes ${names.length ? 'of volumeMounts and ' : ''}snapshot ${shown(launch!.name)} was taken with`;
    if (launch?.held) {
      const can = new Set(launch.held.map((n) => n.nodeId));
      const both = held.filter((n) => can.has(n.nodeId));
      if (both.length === 0)
        throw new ListError(
          409,
          `${what} live on ${held.map((n) => n.nodeId).join(', ')}, and template ${shown(launch.name)} only on ${launch.held.map((n) => n.nodeId).join(', ')}; a sandbox can mount only volumes of its own node`,
        );
      held = both;
    }
    const fit = held.filter((n) => !this.deps.scheduler.unfit(n));
    if (fit.length === 0)
      throw new ListError(
        503,
        `${held.length === 1 ? `node ${held[0]!.nodeId}, which holds` : `nodes ${held.map((n) => n.nodeId).join(', ')}, which hold`} ${what}, ${held.length === 1 ? 'is' : 'are'} draining or unhealthy; try again later`,
      );
    if (fit.length === 1) return fit[0];
    const picked = await schedule();
    return fit.find((n) => n.nodeId === picked.nodeId) ?? fit[0];
  }

  /**
   * A name any node already has is refused as one node refuses it (409): a create mounting it by name could not
   * tell the two apart. Best effort: a node that does not answer is not waited for, and two creates of one name
   * at the same instant through different nodes can both succeed (then mounting that name is a 409 naming both).
   */
  private async refuseTakenName(body: Buffer): Promise<void> {
    const name = jsonObjectOf(body)?.name;
    if (typeof name !== 'string') return;
    for (const a of await this.askAll('/volumes')) {
      if ('unreachable' in a || a.status !== 200) continue;
      if (parseList(a.text)?.some((v) => v.name === name))
        throw new ListError(409, `a volume named ${JSON.stringify(name)} already exists`);
    }
  }

  private contentAuthorized(req: IncomingMessage, volumeId: string): boolean {
    if (this.deps.apiKeyMatches(req)) return true;
    const auth: string[] = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2)
      if (req.rawHeaders[i]!.toLowerCase() === 'authorization') auth.push(req.rawHeaders[i + 1]!);
    if (auth.length !== 1) return false;
    const m = /^Bearer ([^\s]+)$/.exec(auth[0]!);
    return m !== null && volumeContentTokenMatches(this.deps.apiKey, volumeId, m[1]!);
  }

  private async forward(
    volumeId: string,
    req: IncomingMessage,
    res: ServerResponse,
    node: Node,
    unbounded = false,
  ): Promise<void> {
    try {
      await this.deps.forward(req, res, node, undefined, unbounded);
    } catch (e) {
      this.known.delete(volumeId);
      throw e;
    }
    // The volume is gone from the node this gateway thought held it (deleted through another gateway).
    if (res.statusCode === 404) this.known.delete(volumeId);
  }

  /** Every node's volumes; all or nothing, like the cluster sandbox list. */
  private async listAll(): Promise<ListedVolume[]> {
    const lists = (await this.askAll('/volumes')).map((a) => {
      if ('unreachable' in a)
        throw new ListError(502, `volume list unavailable: node ${a.node.nodeId} unreachable`);
      if (a.status !== 200)
        throw new ListError(502, `volume list unavailable: node ${a.node.nodeId} answered ${a.status}`);
      const items = parseList(a.text);
      if (!items) throw new ListError(502, `volume list unavailable: node ${a.node.nodeId} answered no list`);
      return items;
    });
    return mergeVolumeLists(lists);
  }

  /** The node holding volume `id`: remembered, else the one node answering 200 to `GET /volumes/{id}`. */
  async locate(id: string): Promise<Node> {
    const hit = this.known.get(id);
    if (hit && performance.now() - hit.at < VOLUME_NODE_TTL_MS) return hit.node;
    const asked = await this.askAll(`/volumes/${encodeURIComponent(id)}`);
    const found = asked.find((a) => !('unreachable' in a) && a.status === 200);
    if (found) {
      this.known.delete(id);
      if (this.known.size >= VOLUME_NODES_MAX) this.known.delete(this.known.keys().next().value!);
      this.known.set(id, { node: found.node, at: performance.now() });
      return found.node;
    }
    const silent = asked.find((a) => 'unreachable' in a || a.status !== 404);
    if (silent)
      throw new ListError(502, `volume lookup unavailable: node ${silent.node.nodeId} did not answer`);
    throw notFound(id);
  }

  private async askAll(path: string): Promise<Asked[]> {
    return askAll(
      { agent: this.deps.agent, timeoutMs: this.deps.requestTimeoutMs },
      await this.deps.scheduler.listNodes(),
      'GET',
      path,
      { 'x-api-key': this.deps.apiKey },
    );
  }
}

function parseList(text: string): ListedVolume[] | undefined {
  try {
    return volumeItems(JSON.parse(text));
  } catch {
    return undefined;
  }
}
