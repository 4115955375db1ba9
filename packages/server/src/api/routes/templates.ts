// Template routes of the E2B build API (reference §2.2–2.6, e2b-protocol §2.4).
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { ApiError } from '../errors.js';
import { paginate, parseLimit } from '../pagination.js';
import { parseBody } from '../schemas.js';
import {
  isRepositoryError,
  isValidAlias,
  type SnapshotRecord,
  type SnapshotRepository,
} from '../../snapshot/index.js';
import type { TemplateBuilder } from '../../template/builder.js';
import { parseLogLevel, type BuildLogStore } from '../../template/build-log.js';
import { isFilesHash, type TemplateFileStore } from '../../template/file-store.js';

export interface TemplateRouteDeps {
  repository: SnapshotRepository;
  builder: TemplateBuilder;
  files: TemplateFileStore;
  logs: BuildLogStore;
  /** How many sandboxes on this node (running or paused) were started from the template or snapshot. */
  sandboxesUsing(templateId: string): number;
  /** `[machine]` defaults and `[runtime].default_disk_size_mb`. */
  defaults: { cpuCount: number; memoryMB: number; diskSizeMB: number };
  /** Reported for records that carry no envd version. */
  envdVersion: string;
  /** Base URL put into upload links; the request's own scheme and Host when unset. */
  publicUrl?: string;
  /** After a delete (e.g. to drop the node's unpacked layers of the template). */
  onDeleted?: (id: string) => Promise<void>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const MAX_NAME = 128;

const requestV3Schema = z
  .object({
    name: z.string().optional(),
    alias: z.string().optional(),
    tags: z.array(z.string()).nullable().optional(),
    cpuCount: z.number().int().optional(),
    memoryMB: z.number().int().optional(),
    minFreeDiskMb: z.number().int().optional(),
    teamID: z.string().optional(),
  })
  .passthrough();

type BuildStatus = 'waiting' | 'building' | 'ready' | 'error';

function buildStatusOf(r: SnapshotRecord): BuildStatus {
  return r.source.kind === 'template' ? r.source.build.status : 'ready';
}

function namesOf(r: SnapshotRecord): string[] {
  return [r.alias ?? r.id];
}

/** A lookup argument that is not an id and not a valid alias names nothing (400, as the reference answers it). */
async function findRecord(repo: SnapshotRepository, idOrAlias: string): Promise<SnapshotRecord | undefined> {
  if (!UUID.test(idOrAlias) && !isValidAlias(idOrAlias)) {
    throw new ApiError(400, `invalid template id or alias ${JSON.stringify(idOrAlias)}`);
  }
  const r = await repo.find(idOrAlias);
  return r && r.source.kind !== 'paused' ? r : undefined;
}

function parseOffset(raw: unknown): number {
  if (raw === undefined || raw === '') return 0;
  const n = typeof raw === 'string' && /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n))
    throw new ApiError(400, `invalid logsOffset "${String(raw)}": must be a non-negative integer`);
  return n;
}

