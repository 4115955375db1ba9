// `GET /teams`: a node has one local team, the holder of its API key (docs/differences.md).
import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { TeamResponse } from '@aenv/protocol';

export const LOCAL_TEAM_NAME = 'local';

/** A stable UUID-shaped id of the API key's team (sha256 of the key; the key cannot be recovered from it). */
export function localTeamId(apiKey: string): string {
  const h = createHash('sha256').update(`aenv-team:${apiKey}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

export function registerTeamRoutes(app: FastifyInstance, deps: { apiKey: string }): void {
  const team: TeamResponse = {
    teamID: localTeamId(deps.apiKey),
    name: LOCAL_TEAM_NAME,
    // The caller presented this very key to get here.
    apiKey: deps.apiKey,
    isDefault: true,
  };
  app.get('/teams', async () => [team]);
}
