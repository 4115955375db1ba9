// The part of a cluster list no node gives (docs/cluster.md#sandboxes-held-by-no-node): paused sandboxes whose
// only copy is in the shared repository, because their node was lost or drained. One node is asked for them, told
// which nodes the merge lists already (those list their own); it answers them paged and filtered as its own list.
import type { IncomingMessage } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Node } from '@aenv/protocol';
import { ListError, nodeItems, type ListedSandbox } from './cluster-list.js';
import { askHeaders, nodeMessage } from './node-fanout.js';

export const UNHELD_PATH = '/cluster/unheld-sandboxes';

export interface UnheldAsk {
  agent: Dispatcher;
  timeoutMs: number;
  /** The node asked. */
  node: Node;
  /** The nodes whose own lists are merged. */
  listedNodes: readonly string[];
  /** The query each node's list is asked with (`?…` or ''). */
  query: string;
}

/**
 * The sandboxes held by no node, as list entries. A node that has no such route (one older than the gateway)
 * answers 404: it knows of none. A node that cannot answer makes the list 502, as a node's own list does.
 */
export async function unheldItems(ask: UnheldAsk, req: IncomingMessage): Promise<ListedSandbox[]> {
  const { node } = ask;
  const body = JSON.stringify({ listedNodes: ask.listedNodes });
  const headers = askHeaders(req);
  headers['content-type'] = 'application/json';
  headers['content-length'] = String(Buffer.byteLength(body));
  let status: number;
  let text: string;
  try {
    const a = await ask.agent.request({
      origin: new URL(node.endpoint).origin,
      path: UNHELD_PATH + ask.query,
      method: 'POST',
      headers,
      body,
      headersTimeout: ask.timeoutMs,
      bodyTimeout: ask.timeoutMs,
    });
    status = a.statusCode;
    text = await a.body.text();
  } catch {
    throw new ListError(502, `cluster list unavailable: node ${node.nodeId} unreachable`);
  }
  if (status === 404) return [];
  if (status >= 400 && status < 500) throw new ListError(status, nodeMessage(text));
  if (status !== 200)
    throw new ListError(
      502,
      `cluster list unavailable: node ${node.nodeId} could not list the sandboxes held by no node (answered ${status})`,
    );
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new ListError(502, `cluster list unavailable: node ${node.nodeId} answered no list`);
  }
  return nodeItems(node.nodeId, doc);
}
