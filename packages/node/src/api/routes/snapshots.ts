import type { FastifyInstance } from 'fastify';
import {
  isSandboxId,
  NEXT_TOKEN_HEADER,
  newSnapshotId,
  snapshotSchema,
  type SnapshotInfo,
} from '@aenv/protocol';
import type { Orchestrator } from '../../orchestrator/orchestrator.js';
import {
  isValidAlias,
  isRepositoryError,
  type SnapshotRecord,
  type SnapshotRepository,
} from '../../snapshot/index.js';
import { candidateNames } from '../../template/catalog.js';
import { ApiError } from '../errors.js';
import { paginate, parseLimit } from '../pagination.js';
import { parseBody } from '../parse-body.js';
import { refuseUnsupportedSnapshotFields } from '../unsupported-fields.js';

export interface SnapshotRouteDeps {
  orchestrator: Orchestrator;
  repository: SnapshotRepository;
}

export function snapshotInfo(r: SnapshotRecord): SnapshotInfo {
  return {
    snapshotID: r.id,
    names: r.alias ? [r.alias] : [],
    cpuCount: r.resources.cpuCount,
    memoryMB: r.resources.memoryMB,
    diskSizeMB: r.resources.diskSizeMB,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

/** `POST /sandboxes/{id}/snapshots`, `GET /snapshots`, `GET /snapshots/{id}` (docs/differences.md). */
export function registerSnapshotRoutes(app: FastifyInstance, deps: SnapshotRouteDeps): void {
  const { orchestrator: orch, repository: repo } = deps;

  app.post<{ Params: { id: string } }>('/sandboxes/:id/snapshots', async (req, reply) => {
    refuseUnsupportedSnapshotFields(req.body);
    const body = parseBody(snapshotSchema, req.body, 'snapshot request');
    const id = req.params.id;
    if (!isSandboxId(id)) throw new ApiError(404, `sandbox ${id} not found`);
    if (body.name !== undefined && !isValidAlias(body.name)) {
      throw new ApiError(400, `invalid snapshot alias: "${body.name}" must match [A-Za-z0-9_-]+`);
    }
    const sandbox = orch.get(id);
    const recordId = newSnapshotId();
    let created = false;
    try {
      // Its Server-Timing names the phases `capture` (the sandbox held) and `publish` (api/server-timing.ts).
      await orch.snapshot(id, {
        recordId,
        createRecord: async () => {
          await repo.create({
            id: recordId,
            ...(body.name ? { alias: body.name } : {}),
            source: { kind: 'sandbox', sourceSandboxId: id },
            resources: sandbox.resources,
          });
          created = true;
        },
      });
    } catch (e) {
      if (created) await repo.delete(recordId).catch(() => {});
      // A name another record holds is this route's 400 (HTTP_ROUTE_QUIRKS), not a 409.
      throw e;
    }
    return reply.code(201).send(snapshotInfo(await repo.get(recordId)));
  });

  app.get('/snapshots', async (req, reply) => {
    const q = req.query as Record<string, unknown>;
    const sandboxId = typeof q.sandboxID === 'string' && q.sandboxID ? q.sandboxID : undefined;
    let records = await repo.list({ kind: 'sandbox', committed: true, ...(sandboxId ? { sandboxId } : {}) });
    if (typeof q.name === 'string' && q.name) {
      const names = new Set(candidateNames(q.name));
      records = records.filter((r) => names.has(r.id) || (r.alias !== undefined && names.has(r.alias)));
    }
    const page = paginate(
      records,
      parseLimit(q.limit),
      typeof q.nextToken === 'string' && q.nextToken ? q.nextToken : undefined,
    );
    if (page.nextToken) void reply.header(NEXT_TOKEN_HEADER, page.nextToken);
    return page.items.map(snapshotInfo);
  });

  app.get<{ Params: { id: string } }>('/snapshots/:id', async (req) => {
    const ref = req.params.id;
    let r: SnapshotRecord | undefined;
    try {
      r = await repo.find(ref);
    } catch (e) {
      if (!isRepositoryError(e, 'InvalidRequest')) throw e;
    }
    if (!r || r.source.kind !== 'sandbox' || !r.committed)
      throw new ApiError(404, `snapshot '${ref}' not found`);
    return snapshotInfo(r);
  });
}
