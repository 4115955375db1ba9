// Template routes of the E2B build API (docs/templates.md#api, docs/differences.md).
import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  isBuildId,
  isCanonicalUuid,
  assignTemplateTagsSchema,
  deleteTemplateTagsSchema,
  NEXT_TOKEN_HEADER,
  templateBuildRequestV3Schema,
  templateUpdateSchema,
  type TemplateBuild,
  type TemplateBuildStatus,
  type TemplateResponse,
} from '@aenv/protocol';
import { ApiError } from '../errors.js';
import { paginate, parseLimit } from '../pagination.js';
import { parseBody } from '../parse-body.js';
import {
  DEFAULT_TAG,
  isValidAlias,
  isValidTag,
  MAX_TAGS,
  nowTimestamp,
  type SnapshotRecord,
  type SnapshotRepository,
} from '../../snapshot/index.js';
import { hasTag, parseTemplateRef } from '../../template/catalog.js';
import type { TemplateBuilder } from '../../template/builder.js';
import { parseLogLevel, type BuildLogStore } from '../../template/build-log.js';
import { isFilesHash, type TemplateFileStore } from '../../template/file-store.js';
import type { VolumeMountRecord } from '../../volume/types.js';

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
  /** The node's one team (`GET /teams`): a `teamID` query naming another is refused. */
  teamId: string;
  /**
   * The volumes a capture's `committed.extra` records as mounted (a snapshot of a sandbox that mounted volumes,
   * docs/volumes.md): shown by `GET /templates/{id}` so that a gateway can place a launch of it on their node.
   */
  volumeMountsOf?: (extra: unknown) => readonly VolumeMountRecord[] | undefined;
}

/** A caller's string in a message: quoted, and cut to 80 characters. */
const shown = (s: string) => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s);

const MAX_NAME = 128;

function buildStatusOf(r: SnapshotRecord): TemplateBuildStatus {
  return r.source.kind === 'template' ? r.source.build.status : 'ready';
}

function namesOf(r: SnapshotRecord): string[] {
  return [r.alias ?? r.id];
}

/** `default` first, then the record's own tags in the order they were assigned. */
function tagsOf(r: SnapshotRecord): { tag: string; createdAt: string }[] {
  return [{ tag: DEFAULT_TAG, createdAt: r.createdAt }, ...(r.tags ?? [])];
}

/** Validates requested tags (each a Docker-style tag, at most MAX_TAGS); returns them distinct, in order. */
function requestedTags(tags: readonly string[]): string[] {
  for (const t of tags) {
    if (!isValidTag(t)) {
      throw new ApiError(
        400,
        `invalid tag ${shown(t)}: must be 1-128 characters of A-Z, a-z, 0-9, '_', '.' and '-', not starting with '.' or '-'`,
      );
    }
  }
  const distinct = [...new Set(tags)];
  if (distinct.length > MAX_TAGS) throw new ApiError(400, `at most ${MAX_TAGS} tags per template`);
  return distinct;
}

/** A template named by `name` (alias or id; `ns/` dropped), or 404. */
async function templateByName(repo: SnapshotRepository, name: string): Promise<SnapshotRecord> {
  const record = await findRecord(repo, name);
  if (!record || record.source.kind !== 'template')
    throw new ApiError(404, `template ${shown(name)} not found`);
  return record;
}

