import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ImageService } from '../image/index.js';
import { createSnapshotRepository, type SnapshotRepository } from '../snapshot/index.js';
import { ensureBaseTemplate } from './base-template.js';

const IMAGE = 'oci:/var/cache/aenv/images/base:latest';
const OLD = { cpuCount: 2, memoryMB: 1024, diskSizeMB: 20480 };
const NEW = { cpuCount: 1, memoryMB: 512, diskSizeMB: 4096 };

describe('ensureBaseTemplate on a repository that has the alias already', () => {
  let dir: string;
  let repository: SnapshotRepository;
  const logger = pino({ level: 'silent' });
  // Not reached: an existing template is never pulled again.
  const images = {} as ImageService;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-base-template-'));
    repository = createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'store') },
      localCachePath: join(dir, 'cache'),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      signing: { secret: 'base-template-test' },
      logger,
    });
    await repository.reconcile();
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  const context = { envVars: {}, workdir: '/', user: 'user', exposedPorts: [], volumes: [], labels: {} };

  async function template(alias: string, reference: string, startCmd?: string) {
    const r = await repository.create({
      alias,
      source: { kind: 'template', build: { status: 'building', startedAt: new Date().toISOString() } },
      resources: OLD,
    });
    await repository.publish(r.id, {
      layers: [],
      artifacts: {},
      committed: {
        context,
        runtimeVersions: {},
        virtualizationMode: 'container',
        baseImage: { reference, manifestDigest: `sha256:${'0'.repeat(64)}` },
        ...(startCmd ? { startup: { startCmd, readyCmd: 'true', context } } : {}),
      },
    });
    return r.id;
  }

  const ensure = (alias: string) =>
    ensureBaseTemplate({
      alias,
      image: IMAGE,
      resources: NEW,
      runtimeVersions: {},
      virtualizationMode: 'container',
      repository,
      images,
      logger,
    });

  it('gives the base it registered the resources of the current config', async () => {
    const id = await template('base', IMAGE);
    await ensure('base');
    expect((await repository.find(id))?.resources).toEqual(NEW);
  });

  it('leaves a template someone built under the alias alone', async () => {
    const other = await template('base', 'registry.example/app:1');
    await ensure('base');
    expect((await repository.find(other))?.resources).toEqual(OLD);
    const started = await template('base2', IMAGE, 'python3 -m http.server');
    await ensure('base2');
    expect((await repository.find(started))?.resources).toEqual(OLD);
  });
});
