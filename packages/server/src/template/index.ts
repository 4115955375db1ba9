// Composition of the template subsystem: builder, upload store, logs, layer cache, unpacked template layers.
import { createHmac } from 'node:crypto';
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ImageService } from '../image/index.js';
import type { NetworkManager } from '../network/index.js';
import type { RuntimeDriver, ToolsMount } from '../runtime/driver.js';
import type { SnapshotRepository } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import { uuidv7 } from '../util/uuid.js';
import { BuildCache } from './build-cache.js';
import { BuildLogStore } from './build-log.js';
import { BuildSandboxes } from './build-sandbox.js';
import { TemplateBuilder, type StartupTimings } from './builder.js';
import { FilesystemCapture, type TemplateCapture } from './capture.js';
import { TemplateFileStore } from './file-store.js';
import { TemplateLayerStore } from './layer-store.js';

export { TemplateBuilder } from './builder.js';
export { TemplateFileStore } from './file-store.js';
export { TemplateLayerStore } from './layer-store.js';
export { TemplateUploadEndpoint } from './upload-endpoint.js';
export { BuildLogStore } from './build-log.js';
export { runStartup, StartupError } from './startup.js';
export type { StartupOptions, StartupSpec } from './startup.js';
export type { TemplateCapture, CaptureRequest } from './capture.js';
export { needsStartupRun, startTemplateStartup, templateLowerDirs } from './launch.js';

export interface TemplateServiceOptions {
  homePath: string;
  /** The runtime's sandbox dir (on the CoW volume): the layer cache lives beside the sandboxes there. */
  sandboxesDir: string;
  runtime: RuntimeDriver;
  network: NetworkManager;
  images: ImageService;
  repository: SnapshotRepository;
  tools: ToolsMount;
  envdPort: number;
  envdPollMs: number;
  envdInitTimeoutMs: number;
  pidsLimit: number;
  /** `[runtime].uid_map_host_start` / `uid_map_size`. */
  idMap: { hostStart: number; size: number };
  /** `[template_build].max_concurrent_builds` */
  maxConcurrentBuilds: number;
  /** `[image.resolver].default_image` */
  defaultImage: string;
  runtimeVersions: Record<string, string>;
  virtualizationMode: string;
  nodeName: string;
  /** Signs upload links (derive it from the API key so links stay valid across restarts and nodes). */
  uploadSecret: string | Buffer;
  maxUploadBytes?: number;
  /** Replaces the filesystem-only capture (the backend's memory capture, when it lands). */
  capture?: TemplateCapture;
  /** Unpacked template layers (shared with the backend, which launches sandboxes on them). */
  layers: TemplateLayerStore;
  cache?: { maxEntries?: number; maxAgeMs?: number };
  startup?: StartupTimings;
  logger: Logger;
}

export interface TemplateService {
  builder: TemplateBuilder;
  files: TemplateFileStore;
  logs: BuildLogStore;
  layers: TemplateLayerStore;
  /** Drops unpacked layers that no record of the repository uses any more. */
  gcLayers(): Promise<void>;
  close(): Promise<void>;
}

const DAY_MS = 24 * 3600_000;

/** A secret for upload links derived from the API key (one-way). */
export function uploadSecretFromApiKey(apiKey: string): Buffer {
  return createHmac('sha256', apiKey).update('aenv template upload links v1').digest();
}

/** The node's unpacked template layers: `$AENV_HOME/template-layers`. */
export async function createTemplateLayerStore(o: {
  homePath: string;
  repository: SnapshotRepository;
  idMap: { hostStart: number; size: number };
  logger: Logger;
}): Promise<TemplateLayerStore> {
  const layers = new TemplateLayerStore({
    dir: join(o.homePath, 'template-layers'),
    repository: o.repository,
    idMap: o.idMap,
    logger: o.logger,
  });
  await layers.init();
  return layers;
}

export async function createTemplateService(o: TemplateServiceOptions): Promise<TemplateService> {
  const logger = o.logger;
  const files = new TemplateFileStore({
    dir: join(o.homePath, 'template-files'),
    secret: o.uploadSecret,
    maxUploadBytes: o.maxUploadBytes ?? 4 * 1024 ** 3,
  });
  await files.init();
  const logs = new BuildLogStore(join(o.homePath, 'builds'));
  const layers = o.layers;
  const sandboxes = new BuildSandboxes({
    runtime: o.runtime,
    network: o.network,
    images: o.images,
    tools: o.tools,
    envdPort: o.envdPort,
    envdPollMs: o.envdPollMs,
    envdInitTimeoutMs: o.envdInitTimeoutMs,
    pidsLimit: o.pidsLimit,
    logger,
  });
  const cache = new BuildCache({
    dir: join(o.sandboxesDir, '.template-build-cache'),
    removeDisk: (p) => o.runtime.removeUpperSnapshot(p),
    maxEntries: o.cache?.maxEntries ?? 64,
    maxAgeMs: o.cache?.maxAgeMs ?? 7 * DAY_MS,
    logger,
  });
  await cache.init();
  const captureTmp = join(o.homePath, 'template-work');
  await mkdir(captureTmp, { recursive: true, mode: 0o700 });
  for (const name of await readdir(captureTmp))
    await rm(join(captureTmp, name), { recursive: true, force: true });
  const capture =
    o.capture ??
    new FilesystemCapture({ repository: o.repository, tmpDir: captureTmp, idMap: o.idMap, logger });
  const builder = new TemplateBuilder({
    repository: o.repository,
    images: o.images,
    sandboxes,
    capture,
    layers,
    files,
    logs,
    cache,
    workDir: join(o.sandboxesDir, '.template-build-work'),
    markersDir: logs.dir,
    maxConcurrentBuilds: o.maxConcurrentBuilds,
    defaultImage: o.defaultImage,
    runtimeVersions: o.runtimeVersions,
    virtualizationMode: o.virtualizationMode,
    newSandboxId: () => `tb-${uuidv7()}`,
    nodeName: o.nodeName,
    logger,
    ...(o.startup ? { startup: o.startup } : {}),
  });
  await builder.init();
  await builder
    .gcUploads(7 * DAY_MS)
    .catch((err: unknown) => logger.warn({ err }, 'template upload GC failed'));

  const gcLayers = async () => {
    const keep = new Set<string>();
    for (const r of await o.repository.list()) for (const l of r.committed?.layers ?? []) keep.add(l.digest);
    const removed = await layers.gc(keep);
    if (removed.length) logger.info({ removed: removed.length }, 'unpacked template layers removed');
  };
  await gcLayers().catch((err: unknown) => logger.warn({ err }, 'template layer GC failed'));

  return {
    builder,
    files,
    logs,
    layers,
    gcLayers,
    close: () => builder.close(),
  };
}
