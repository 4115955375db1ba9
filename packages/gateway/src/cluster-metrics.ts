// `GET /sandboxes/metrics?sandbox_ids=…` across the cluster (docs/cluster.md#how-the-gateway-routes): each node
// answers for the sandboxes it holds, so every node is asked with the client's query and the `sandboxes` maps are
// joined. All or nothing, as the cluster list: a node that did not answer is a 502, never a sandbox left out.
import type { IncomingMessage } from 'node:http';
import type { Node } from '@aenv/protocol';
import { ListError } from './cluster-list.js';
import { allAnswers, askAll, askHeaders, type FanoutContext } from './node-fanout.js';

interface Metric {
  timestamp?: unknown;
  [k: string]: unknown;
}

/** The nodes' `{sandboxes: {id: metric}}` answers as one; a sandbox two nodes report (it moved) keeps the later sample. */
export function mergeSandboxMetrics(answers: readonly { node: Node; doc: unknown }[]): {
  sandboxes: Record<string, Metric>;
} {
  const out: Record<string, Metric> = {};
  for (const { node, doc } of answers) {
    const map =
      doc !== null && typeof doc === 'object' ? (doc as { sandboxes?: unknown }).sandboxes : undefined;
    if (map === null || typeof map !== 'object' || Array.isArray(map))
      throw new ListError(502, `sandbox metrics unavailable: node ${node.nodeId} answered no metrics`);
    for (const [id, m] of Object.entries(map as Record<string, Metric>)) {
      const have = out[id];
      if (!have || String(m?.timestamp ?? '') > String(have.timestamp ?? '')) out[id] = m;
    }
  }
  return { sandboxes: out };
}

export async function clusterSandboxMetrics(
  ctx: FanoutContext & { nodes(): Promise<Node[]> },
  req: IncomingMessage,
): Promise<{ sandboxes: Record<string, Metric> }> {
  const asked = await askAll(ctx, await ctx.nodes(), 'GET', req.url ?? '/', askHeaders(req));
  return mergeSandboxMetrics(allAnswers('sandbox metrics', asked));
}