export function registerTemplateRoutes(app: FastifyInstance, deps: TemplateRouteDeps): void {
  const { repository: repo, builder } = deps;

  const envdVersionOf = (r: SnapshotRecord) =>
    r.committed?.runtimeVersions.envd ?? (r.committed ? deps.envdVersion : 'unknown');

  const templateView = (r: SnapshotRecord) => ({
    templateID: r.id,
    buildID: r.id,
    cpuCount: r.resources.cpuCount,
    memoryMB: r.resources.memoryMB,
    diskSizeMB: r.resources.diskSizeMB,
    public: true,
    names: namesOf(r),
    aliases: r.alias ? [r.alias] : [],
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
    createdBy: null,
    lastSpawnedAt: null,
    spawnCount: 0,
    buildCount: 1,
    envdVersion: envdVersionOf(r),
    buildStatus: buildStatusOf(r),
  });

  const buildView = (r: SnapshotRecord) => {
    const finishedAt =
      r.source.kind === 'template' ? r.source.build.finishedAt : r.committed ? r.updatedAt : undefined;
    return {
      buildID: r.id,
      status: buildStatusOf(r),
      createdAt: r.createdAt,
      updatedAt: r.updatedAt,
      ...(finishedAt ? { finishedAt } : {}),
      cpuCount: r.resources.cpuCount,
      memoryMB: r.resources.memoryMB,
      diskSizeMB: r.resources.diskSizeMB,
      ...(r.committed ? { envdVersion: envdVersionOf(r) } : {}),
    };
  };

  const templates = async () => repo.list({ kind: 'template' });

  app.post('/v3/templates', async (req, reply) => {
    const body = parseBody(requestV3Schema, req.body, 'template build request');
    const name = (body.name ?? body.alias ?? '').trim();
    if (!name) throw new ApiError(400, 'name is required');
    if (name.includes(':')) throw new ApiError(400, 'template name tags are not supported yet');
    if (body.tags && body.tags.length > 0) throw new ApiError(400, 'template tags are not supported yet');
    if (name.length > MAX_NAME || !isValidAlias(name)) {
      throw new ApiError(
        400,
        `invalid template name ${JSON.stringify(name)}: must be 1-${MAX_NAME} characters of A-Z, a-z, 0-9, '_' and '-'`,
      );
    }
    const cpuCount = body.cpuCount ?? deps.defaults.cpuCount;
    const memoryMB = body.memoryMB ?? deps.defaults.memoryMB;
    if (cpuCount <= 0) throw new ApiError(400, 'cpuCount must be greater than 0');
    if (memoryMB < 128) throw new ApiError(400, 'memoryMB must be at least 128');
    let record: SnapshotRecord;
    try {
      record = await repo.create({
        alias: name,
        source: { kind: 'template', build: { status: 'waiting' } },
        resources: { cpuCount, memoryMB, diskSizeMB: deps.defaults.diskSizeMB },
      });
    } catch (e) {
      if (isRepositoryError(e)) throw new ApiError(e.publishPathStatus, e.message);
      throw e;
    }
    return reply.code(202).send({
      templateID: record.id,
      buildID: record.id,
      public: true,
      names: [name],
      tags: [],
      aliases: [name],
    });
  });

  app.post('/v2/templates/:templateID/builds/:buildID', async (req, reply) => {
    const { templateID, buildID } = req.params as { templateID: string; buildID: string };
    if (templateID !== buildID) {
      throw new ApiError(400, 'templateID and buildID must match in AgentENV compatibility mode');
    }
    if (!UUID.test(buildID))
      throw new ApiError(400, `invalid buildID ${JSON.stringify(buildID)}: must be a UUID`);
    const record = await repo.find(templateID);
    if (!record || record.source.kind === 'paused')
      throw new ApiError(404, `template ${templateID} not found`);
    await builder.start(record.id, req.body);
    // openapi-fetch parses any 2xx body without Content-Length: 0 as JSON and crashes on an empty one.
    return reply.code(202).header('content-length', '0').send();
  });

  app.get('/templates/:templateID/builds/:buildID/status', async (req) => {
    const { templateID, buildID } = req.params as { templateID: string; buildID: string };
    const q = req.query as Record<string, unknown>;
    const record = await findRecord(repo, templateID);
    if (!record) throw new ApiError(404, `template ${templateID} not found`);
    if (buildID !== record.id)
      throw new ApiError(404, `build ${buildID} not found for template ${templateID}`);
    let level;
    try {
      level = parseLogLevel(q.level);
    } catch (e) {
      throw new ApiError(400, (e as Error).message);
    }
    return builder.status(record, {
      offset: parseOffset(q.logsOffset),
      limit: parseLimit(q.limit) ?? 100,
      ...(level ? { level } : {}),
    });
  });

  app.get('/v2/templates', async (req, reply) => {
    const q = req.query as Record<string, unknown>;
    const items = (await templates()).map((r) => ({ id: r.id, createdAt: r.createdAt, r }));
    const page = paginate(
      items,
      parseLimit(q.limit),
      typeof q.nextToken === 'string' && q.nextToken ? q.nextToken : undefined,
    );
    if (page.nextToken) void reply.header('x-next-token', page.nextToken);
    return page.items.map((i) => templateView(i.r));
  });

  app.get('/templates', async () => (await templates()).map(templateView));

  app.get('/templates/:templateID', async (req) => {
    const { templateID } = req.params as { templateID: string };
    const q = req.query as Record<string, unknown>;
    const record = await findRecord(repo, templateID);
    if (!record) throw new ApiError(404, `template ${templateID} not found`);
    const limit = parseLimit(q.limit);
    const builds =
      typeof q.nextToken === 'string' && q.nextToken ? [] : [buildView(record)].slice(0, limit ?? 1);
    return {
      templateID: record.id,
      public: true,
      names: namesOf(record),
      aliases: record.alias ? [record.alias] : [],
      createdAt: record.createdAt,
      updatedAt: record.updatedAt,
      lastSpawnedAt: null,
      spawnCount: 0,
      builds,
    };
  });

  app.delete('/templates/:templateID', async (req, reply) => {
    const { templateID } = req.params as { templateID: string };
    const record = await findRecord(repo, templateID);
    // E2B answers 404 for a template or snapshot that is not there (the SDK's deleteSnapshot then returns false).
    if (!record) throw new ApiError(404, `template '${templateID}' not found`);
    const using = deps.sandboxesUsing(record.id);
    if (using > 0) {
      throw new ApiError(
        409,
        `template ${templateID} is used by ${using} sandbox${using === 1 ? '' : 'es'} on this node; kill ${using === 1 ? 'it' : 'them'} first`,
      );
    }
    await builder.cancel(record.id, 'the template was deleted during its build');
    await repo.delete(record.id);
    await deps.logs.remove(record.id);
    await deps.onDeleted?.(record.id);
    return reply.code(204).send();
  });

  app.get('/templates/aliases/:alias', async (req) => {
    const { alias } = req.params as { alias: string };
    if (!isValidAlias(alias)) {
      throw new ApiError(
        400,
        `invalid template alias ${JSON.stringify(alias)}: must be 1-255 characters of A-Z, a-z, 0-9, '_' and '-'`,
      );
    }
    const record = await repo.find(alias);
    if (!record || record.source.kind === 'paused' || record.alias !== alias) {
      throw new ApiError(404, `template alias not found: ${alias}`);
    }
    return { templateID: record.id, public: false };
  });

  app.get('/templates/:templateID/files/:hash', async (req: FastifyRequest, reply) => {
    const { templateID, hash } = req.params as { templateID: string; hash: string };
    if (!isFilesHash(hash))
      throw new ApiError(
        400,
        `invalid files hash ${JSON.stringify(hash)}: must be 64 lowercase hex characters`,
      );
    const record = await findRecord(repo, templateID);
    if (!record || record.source.kind !== 'template')
      throw new ApiError(404, `template ${templateID} not found`);
    if (deps.files.hasSync(hash)) return reply.code(201).send({ present: true });
    const base = (deps.publicUrl ?? `${req.protocol}://${req.headers.host ?? req.hostname}`).replace(
      /\/+$/,
      '',
    );
    const token = deps.files.uploadToken(record.id, hash);
    return reply.code(201).send({
      present: false,
      url: `${base}/templates/${encodeURIComponent(record.id)}/files/${hash}/upload?token=${token}`,
    });
  });
}
