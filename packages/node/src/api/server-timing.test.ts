import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { parseServerTiming, phase } from '../util/phases.js';
import { registerServerTiming, TIMED_ROUTES } from './server-timing.js';

function app(routes: readonly string[] = TIMED_ROUTES) {
  const a = Fastify();
  registerServerTiming(a);
  for (const r of routes) {
    const [method, url] = r.split(' ') as [string, string];
    a.route({
      method: method as 'POST',
      url,
      handler: async () => {
        await phase('slot', async () => {});
        await phase('runtime', async () => {});
        return { ok: true };
      },
    });
  }
  a.get('/sandboxes', async () => {
    await phase('slot', async () => {});
    return [];
  });
  return a;
}

describe('Server-Timing on lifecycle answers', () => {
  it('carries the phases recorded below the route, then the total; other routes carry none', async () => {
    const a = app();
    const created = await a.inject({ method: 'POST', url: '/v2/sandboxes', payload: {} });
    expect(created.statusCode).toBe(200);
    const phases = parseServerTiming(String(created.headers['server-timing']));
    expect(phases.map((p) => p.name)).toEqual(['slot', 'runtime', 'total']);
    expect(phases.every((p) => Number.isFinite(p.ms) && p.ms >= 0)).toBe(true);
    const killed = await a.inject({ method: 'DELETE', url: '/sandboxes/abc' });
    expect(parseServerTiming(String(killed.headers['server-timing'])).map((p) => p.name)).toContain(
      'runtime',
    );
    const listed = await a.inject({ method: 'GET', url: '/sandboxes' });
    expect(listed.headers['server-timing']).toBeUndefined();
    await a.close();
  });

  it('answers the operation without the header when a phase name cannot be sent', async () => {
    const a = Fastify();
    registerServerTiming(a);
    for (const r of TIMED_ROUTES) {
      const [method, url] = r.split(' ') as [string, string];
      a.route({
        method: method as 'POST',
        url,
        handler: async () => {
          await phase('not a token', async () => {});
          return { ok: true };
        },
      });
    }
    const r = await a.inject({ method: 'POST', url: '/sandboxes', payload: {} });
    expect([r.statusCode, r.json()]).toEqual([200, { ok: true }]);
    expect(r.headers['server-timing']).toBeUndefined();
    await a.close();
  });

  it('fails at startup when a timed route was never registered (a rename cannot drop its timing)', async () => {
    const a = app(TIMED_ROUTES.filter((r) => r !== 'POST /sandboxes/:id/pause'));
    await expect(a.ready()).rejects.toThrow(/POST \/sandboxes\/:id\/pause/);
  });
});
