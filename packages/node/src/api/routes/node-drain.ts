import type { FastifyInstance } from 'fastify';
import type { NodeDrainProgress } from '@aenv/protocol';
import { ApiError } from '../errors.js';

export interface NodeDrainRouteDeps {
  nodeId: string;
  /** Why this node cannot drain (no shared repository), or undefined when it can. */
  unavailable?: string;
  /** Starts (or joins) the drain; resolves at once, the drain goes on in the background. */
  start: () => void;
  progress: () => NodeDrainProgress | undefined;
}

/**
 * `POST /nodes/{nodeID}/drain` (aenv's; docs/cluster.md#draining): the node stops taking sandboxes, heartbeats
 * LINGERING and hands its sandboxes over to the shared repository. 202 with the progress; repeating it is
 * harmless (the same drain's progress). There is no undrain: a drained node is restarted to take work again.
 */
export function registerNodeDrainRoute(app: FastifyInstance, deps: NodeDrainRouteDeps): void {
  app.post<{ Params: { nodeID: string } }>('/nodes/:nodeID/drain', async (req, reply) => {
    if (req.params.nodeID !== deps.nodeId) throw new ApiError(404, `node ${req.params.nodeID} not found`);
    const body: unknown = req.body;
    if (body !== undefined && body !== null) {
      if (typeof body !== 'object' || Array.isArray(body))
        throw new ApiError(400, 'the drain request takes no body (or {})');
      const unknown = Object.keys(body);
      if (unknown.length > 0) throw new ApiError(400, `unknown field "${unknown[0]}" in the drain request`);
    }
    if (deps.unavailable) throw new ApiError(400, deps.unavailable);
    deps.start();
    return reply.code(202).send(deps.progress());
  });
}
