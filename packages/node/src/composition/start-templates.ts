import type { AenvConfig } from '@aenv/config';
import type { ImageService } from '../image/index.js';
import type { ContainerBackend } from '../backend/container-backend.js';
import type { Runtime, ToolsMount } from '../runtime/index.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import { ensureBaseTemplate } from '../template/base-template.js';
import type { TemplateCatalog } from '../template/catalog.js';
import { createTemplateService, uploadSecretFromApiKey, type TemplateService } from '../template/index.js';

export type TemplateSection = Pick<
  AenvConfig,
  'template_build' | 'home_path' | 'tools' | 'envd' | 'image' | 'machine' | 'runtime'
>;

export interface TemplateDeps {
  runtime: Runtime;
  images: ImageService;
  repository: SnapshotRepository;
  backend: ContainerBackend;
  catalog: TemplateCatalog;
  tools: ToolsMount;
  envdVersion: string;
  nodeName: string;
  apiKey: string;
  logger: Logger;
}

/**
 * `[template_build]`: the `base` template registered (and its warm sandboxes started, so the first creates do
 * not wait for a boot), then the template builder with its upload links, build logs and build cache.
 */
export async function startTemplates(config: TemplateSection, deps: TemplateDeps): Promise<TemplateService> {
  const { runtime, logger } = deps;
  const t = config.template_build;
  const runtimeVersions = { envd: deps.envdVersion, tools: deps.tools.version };
  await ensureBaseTemplate({
    alias: t.base_template_alias,
    image: t.base_template_image,
    resources: {
      cpuCount: config.machine.vcpu_count,
      memoryMB: config.machine.mem_size_mib,
      diskSizeMB: config.runtime.default_disk_size_mb,
    },
    runtimeVersions,
    virtualizationMode: runtime.driver.virtualizationMode,
    repository: deps.repository,
    images: deps.images,
    logger,
  }).catch((err: unknown) => logger.error({ err }, 'could not register the base template'));
  if (t.base_template_alias) {
    deps.catalog
      .resolveLaunchable(t.base_template_alias)
      .then((base) => deps.backend.prewarm(base, base.resources))
      .catch((err: unknown) =>
        logger.warn({ err }, 'the base template has no warm sandboxes: it could not be resolved'),
      );
  }
  return createTemplateService({
    homePath: config.home_path,
    sandboxesDir: runtime.sandboxesDir,
    images: deps.images,
    repository: deps.repository,
    host: deps.backend.templateBuilds,
    maxConcurrentBuilds: t.max_concurrent_builds,
    maxBuildMs: t.max_build_secs * 1000,
    logLimits: { maxEntries: t.max_log_lines, maxBytes: t.max_log_mb * 1024 ** 2 },
    maxUploadBytes: t.max_upload_mb * 1024 ** 2,
    uploadLinkTtlMs: t.upload_link_ttl_secs * 1000,
    uploadRetentionMs: t.upload_retention_hours * 3600_000,
    logRetentionMs: t.log_retention_hours * 3600_000,
    artefactsQuotaBytes: t.artefacts_quota_mb * 1024 ** 2,
    cache: { maxEntries: t.cache_max_entries, maxAgeMs: t.cache_max_age_hours * 3600_000 },
    defaultImage: config.image.resolver.default_image,
    nodeName: deps.nodeName,
    uploadSecret: uploadSecretFromApiKey(deps.apiKey),
    logger: logger.child({ component: 'templates' }),
  });
}
