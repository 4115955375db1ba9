// What a disk capture commits, key for key, into a real posix repository: launches (launch.ts), the catalog and
// records of earlier versions all read this format (capture-format.ts), so it must not drift.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { containerRecordCodec } from '../runtime/drivers/container/record-codec.js';
import { createSnapshotRepository, type SnapshotRepository } from '../snapshot/index.js';
import { publishDisk } from './capture.js';
import { DISK_MEDIA_TYPE } from './capture-format.js';
import type { BackendContext } from './context.js';
import { BackendRecordCodec } from './record-state.js';

const logger = pino({ level: 'silent' });
const context = {
  envVars: { A: '1' },
  workdir: '/app',
  user: 'user',
  exposedPorts: [],
  volumes: [],
  labels: {},
};

describe('publishDisk', () => {
  let dir: string;
  let repository: SnapshotRepository;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-capture-'));
    repository = createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(dir, 'store') },
      localCachePath: join(dir, 'cache'),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      signing: { secret: 'capture-test' },
      logger,
    });
    await repository.reconcile();
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('commits the disk with the capture record of its source, in the stored key order', async () => {
    const ctx = {
      o: {
        runtime: { virtualizationMode: 'container', diskFilesDir: (d: string) => join(d, 'files') },
        repository,
      },
      records: new BackendRecordCodec(containerRecordCodec),
    } as unknown as BackendContext;
    const disk = join(dir, 'disk');
    await mkdir(join(disk, 'files'), { recursive: true });
    await writeFile(join(disk, 'files', 'hello.txt'), 'hello\n');
    const rec = await repository.create({
      source: { kind: 'template', build: { status: 'building', startedAt: new Date().toISOString() } },
      resources: { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 },
    });
    await publishDisk(
      ctx,
      {
        containerId: 'tb-1',
        sourceSandboxId: 'tb-1',
        secure: false,
        state: {
          imageRef: 'oci:/images/base:latest',
          manifestDigest: 'sha256:aa',
          rootfs: { layers: ['/layers/1', '/layers/2'] },
          toolsVersion: 'tools-7',
          envdEnv: { PATH: '/usr/bin', ENVD_PORT: '49983', AENV_INIT_LOG: '/run/agentenv/envd.log' },
        },
      },
      { recordId: rec.id, context, startup: { startCmd: 'serve', readyCmd: 'true' } },
      disk,
      dir,
      { envd: 'envd-3', tools: 'tools-7' },
    );
    const committed = (await repository.get(rec.id)).committed!;
    expect(JSON.stringify(committed.extra)).toBe(
      JSON.stringify({
        sourceSandboxId: 'tb-1',
        sourceSecure: false,
        toolsVersion: 'tools-7',
        envdEnv: { PATH: '/usr/bin', ENVD_PORT: '49983', AENV_INIT_LOG: '/run/agentenv/envd.log' },
        ...containerRecordCodec.encode({ layers: ['/layers/1', '/layers/2'] }),
      }),
    );
    expect(committed.runtimeVersions).toEqual({ envd: 'envd-3', tools: 'tools-7' });
    expect(committed.virtualizationMode).toBe('container');
    expect(committed.baseImage).toEqual({
      reference: 'oci:/images/base:latest',
      manifestDigest: 'sha256:aa',
    });
    expect(committed.startup).toEqual({ startCmd: 'serve', readyCmd: 'true', context });
    expect(committed.artifacts).toEqual({});
    expect(committed.layers.map((l) => l.mediaType)).toEqual([DISK_MEDIA_TYPE]);
  });
});
