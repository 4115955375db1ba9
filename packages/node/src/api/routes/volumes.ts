// E2B's volumes API (`/volumes`, the e2b SDK's `Volume.create/list/getInfo/destroy`): named persistent storage
// of this node (docs/volumes.md). One API key per node: every volume belongs to the key's one team.
import type { FastifyInstance } from 'fastify';
import type { VolumeService } from '../../volume/service.js';
import { ApiError } from '../errors.js';

export function registerVolumeRoutes(app: FastifyInstance, deps: { volumes: VolumeService }): void {
  const { volumes } = deps;

  app.get('/volumes', async () => volumes.list());

  app.post('/volumes', async (req, reply) => {
    const body = req.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      throw new ApiError(400, 'invalid volume request: a JSON body {"name": "..."} is required');
    const unknown = Object.keys(body).filter((k) => k !== 'name');
    if (unknown.length)
      throw new ApiError(400, `invalid volume request: unknown field ${JSON.stringify(unknown[0])}`);
    const created = await volumes.create((body as { name?: unknown }).name);
    return reply.code(201).send(created);
  });

  app.get<{ Params: { id: string } }>('/volumes/:id', async (req) => volumes.get(req.params.id));

  app.delete<{ Params: { id: string } }>('/volumes/:id', async (req, reply) => {
    await volumes.delete(req.params.id);
    return reply.code(204).send();
  });
}
