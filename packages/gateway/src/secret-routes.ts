// `/secrets` through the gateway (docs/cluster.md#secrets): nodes that share a repository keep the same secrets
// (the repository holds them sealed), so any node serves a call. A write goes to one node, which stores it in the
// repository, and every other node is then told to copy it, so that it is served and filled in at egress everywhere
// when the answer arrives. Without a shared repository each node has its own secrets (docs/cluster.md says so).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EventsContext } from './cluster-events.js';
import { writeThenSync } from './cluster-events.js';
import { readBody, send } from './cluster-events-serve.js';

export type SecretsRoute =
  { kind: 'secrets'; write: boolean } | { kind: 'reject'; status: number; message: string; dataPlane: false };

/** An id (`sec_` + 24 hex) or a name (the node lowercases names; `sec_` starts ids only). */
const REF = /^(?:sec_[0-9a-f]{24}|(?![sS][eE][cC]_)[A-Za-z0-9][A-Za-z0-9_-]{0,127})$/;

/** The route of a `/secrets` call; undefined for other paths (and methods the node does not serve there). */
export function secretsRoute(method: string, path: string): SecretsRoute | undefined {
  if (path === '/secrets' || path === '/secrets/') {
    if (method === 'GET') return { kind: 'secrets', write: false };
    if (method === 'POST') return { kind: 'secrets', write: true };
    return undefined;
  }
  const m = /^\/secrets\/([^/]*)\/?$/.exec(path);
  if (!m) return undefined;
  if (method !== 'GET' && method !== 'POST' && method !== 'DELETE') return undefined;
  let ref: string;
  try {
    ref = decodeURIComponent(m[1]!);
  } catch {
    ref = '';
  }
  if (!REF.test(ref))
    return {
      kind: 'reject',
      status: 400,
      message: `invalid secret id or name ${JSON.stringify(ref.slice(0, 140))}`,
      dataPlane: false,
    };
  return { kind: 'secrets', write: method !== 'GET' };
}

/** A write: to Schedule's pick, then every other node copies the repository (its `GET /secrets`). */
export async function secretWrite(
  ctx: EventsContext,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const a = await writeThenSync(ctx, req, req.url ?? '/secrets', await readBody(req), '/secrets?limit=1');
  send(res, a.status, a.body, a.headers['content-type']);
}
