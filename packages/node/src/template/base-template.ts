import type { Logger } from '../util/log.js';
import type { ImageService } from '../image/index.js';
import type { SnapshotRecord, SnapshotRepository } from '../snapshot/index.js';
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
 *
 * Nodes that share a repository and start together (a Compose or Kubernetes cluster's first start) register it
 * at the same time: the loser's create meets the alias taken, or its publish the record committed. It then
 * looks again, and finds the base committed by the other node (or adopts the record while still uncommitted).
 */
export async function ensureBaseTemplate(o: BaseTemplateOptions): Promise<void> {
  if (!o.image || !o.alias) return;
  for (let attempt = 1; ; attempt++) {
    const existing = await o.repository.find(o.alias);
    if (existing?.committed) return takeCurrentResources(o, existing);
    try {
      return await register(o, existing);
    } catch (err) {
      const now = await o.repository.find(o.alias).catch(() => undefined);
      if (now === undefined || attempt >= REGISTER_ATTEMPTS) throw err;
      o.logger.info(
        { alias: o.alias, templateId: now.id, err: err instanceof Error ? err.message : String(err) },
        'registering the base template met another registration (a node sharing the repository): looking again',
      );
    }
  }
}

/** A lost race is settled on the next look; more than this many means something else is wrong. */
const REGISTER_ATTEMPTS = 3;

async function takeCurrentResources(o: BaseTemplateOptions, existing: SnapshotRecord): Promise<void> {
  const registeredHere = existing.committed?.baseImage?.reference === o.image && !existing.committed.startup;
  const current = existing.resources;
  const changed = (['cpuCount', 'memoryMB', 'diskSizeMB'] as const).some(
    (k) => current[k] !== o.resources[k],
  );
  if (!registeredHere || !changed) return;
  await o.repository.update(existing.id, (r) => {
    r.resources = { ...o.resources };
  });
  o.logger.info(
    { alias: o.alias, from: existing.resources, to: o.resources },
    'the base template takes the resources of the current config',
  );
}

/** Creates (or adopts, when a record was left uncommitted) and publishes the base template. */
async function register(o: BaseTemplateOptions, existing: SnapshotRecord | undefined): Promise<void> {
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
  // The commit also marks the build ready (the repository's publish).
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
  o.logger.info(
    { templateId: record.id, alias: o.alias, image: image.reference },
    'registered the base template',
  );
}
