// One request to every node at once, each answer buffered (the merges and lookups of templates, snapshots and
// metrics). An answer that never came is `unreachable`, kept apart from a node's own error so a caller can
// answer 502 for a node that did not answer rather than a wrong 404.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Node } from '@aenv/protocol';
import { forwardedHeaders } from '@aenv/proxy';
import { ListError } from './cluster-list.js';

export type Asked =
  | { node: Node; status: number; headers: Record<string, string>; text: string }
  | { node: Node; unreachable: true };

export interface FanoutContext {
  agent: Dispatcher;
  timeoutMs: number;
}

type HeaderMap = Record<string, string | string[]>;

/** The client's headers for a bodiless request to a node (its API key included). */
export function askHeaders(req: IncomingMessage): HeaderMap {
  const headers = forwardedHeaders(req) as HeaderMap;
  delete headers['content-length'];
  delete headers['transfer-encoding'];
  return headers;
}

export async function askNode(
  ctx: FanoutContext,
  node: Node,
  method: string,
  path: string,
  headers: HeaderMap,
): Promise<Asked> {
  try {
    const a = await ctx.agent.request({
      origin: new URL(node.endpoint).origin,
      path,
      method: method as Dispatcher.HttpMethod,
      headers,
      headersTimeout: ctx.timeoutMs,
      bodyTimeout: ctx.timeoutMs,
    });
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(a.headers))
      if (typeof v === 'string') out[k] = v;
      else if (Array.isArray(v) && v.length) out[k] = v[0]!;
    return { node, status: a.statusCode, headers: out, text: await a.body.text() };
  } catch {
    return { node, unreachable: true };
  }
}

export function askAll(
  ctx: FanoutContext,
  nodes: readonly Node[],
  method: string,
  path: string,
  headers: HeaderMap,
): Promise<Asked[]> {
  return Promise.all(nodes.map((n) => askNode(ctx, n, method, path, headers)));
}

/**
 * Every node's JSON answer for a merge, all or nothing (as the cluster list): a node unreachable, answering 5xx
 * or no JSON makes it 502 naming the node; a node's 4xx (the client's fault, which every node says alike) is
 * the answer.
 */
export function allAnswers(what: string, asked: readonly Asked[]): { node: Node; doc: unknown }[] {
  return asked.map((a) => {
    if ('unreachable' in a)
      throw new ListError(502, `${what} unavailable: node ${a.node.nodeId} unreachable`);
    if (a.status >= 400 && a.status < 500) throw new ListError(a.status, nodeMessage(a.text));
    if (a.status !== 200)
      throw new ListError(502, `${what} unavailable: node ${a.node.nodeId} answered ${a.status}`);
    try {
      return { node: a.node, doc: JSON.parse(a.text) as unknown };
    } catch {
      throw new ListError(502, `${what} unavailable: node ${a.node.nodeId} answered no JSON`);
    }
  });
}

/** The `message` of a node's `{"code","message"}` error, else its text. */
export function nodeMessage(text: string): string {
  try {
    const m = (JSON.parse(text) as { message?: unknown } | null)?.message;
    if (typeof m === 'string') return m;
  } catch {
    // plain text
  }
  return text.slice(0, 500);
}

/** Writes a node's buffered answer as the gateway's own (its content type and next-page token kept). */
export function relayAnswer(res: ServerResponse, a: Extract<Asked, { status: number }>): void {
  const headers: Record<string, string> = { 'content-length': String(Buffer.byteLength(a.text)) };
  for (const k of ['content-type', 'x-next-token']) if (a.headers[k] !== undefined) headers[k] = a.headers[k];
  res.writeHead(a.status, headers).end(a.text);
}
