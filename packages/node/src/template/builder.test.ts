// The template builder over a real repository, log store, file store and build cache. The node side (build
// sandboxes, saved disks, captures) is a small in-process TemplateBuildHost that notes what it is asked; the
// real one (backend/template-builds.ts) runs in test/e2e/templates.test.ts and factory-rollback.test.ts.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { ImageService, PulledImage } from '../image/index.js';
import { createSnapshotRepository, type SnapshotRepository } from '../snapshot/index.js';
import { BuildCache } from './build-cache.js';
import type { TemplateBuildHost } from './build-host.js';
import { BuildLogStore } from './build-log.js';
import { TemplateBuilder } from './builder.js';
import { TemplateFileStore } from './file-store.js';

const IMAGE = 'oci:/var/cache/aenv/images/base:latest';
const logger = pino({ level: 'silent' });
const RESOURCES = { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 };

const pulled: PulledImage = {
  reference: IMAGE,
  manifestDigest: `sha256:${'1'.repeat(64)}`,
  layers: [],
  config: { env: ['PATH=/usr/bin:/bin'], user: 'root', exposedPorts: [], volumes: [], labels: {} },
};

/** Notes every call; `start` fails with `startError` when set. */
class NotingHost implements TemplateBuildHost {
  calls: string[] = [];
  startError: Error | undefined;
  async start(): Promise<never> {
    this.calls.push('start');
    throw this.startError ?? new Error('no sandboxes here');
  }
  async init() {
    this.calls.push('init');
  }
  async snapshotDisk() {
    this.calls.push('snapshotDisk');
  }
  async destroy() {
    this.calls.push('destroy');
  }
  async captureMemory() {
    this.calls.push('captureMemory');
  }
  async captureDisk() {
    this.calls.push('captureDisk');
  }
  async unpackDisk(): Promise<undefined> {
    return undefined;
  }
  async removeDisk(path: string) {
    this.calls.push(`removeDisk ${path}`);
    await rm(path, { recursive: true, force: true });
  }
  diskFilesDir(disk: string) {
    return join(disk, 'files');
  }
  async reconcile() {
    this.calls.push('reconcile');
  }
}

describe('TemplateBuilder', () => {
  let dir: string;
  let repository: SnapshotRepository;
  let host: NotingHost;
  let logs: BuildLogStore;
  let builder: TemplateBuilder;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-builder-'));
    repository = createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'store') },
      localCachePath: join(dir, 'cache'),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      signing: { secret: 'builder-test' },
      logger,
    });
    await repository.reconcile();
    host = new NotingHost();
    logs = new BuildLogStore(join(dir, 'builds'));
    const files = new TemplateFileStore({ dir: join(dir, 'files'), secret: 's', maxUploadBytes: 1024 });
    await files.init();
    const cache = new BuildCache({
      dir: join(dir, 'build-cache'),
      removeDisk: (p) => host.removeDisk(p),
      diskFilesDir: (p) => host.diskFilesDir(p),
      maxEntries: 8,
      maxAgeMs: 3600_000,
      logger,
    });
    await cache.init();
    const images = {
      resolve: () => [],
      pull: async () => pulled,
    } as unknown as ImageService;
    builder = new TemplateBuilder({
      repository,
      images,
      host,
      files,
      logs,
      cache,
      workDir: join(dir, 'work'),
      markersDir: logs.dir,
      maxConcurrentBuilds: 1,
      maxBuildMs: 3600_000,
      defaultImage: IMAGE,
      newSandboxId: () => 'tb-1',
      nodeName: 'node-a',
      logger,
    });
  });
  afterEach(async () => {
    await builder.close();
    await rm(dir, { recursive: true, force: true });
  });

  const waiting = () =>
    repository.create({
      source: { kind: 'template', build: { status: 'waiting' } },
      resources: RESOURCES,
    });

  async function finished(id: string) {
    for (let i = 0; i < 200 && builder.isActive(id); i++) await new Promise((r) => setTimeout(r, 10));
    return repository.get(id);
  }

  it('ends a build a restart interrupted as error, and clears what builds left', async () => {
    const rec = await repository.create({
      source: { kind: 'template', build: { status: 'building', startedAt: new Date().toISOString() } },
      resources: RESOURCES,
    });
    await writeFile(join(logs.dir, `${rec.id}.running`), 'x');
    await mkdir(join(dir, 'work', 'old-disk'), { recursive: true });
    await builder.init();
    const after = await repository.get(rec.id);
    expect(after.source.kind === 'template' && after.source.build.status).toBe('error');
    expect(after.source.kind === 'template' && after.source.build.error?.message).toContain('node node-a');
    expect(existsSync(join(logs.dir, `${rec.id}.running`))).toBe(false);
    expect(await readdir(join(dir, 'work'))).toEqual([]);
    expect(host.calls).toEqual([`removeDisk ${join(dir, 'work', 'old-disk')}`, 'reconcile']);
    expect((await logs.read(rec.id)).map((e) => e.message).join('\n')).toContain('interrupted');
  });

  it('refuses builds it cannot run with the right error kinds, leaving the record waiting', async () => {
    await builder.init();
    const rec = await waiting();
    const kind = async (body: unknown) => {
      const err = await builder.start(rec.id, body).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DomainError);
      return (err as DomainError).kind;
    };
    expect(await kind({ fromTemplate: 'no-such-template' })).toBe(ErrorKind.InvalidArgument);
    expect(await kind({ fromImage: 'a', fromTemplate: 'b' })).toBe(ErrorKind.InvalidArgument);
    const after = await repository.get(rec.id);
    expect(after.source.kind === 'template' && after.source.build.status).toBe('waiting');
    expect(existsSync(join(logs.dir, `${rec.id}.running`))).toBe(false);
  });

  it('ends a build whose sandbox could not start as error at its base step, and refuses to run it twice', async () => {
    await builder.init();
    host.startError = new Error('no network slot left');
    const rec = await waiting();
    await builder.start(rec.id, { fromImage: IMAGE, steps: [{ type: 'RUN', args: ['true'] }] });
    const err = await builder.start(rec.id, { fromImage: IMAGE }).catch((e: unknown) => e);
    expect((err as DomainError).kind).toBe(ErrorKind.InvalidState);
    const after = await finished(rec.id);
    expect(after.source.kind === 'template' && after.source.build).toMatchObject({
      status: 'error',
      error: { message: 'no network slot left', step: 'base' },
    });
    // No sandbox started, so none to destroy; nothing captured.
    expect(host.calls.filter((c) => !c.startsWith('removeDisk'))).toEqual(['reconcile', 'start']);
    expect(existsSync(join(logs.dir, `${rec.id}.running`))).toBe(false);
    const status = await builder.status(after, {});
    expect(status.status).toBe('error');
    expect(status.logs.join('\n')).toContain('build failed: no network slot left');
  });
});
