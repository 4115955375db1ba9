import type { Logger } from '../util/log.js';
import type { ImageService } from '../image/index.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import { defaultUserOf, envOf } from '../backend/image-defaults.js';
import { existsSync } from 'node:fs';

export interface BaseTemplateOptions {
  alias: string;
  /** Image reference (e.g. `oci:/var/cache/aenv/images/base:latest`); empty disables. */
  image: string;
  resources: { cpuCount: number; memoryMB: number; diskSizeMB: number };
  runtimeVersions: Record<string, string>;
  virtualizationMode: string;
  repository: SnapshotRepository;
  images: ImageService;
  logger: Logger;
}

function localLayoutMissing(ref: string): string | undefined {
  if (!ref.startsWith('oci:')) return undefined;
  const rest = ref.slice(4);
  const colon = rest.lastIndexOf(':');
  const dir = colon > 0 ? rest.slice(0, colon) : rest;
  return existsSync(`${dir}/index.json`) ? undefined : dir;
}

/**
 * Registers the default template (`base`) from the locally built image on first start, so that
 * `Sandbox.create()` with no template works out of the box. A base registered before takes the resources of
 * the current config (`[machine]`, `default_disk_size_mb`); a template someone built under the alias is left
 * alone.
 */
export async function ensureBaseTemplate(o: BaseTemplateOptions): Promise<void> {
  if (!o.image || !o.alias) return;
  const existing = await o.repository.find(o.alias);
  if (existing?.committed) {
    const registeredHere = existing.committed.baseImage?.reference === o.image && !existing.committed.startup;
    const current = existing.resources;
    const changed = (['cpuCount', 'memoryMB', 'diskSizeMB'] as const).some(
      (k) => current[k] !== o.resources[k],
    );
    if (registeredHere && changed) {
      await o.repository.update(existing.id, (r) => {
        r.resources = { ...o.resources };
      });
      o.logger.info(
        { alias: o.alias, from: existing.resources, to: o.resources },
        'the base template takes the resources of the current config',
      );
    }
    return;
  }
  const missing = localLayoutMissing(o.image);
  if (missing) {
    o.logger.warn(
      { image: o.image },
      `the ${o.alias} template is not registered: no OCI layout at ${missing} (build it with scripts/build-base-image.sh)`,
    );
    return;
  }
  const image = await o.images.pull(o.image);
  const record =
    existing ??
    (await o.repository.create({
      alias: o.alias,
      source: { kind: 'template', build: { status: 'building', startedAt: new Date().toISOString() } },
      resources: o.resources,
    }));
  await o.repository.publish(record.id, {
    layers: [],
    artifacts: {},
    committed: {
      context: {
        envVars: envOf(image),
        workdir: image.config.workingDir || '/',
        user: defaultUserOf(image),
        exposedPorts: image.config.exposedPorts,
        ...(image.config.entrypoint ? { entrypoint: image.config.entrypoint } : {}),
        ...(image.config.cmd ? { cmd: image.config.cmd } : {}),
        volumes: image.config.volumes,
        labels: image.config.labels,
      },
      runtimeVersions: o.runtimeVersions,
      virtualizationMode: o.virtualizationMode,
      baseImage: { reference: image.reference, manifestDigest: image.manifestDigest },
    },
  });
  await o.repository.update(record.id, (r) => {
    if (r.source.kind === 'template') {
      r.source.build = { ...r.source.build, status: 'ready', finishedAt: new Date().toISOString() };
    }
  });
  o.logger.info(
    { templateId: record.id, alias: o.alias, image: image.reference },
    'registered the base template',
  );
}
