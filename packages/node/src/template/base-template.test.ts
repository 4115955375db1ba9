import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ImageService, PulledImage } from '../image/index.js';
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

describe('ensureBaseTemplate on two nodes that share a repository and start together', () => {
  let dir: string;
  let image: string;
  const logger = pino({ level: 'silent' });

  // One repository object per node, over the same store: what two nodes of a cluster see.
  const nodeRepository = (): SnapshotRepository =>
    createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'store') },
      localCachePath: join(dir, `cache-${Math.random()}`),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      signing: { secret: 'base-template-test' },
      logger,
    });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-base-template-race-'));
    await mkdir(join(dir, 'layout'));
    await writeFile(join(dir, 'layout', 'index.json'), '{}');
    image = `oci:${join(dir, 'layout')}:latest`;
    await nodeRepository().reconcile();
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  /** Pulls that finish only when every node has pulled: each has looked the alias up before any registers. */
  function togetherImages(nodes: number): ImageService {
    let arrived = 0;
    let release!: () => void;
    const all = new Promise<void>((resolve) => (release = resolve));
    const pulled: PulledImage = {
      reference: image,
      manifestDigest: `sha256:${'1'.repeat(64)}`,
      layers: [],
      config: { env: ['PATH=/usr/bin'], user: 'user', exposedPorts: [], volumes: [], labels: {} },
    };
    const pull = async (): Promise<PulledImage> => {
      if (++arrived === nodes) release();
      await all;
      return pulled;
    };
    return { pull } as unknown as ImageService;
  }

  const ensureOn = (repository: SnapshotRepository, images: ImageService) =>
    ensureBaseTemplate({
      alias: 'base',
      image,
      resources: NEW,
      runtimeVersions: {},
      virtualizationMode: 'container',
      repository,
      images,
      logger,
    });

  async function expectOneReadyBase(): Promise<void> {
    const all = await nodeRepository().list({ alias: 'base' });
    expect(all).toHaveLength(1);
    expect(all[0]?.committed?.baseImage?.reference).toBe(image);
    expect(all[0]?.source).toMatchObject({ kind: 'template', build: { status: 'ready' } });
  }

  it('both succeed when both create the alias at once (one create meets it taken)', async () => {
    const images = togetherImages(2);
    await Promise.all([ensureOn(nodeRepository(), images), ensureOn(nodeRepository(), images)]);
    await expectOneReadyBase();
  });

  it('both succeed when both adopt a record left uncommitted (one publish meets it committed)', async () => {
    await nodeRepository().create({
      alias: 'base',
      source: { kind: 'template', build: { status: 'building', startedAt: new Date().toISOString() } },
      resources: NEW,
    });
    const images = togetherImages(2);
    await Promise.all([ensureOn(nodeRepository(), images), ensureOn(nodeRepository(), images)]);
    await expectOneReadyBase();
  });
});
