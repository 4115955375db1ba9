// Composition of the template subsystem: builder, upload store, logs, layer cache. Build sandboxes and captures
// come from the node's backend (build-host.ts).
import { createHmac } from 'node:crypto';
import { join } from 'node:path';
import type { ImageService } from '../image/index.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import { uuidv7 } from '@aenv/protocol';
import { BuildArtefacts } from './build-artefacts.js';
import { BuildCache } from './build-cache.js';
import { BuildLogStore, type BuildLogLimits } from './build-log.js';
import type { TemplateBuildHost } from './build-host.js';
import { TemplateBuilder, type StartupTimings } from './builder.js';
import { TemplateFileStore } from './file-store.js';

export { TemplateBuilder } from './builder.js';
export { TemplateFileStore } from './file-store.js';
export { BuildLogStore } from './build-log.js';
export { runStartup, StartupError } from './startup.js';
export type { StartupOptions, StartupSpec } from './startup.js';
export type { TemplateBuildHost } from './build-host.js';

export interface TemplateServiceOptions {
  homePath: string;
  /** The runtime's sandbox dir (on the CoW volume): the layer cache lives beside the sandboxes there. */
  sandboxesDir: string;
  images: ImageService;
  repository: SnapshotRepository;
  /** Build sandboxes, saved disks and captures (the backend's `templateBuilds`). */
  host: TemplateBuildHost;
  /** `[template_build].max_concurrent_builds` */
  maxConcurrentBuilds: number;
  /** `[template_build].max_build_secs` in ms (default 1 h). */
  maxBuildMs?: number;
  /** `[template_build].max_log_lines` / `max_log_mb`. */
  logLimits?: BuildLogLimits;
  /** `[image.resolver].default_image` */
  defaultImage: string;
  nodeName: string;
  /** Signs upload links (derive it from the API key so links stay valid across restarts and nodes). */
  uploadSecret: string | Buffer;
  maxUploadBytes?: number;
  uploadLinkTtlMs?: number;
  /** Uploaded build contexts unused this long are removed. */
  uploadRetentionMs?: number;
  /** `[template_build].log_retention_hours` in ms (0 = kept). */
  logRetentionMs?: number;
  /** `[template_build].artefacts_quota_mb` in bytes (0 = no limit). */
  artefactsQuotaBytes?: number;
  /** How often build artefacts are pruned besides after each build (default 5 min). */
  artefactsPruneIntervalMs?: number;
  cache?: { maxEntries?: number; maxAgeMs?: number };
  startup?: StartupTimings;
  logger: Logger;
}

export interface TemplateService {
  builder: TemplateBuilder;
  files: TemplateFileStore;
  logs: BuildLogStore;
  artefacts: BuildArtefacts;
  close(): Promise<void>;
}

const DAY_MS = 24 * 3600_000;
/** Build artefacts used this recently are never removed to make room: a build may be about to read them. */
const ARTEFACT_PROTECT_MS = 10 * 60_000;

/** A secret for upload links derived from the API key (one-way). */
export function uploadSecretFromApiKey(apiKey: string): Buffer {
  return createHmac('sha256', apiKey).update('aenv template upload links v1').digest();
}

export async function createTemplateService(o: TemplateServiceOptions): Promise<TemplateService> {
  const logger = o.logger;
  // Made once the builder exists (it knows which artefacts are in use); uploads before that are not possible.
  const artefactsRef: { current?: BuildArtefacts } = {};
  const files = new TemplateFileStore({
    dir: join(o.homePath, 'template-files'),
    secret: o.uploadSecret,
    maxUploadBytes: o.maxUploadBytes ?? 4 * 1024 ** 3,
    ...(o.uploadLinkTtlMs !== undefined ? { linkTtlMs: o.uploadLinkTtlMs } : {}),
    room: () => artefactsRef.current?.room() ?? Promise.resolve(Infinity),
  });
  await files.init();
  const logs = new BuildLogStore(join(o.homePath, 'builds'), o.logLimits);
  const cache = new BuildCache({
    dir: join(o.sandboxesDir, '.template-build-cache'),
    removeDisk: (p) => o.host.removeDisk(p),
    diskFilesDir: (p) => o.host.diskFilesDir(p),
    maxEntries: o.cache?.maxEntries ?? 64,
    maxAgeMs: o.cache?.maxAgeMs ?? 7 * DAY_MS,
    logger,
  });
  await cache.init();
  const builder = new TemplateBuilder({
    repository: o.repository,
    images: o.images,
    host: o.host,
    files,
    logs,
    cache,
    workDir: join(o.sandboxesDir, '.template-build-work'),
    markersDir: logs.dir,
    maxConcurrentBuilds: o.maxConcurrentBuilds,
    maxBuildMs: o.maxBuildMs ?? 3600_000,
    defaultImage: o.defaultImage,
    newSandboxId: () => `tb-${uuidv7()}`,
    nodeName: o.nodeName,
    logger,
    ...(o.startup ? { startup: o.startup } : {}),
    onFinished: () => void artefacts.prune().catch(() => {}),
  });
  const artefacts = new BuildArtefacts(
    {
      logsDir: logs.dir,
      uploadsDir: join(o.homePath, 'template-files'),
      activeBuilds: () => builder.activeIds(),
      uploadsInUse: () => builder.filesInUse(),
      cacheEntries: () => cache.artefacts(),
    },
    {
      quotaBytes: o.artefactsQuotaBytes ?? 0,
      retentionMs: {
        log: o.logRetentionMs ?? 30 * DAY_MS,
        upload: o.uploadRetentionMs ?? 7 * DAY_MS,
        cache: o.cache?.maxAgeMs ?? 7 * DAY_MS,
      },
      protectMs: ARTEFACT_PROTECT_MS,
    },
    logger,
  );
  artefactsRef.current = artefacts;
  await builder.init();
  await artefacts.prune().catch((err: unknown) => logger.warn({ err }, 'build artefact pruning failed'));
  artefacts.start(o.artefactsPruneIntervalMs ?? 5 * 60_000);

  return {
    builder,
    files,
    logs,
    artefacts,
    close: async () => {
      await builder.close();
      await artefacts.stop();
    },
  };
}