/** A lookup argument that is not an id and not a valid alias names nothing (400, as the reference answers it). */
async function findRecord(repo: SnapshotRepository, idOrAlias: string): Promise<SnapshotRecord | undefined> {
  if (!isCanonicalUuid(idOrAlias) && !isValidAlias(idOrAlias)) {
    throw new ApiError(400, `invalid template id or alias ${shown(idOrAlias)}`);
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

  const templateView = (r: SnapshotRecord): TemplateResponse => ({
    templateID: r.id,
    buildID: r.id,
    cpuCount: r.resources.cpuCount,
    memoryMB: r.resources.memoryMB,
    diskSizeMB: r.resources.diskSizeMB,
    public: r.public ?? true,
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

  const buildView = (r: SnapshotRecord): TemplateBuild => {
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

  /** `teamID` (deprecated query of the list routes): only the node's own team has templates. */
  const checkTeam = (q: Record<string, unknown>) => {
    if (q.teamID !== undefined && q.teamID !== '' && q.teamID !== deps.teamId) {
      throw new ApiError(403, `team ${shown(String(q.teamID))} is not this node's team (see GET /teams)`);
    }
  };

  app.post('/v3/templates', async (req, reply) => {
    const body = parseBody(templateBuildRequestV3Schema, req.body, 'template build request');
    const full = (body.name ?? body.alias ?? '').trim();
    if (!full) throw new ApiError(400, 'name is required');
    // `name:tag` is the same as `name` with `tag` in `tags`.
    const colon = full.indexOf(':');
    const name = colon >= 0 ? full.slice(0, colon) : full;
    const tags = requestedTags([...(colon >= 0 ? [full.slice(colon + 1)] : []), ...(body.tags ?? [])]).filter(
      (t) => t !== DEFAULT_TAG,
    );
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
    const now = nowTimestamp();
    // A name another record holds is this route's 400 (HTTP_ROUTE_QUIRKS), not a 409.
    const record = await repo.create({
      alias: name,
      ...(tags.length ? { tags: tags.map((tag) => ({ tag, createdAt: now })) } : {}),
      source: { kind: 'template', build: { status: 'waiting' } },
      resources: { cpuCount, memoryMB, diskSizeMB: deps.defaults.diskSizeMB },
    });
    return reply.code(202).send({
      templateID: record.id,
      buildID: record.id,
      public: true,
      names: [name],
      tags: tags.length ? tags : [DEFAULT_TAG],
      aliases: [name],
    });
  });

  app.post('/v2/templates/:templateID/builds/:buildID', async (req, reply) => {
    const { templateID, buildID } = req.params as { templateID: string; buildID: string };
    if (templateID !== buildID) {
      throw new ApiError(400, 'templateID and buildID must match in AgentENV compatibility mode');
    }
    if (!isBuildId(buildID))
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
    const level = parseLogLevel(q.level);
    return builder.status(record, {
      offset: parseOffset(q.logsOffset),
      limit: parseLimit(q.limit) ?? 100,
      ...(level ? { level } : {}),
    });
  });

  app.get('/v2/templates', async (req, reply) => {
    const q = req.query as Record<string, unknown>;
    checkTeam(q);
    const items = (await templates()).map((r) => ({ id: r.id, createdAt: r.createdAt, r }));
    const page = paginate(
      items,
      parseLimit(q.limit),
      typeof q.nextToken === 'string' && q.nextToken ? q.nextToken : undefined,
    );
    if (page.nextToken) void reply.header(NEXT_TOKEN_HEADER, page.nextToken);
    return page.items.map((i) => templateView(i.r));
  });

  app.get('/templates', async (req) => {
    checkTeam(req.query as Record<string, unknown>);
    return (await templates()).map(templateView);
  });

  app.get('/templates/:templateID', async (req) => {
    const { templateID } = req.params as { templateID: string };
    const q = req.query as Record<string, unknown>;
    const record = await findRecord(repo, templateID);
    if (!record) throw new ApiError(404, `template ${templateID} not found`);
    const limit = parseLimit(q.limit);
    const builds =
      typeof q.nextToken === 'string' && q.nextToken ? [] : [buildView(record)].slice(0, limit ?? 1);
    // aenv's extension (docs/differences.md): the volumes a launch of this snapshot mounts again.
    const mounts = record.committed ? deps.volumeMountsOf?.(record.committed.extra) : undefined;
    return {
      templateID: record.id,
      public: record.public ?? true,
      names: namesOf(record),
      aliases: record.alias ? [record.alias] : [],
      createdAt: record.createdAt,
      updatedAt: record.updatedAt,
      lastSpawnedAt: null,
      spawnCount: 0,
      builds,
      ...(mounts?.length
        ? { volumeMounts: mounts.map((m) => ({ volumeID: m.volumeId, name: m.name, path: m.path })) }
        : {}),
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
    const { alias: ref } = req.params as { alias: string };
    // `name:tag` exists when `name` does and carries the tag.
    const { name: alias, tag } =
      ref.includes(':') && !ref.includes('/') ? parseTemplateRef(ref) : { name: ref };
    if (tag !== undefined && !isValidTag(tag)) {
      throw new ApiError(400, `invalid tag ${shown(tag)} in template alias ${shown(ref)}`);
    }
    if (!isValidAlias(alias)) {
      throw new ApiError(
        400,
        `invalid template alias ${JSON.stringify(alias)}: must be 1-255 characters of A-Z, a-z, 0-9, '_' and '-'`,
      );
    }
    const record = await repo.find(alias);
    if (!record || record.source.kind === 'paused' || record.alias !== alias || !hasTag(record, tag)) {
      throw new ApiError(404, `template alias not found: ${ref}`);
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

  // ---- tags (docs/templates.md): every template has `default`; others are assigned and removed here ----

  app.get('/templates/:templateID/tags', async (req) => {
    const { templateID } = req.params as { templateID: string };
    const record = await templateByName(repo, templateID);
    return tagsOf(record).map((t) => ({ tag: t.tag, buildID: record.id, createdAt: t.createdAt }));
  });

  app.post('/templates/tags', async (req, reply) => {
    const body = parseBody(assignTemplateTagsSchema, req.body, 'tag request');
    const { name, tag } = parseTemplateRef(body.target);
    if (body.target.includes('/'))
      throw new ApiError(400, `invalid target ${shown(body.target)}: use name:tag`);
    const tags = requestedTags(body.tags);
    const record = await templateByName(repo, name);
    if (!hasTag(record, tag))
      throw new ApiError(404, `tag ${shown(tag ?? '')} not found for template ${shown(name)}`);
    const now = nowTimestamp();
    await repo.update(record.id, (r) => {
      const have = new Set(tagsOf(r).map((t) => t.tag));
      const added = tags.filter((t) => !have.has(t)).map((t) => ({ tag: t, createdAt: now }));
      if ((r.tags?.length ?? 0) + added.length > MAX_TAGS)
        throw new ApiError(400, `at most ${MAX_TAGS} tags per template`);
      if (added.length) r.tags = [...(r.tags ?? []), ...added];
    });
    return reply.code(201).send({ buildID: record.id, tags });
  });

  app.delete('/templates/tags', async (req, reply) => {
    const body = parseBody(deleteTemplateTagsSchema, req.body, 'tag request');
    if (body.name.includes(':') || body.name.includes('/'))
      throw new ApiError(400, `invalid name ${shown(body.name)}: give the template name without a tag`);
    const tags = requestedTags(body.tags);
    if (tags.includes(DEFAULT_TAG)) throw new ApiError(400, `the ${DEFAULT_TAG} tag cannot be removed`);
    const record = await templateByName(repo, body.name);
    const missing = tags.filter((t) => !hasTag(record, t));
    if (missing.length)
      throw new ApiError(404, `tag ${shown(missing[0]!)} not found for template ${shown(body.name)}`);
    await repo.update(record.id, (r) => {
      const left = (r.tags ?? []).filter((t) => !tags.includes(t.tag));
      if (left.length) r.tags = left;
      else delete r.tags;
    });
    return reply.code(204).send();
  });

  // ---- PATCH: `public` is recorded and reported; a node has one team, so it changes no access ----

  const updateTemplate = async (templateID: string, body: unknown) => {
    const update = parseBody(templateUpdateSchema, body, 'template update');
    const record = await templateByName(repo, templateID);
    const next =
      update.public === undefined
        ? record
        : await repo.update(record.id, (r) => {
            r.public = update.public;
          });
    return next;
  };
  app.patch('/v2/templates/:templateID', async (req) => {
    const { templateID } = req.params as { templateID: string };
    return { names: namesOf(await updateTemplate(templateID, req.body)) };
  });
  app.patch('/templates/:templateID', async (req, reply) => {
    const { templateID } = req.params as { templateID: string };
    await updateTemplate(templateID, req.body);
    return reply.code(200).header('content-length', '0').send();
  });
}
