// Volumes through the gateway (docs/cluster.md#volumes-in-a-cluster): which requests are about volumes, and the
// pure decisions about them — where a create naming `volumeMounts` must go, how node lists merge. A volume
// lives on the node that created it, or on a directory several nodes share (then each of them lists it, under one
// id); the gateway finds its nodes by asking them (volume-locator.ts).
import { posix } from 'node:path';
import { isSandboxId } from '@aenv/protocol';
import { jsonObjectOf } from './json-body.js';

export type VolumeOp =
  /** `GET /volumes`: every node's list, merged. */
  | { kind: 'list' }
  /** `POST /volumes`: a node Schedule picks (after a cluster-wide name check). */
  | { kind: 'create' }
  /** `GET|DELETE /volumes/{id}`: the node that holds it. */
  | { kind: 'one'; volumeId: string }
  /** `/volumecontent/{id}/{dir,path,file}`: the node that holds it, after the gateway checked the volume's token. */
  | { kind: 'content'; volumeId: string };

const ONE_RE = /^\/volumes\/([^/]+)\/?$/;
const CONTENT_RE = /^\/volumecontent\/([^/?#]+)\/(?:dir|path|file)$/;

/** The volume request `method path` is, if any. `path` is the raw path (no query). */
export function volumeRoute(method: string, path: string): VolumeOp | undefined {
  if (path === '/volumes' || path === '/volumes/') {
    if (method === 'GET') return { kind: 'list' };
    if (method === 'POST') return { kind: 'create' };
    return undefined;
  }
  const one = ONE_RE.exec(path);
  if (one && (method === 'GET' || method === 'DELETE')) return { kind: 'one', volumeId: one[1]! };
  if (path.startsWith('/volumecontent/')) {
    // Anything that is not a well-formed content path reaches no node: the token check refuses it.
    const m = CONTENT_RE.exec(path);
    return { kind: 'content', volumeId: m ? m[1]! : '' };
  }
  return undefined;
}

/** Volume ids are canonical UUIDs (the node makes them with randomUUID); any other id names no volume. */
export const isVolumeId = isSandboxId;

export interface ListedVolume {
  volumeID: string;
  name: string;
  [k: string]: unknown;
}

/** A node's `GET /volumes` answer, checked: a list of objects with string `volumeID` and `name`. */
export function volumeItems(doc: unknown): ListedVolume[] | undefined {
  if (!Array.isArray(doc)) return undefined;
  const out: ListedVolume[] = [];
  for (const v of doc) {
    if (v === null || typeof v !== 'object') return undefined;
    const { volumeID, name } = v as { volumeID?: unknown; name?: unknown };
    if (typeof volumeID !== 'string' || typeof name !== 'string') return undefined;
    out.push(v as ListedVolume);
  }
  return out;
}

/** Every node's volumes as one list: deduplicated by volumeID (a shared volume, first kept), sorted by name then id. */
export function mergeVolumeLists(lists: readonly ListedVolume[][]): ListedVolume[] {
  const seen = new Map<string, ListedVolume>();
  for (const l of lists) for (const v of l) if (!seen.has(v.volumeID)) seen.set(v.volumeID, v);
  return [...seen.values()].sort((a, b) =>
    a.name !== b.name ? (a.name < b.name ? -1 : 1) : a.volumeID < b.volumeID ? -1 : 1,
  );
}

/**
 * The volume names a create's body mounts (`volumeMounts: [{name, path}]`), or undefined when it mounts none or
 * the field is malformed (the node it is then placed on gives the client its 400, as one node does).
 */
export function mountedVolumeNames(body: Buffer): string[] | undefined {
  const mounts = jsonObjectOf(body)?.volumeMounts;
  if (!Array.isArray(mounts) || mounts.length === 0) return undefined;
  const names: string[] = [];
  for (const m of mounts) {
    const name = m !== null && typeof m === 'object' ? (m as { name?: unknown }).name : undefined;
    if (typeof name !== 'string') return undefined;
    if (!names.includes(name)) names.push(name);
  }
  return names;
}

/**
 * The mount paths of a create's well-formed `volumeMounts` entries, as a node compares them (normalized, no
 * trailing slash): a snapshot's recorded mount at one of them is replaced by the request's (docs/volumes.md).
 */
export function mountedPaths(body: Buffer): Set<string> {
  const mounts = jsonObjectOf(body)?.volumeMounts;
  const out = new Set<string>();
  if (!Array.isArray(mounts)) return out;
  for (const m of mounts) {
    const path = m !== null && typeof m === 'object' ? (m as { path?: unknown }).path : undefined;
    if (typeof path === 'string' && path.startsWith('/')) out.add(normalMountPath(path));
  }
  return out;
}

/** An absolute mount path as a node keeps it: `//a/b/` is `/a/b` (a node refuses `.` and `..` segments). */
export function normalMountPath(path: string): string {
  return posix.normalize(path).replace(/\/+$/, '');
}

/** A volume a snapshot recorded as mounted (the node's `GET /templates/{id}` `volumeMounts`, docs/differences.md). */
export interface RecordedMount {
  volumeID: string;
  name: string;
  path: string;
}

/** The `volumeMounts` of a node's `GET /templates/{id}` answer (entries of another shape are dropped). */
export function recordedMounts(doc: unknown): RecordedMount[] {
  const mounts = (doc as { volumeMounts?: unknown } | null)?.volumeMounts;
  if (!Array.isArray(mounts)) return [];
  return mounts.filter(
    (m): m is RecordedMount =>
      m !== null &&
      typeof m === 'object' &&
      typeof (m as RecordedMount).volumeID === 'string' &&
      typeof (m as RecordedMount).name === 'string' &&
      typeof (m as RecordedMount).path === 'string',
  );
}

/**
 * Where a create mounting `names` (and a snapshot's `recorded` volumes) goes: the nodes holding them all (any of
 * them will do; undefined: nothing to place by), or why there is none.
 */
export type MountPlacement =
  { ok: true; nodeIds: string[] | undefined } | { ok: false; status: number; message: string };

/**
 * `holders`: for each node that answered, its volumes' names and ids. `unreachable`: nodes that did not answer
 * (a name not found may live there, so that is a 502, not a 404). One volume id on several nodes is one volume on
 * a directory they share (`[volume].storage = "shared_dir"`): a create may go to any of them. One name with
 * different ids on different nodes is two volumes the gateway cannot tell apart: 409. `recorded`: the volumes a
 * launched snapshot mounts again (by id; the request's entries at their paths already taken out); one no node has
 * any more places nothing (the launch's node answers its 400 naming it, as one node does).
 */
export function placeMounts(
  names: readonly string[],
  holders: ReadonlyMap<string, ReadonlyMap<string, string>>,
  unreachable: readonly string[],
  recorded: readonly RecordedMount[] = [],
): MountPlacement {
  let candidates: Set<string> | undefined;
  const at = new Map<string, string[]>();
  for (const name of names) {
    const nodes = [...holders].filter(([, vs]) => vs.has(name)).map(([id]) => id);
    if (nodes.length === 0) {
      if (unreachable.length > 0)
        return {
          ok: false,
          status: 502,
          message: `volume lookup unavailable: node ${unreachable[0]} unreachable, volume ${JSON.stringify(name)} may be there`,
        };
      return { ok: false, status: 404, message: `volume ${JSON.stringify(name)} not found` };
    }
    const ids = new Set(nodes.map((n) => holders.get(n)!.get(name)!));
    if (ids.size > 1)
      return {
        ok: false,
        status: 409,
        message: `volume name ${JSON.stringify(name)} is held by several nodes (${nodes.sort().join(', ')}) as different volumes; delete one of them`,
      };
    at.set(JSON.stringify(name), nodes.sort());
    candidates = new Set(candidates ? [...candidates].filter((n) => nodes.includes(n)) : nodes);
  }
  for (const m of recorded) {
    const nodes = [...holders].filter(([, vs]) => [...vs.values()].includes(m.volumeID)).map(([id]) => id);
    if (nodes.length === 0) {
      if (unreachable.length > 0)
        return {
          ok: false,
          status: 502,
          message: `volume lookup unavailable: node ${unreachable[0]} unreachable, volume ${JSON.stringify(m.name)} (the snapshot's, at ${m.path}) may be there`,
        };
      continue;
    }
    at.set(`${JSON.stringify(m.name)} (the snapshot's, at ${m.path})`, nodes.sort());
    candidates = new Set(candidates ? [...candidates].filter((n) => nodes.includes(n)) : nodes);
  }
  if (!candidates) return { ok: true, nodeIds: undefined };
  if (candidates.size === 0)
    return {
      ok: false,
      status: 409,
      message: `volumeMounts: the volumes live on different nodes (${[...at].map(([n, ids]) => `${n} on ${ids.join('+')}`).join(', ')}); a sandbox can mount only volumes of one node`,
    };
  return { ok: true, nodeIds: [...candidates].sort() };
}
