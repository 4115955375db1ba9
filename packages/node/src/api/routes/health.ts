import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';

/** `GET /health` (204) and `GET /metrics` (Prometheus text); both open, docs/differences.md. */
export function registerHealthRoutes(app: FastifyInstance, registry: Registry): void {
  app.get('/health', async (_req, reply) => reply.code(204).send());
  app.get('/metrics', async (_req, reply) => {
    const body = await registry.metrics();
    return reply.code(200).header('content-type', registry.contentType).send(body);
  });
}
