// `Server-Timing` on the answers of lifecycle operations: the phases code below the API recorded with
// util/phases.ts, then the request's total (docs/benchmarks.md#phases). Register before the routes, after the other handler wrappers.
import type { FastifyInstance, FastifyRequest, RouteHandlerMethod } from 'fastify';
import { performance } from 'node:perf_hooks';
import { PhaseRecorder, recordPhases, serverTimingHeader } from '../util/phases.js';

/** The routes whose answers carry their phases: every operation that makes, moves or ends a sandbox. */
export const TIMED_ROUTES = [
  'POST /sandboxes',
  'POST /v2/sandboxes',
  'POST /sandboxes-cold',
  'POST /sandboxes/:id/connect',
  'POST /v2/sandboxes/:id/connect',
  'POST /sandboxes/:id/resume',
  'POST /sandboxes/:id/pause',
  'POST /sandboxes/:id/fork',
  'POST /sandboxes/:id/snapshots',
  'DELETE /sandboxes/:id',
] as const;

export function registerServerTiming(app: FastifyInstance): void {
  const recorders = new WeakMap<FastifyRequest, PhaseRecorder>();
  const seen = new Set<string>();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      const name = `${method} ${route.url}`;
      if (!(TIMED_ROUTES as readonly string[]).includes(name)) continue;
      seen.add(name);
      const handler = route.handler as RouteHandlerMethod;
      route.handler = function (this: FastifyInstance, req, reply) {
        const recorder = new PhaseRecorder();
        recorders.set(req, recorder);
        return recordPhases(recorder, () => handler.call(this, req, reply));
      } as RouteHandlerMethod;
      const onSend = route.onSend === undefined ? [] : [route.onSend].flat();
      route.onSend = [
        ...onSend,
        async (req: FastifyRequest, reply, payload: unknown) => {
          const recorder = recorders.get(req);
          if (!recorder) return payload;
          try {
            void reply.header(
              'server-timing',
              serverTimingHeader(recorder, performance.now() - recorder.startedAt),
            );
          } catch (err) {
            // A diagnostic header never costs the operation its answer.
            req.log.warn({ err }, 'Server-Timing header not sent');
          }
          return payload;
        },
      ];
    }
  });
  app.addHook('onReady', async () => {
    const missing = TIMED_ROUTES.filter((n) => !seen.has(n));
    if (missing.length) throw new Error(`server timing: routes not registered: ${missing.join(', ')}`);
  });
}
