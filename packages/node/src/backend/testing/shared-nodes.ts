// Several nodes on one real posix_fs repository, as the sharing and take-over of paused sandboxes sees them: each
// node its own repository handle, pause dir and claims name. What the tests of paused-adoption.ts and
// unheld-pauses.ts stand on.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../../util/log.js';
import { createSnapshotRepository, type SnapshotRepository } from '../../snapshot/index.js';
import type { SandboxRecord } from '../../orchestrator/types.js';
import type { VolumeService } from '../../volume/service.js';
import type { VolumeMountRecord } from '../../volume/types.js';
import { PausedSharing } from '../paused-sharing.js';
import { adoptSharedPause, type AdoptionDeps } from '../paused-adoption.js';

export const quietLogger = createLogger('json', 'info', new Writable({ write: (_c, _e, cb) => cb() }));
const runtime = {
  diskFilesDir: (disk: string) => disk,
  memoryMediaTypes: { capture: 'application/x-test-capture', paused: 'application/x-test-paused' },
};

export type TestNode = ReturnType<SharedNodes['node']>;

export class SharedNodes {
  private readonly repos: SnapshotRepository[] = [];

  private constructor(readonly base: string) {}

  static async create(): Promise<SharedNodes> {
    return new SharedNodes(await mkdtemp(join(tmpdir(), 'aenv-shared-nodes-')));
  }

  /** A node named `id` on the shared repository; `retentionSecs` is its `paused_retention_secs`. */
  node(id: string, opts: { volumes?: VolumeService; retentionSecs?: number } = {}) {
    const repository = createSnapshotRepository({
      backend: 'posix_fs',
      posixFs: { snapshotStore: join(this.base, 'shared') },
      localCachePath: join(this.base, `${id}-cache`),
      cacheMaxSizeGb: 1,
      compression: { enabled: false, level: 3 },
      logger: quietLogger,
      signing: { secret: 'cluster-secret' },
    });
    this.repos.push(repository);
    const sharing = new PausedSharing(repository, runtime, quietLogger, id, opts.volumes, opts.retentionSecs);
    const pausedDir = (sandboxId: string) => join(this.base, id, 'paused', sandboxId);
    const deps: AdoptionDeps = {
      repository,
      nodeId: id,
      logger: quietLogger,
      pausedDir,
      diskFilesDir: runtime.diskFilesDir,
      markComplete: (dir, paused) => writeFile(join(dir, 'complete'), JSON.stringify(paused)),
      localize: async (r) => r,
      ...(opts.volumes ? { volumes: opts.volumes } : {}),
    };
    return {
      id,
      repository,
      sharing,
      pausedDir,
      adopt: (sandboxId: string, hooks: Pick<AdoptionDeps, 'onFound' | 'onClaimed'> = {}) =>
        adoptSharedPause({ ...deps, ...hooks }, sandboxId),
    };
  }

  /** A pause on `n`: the artifacts in its pause dir, then the shared copy (waited for). */
  async pauseOn(
    n: TestNode,
    id: string,
    opts: { mounts?: VolumeMountRecord[]; pausedAt?: string; metadata?: Record<string, string> } = {},
  ): Promise<void> {
    const dir = n.pausedDir(id);
    await mkdir(join(dir, 'memory'), { recursive: true });
    await mkdir(join(dir, 'disk'), { recursive: true });
    await writeFile(join(dir, 'memory', 'pages.img'), `memory of ${id} on ${n.id}`);
    await writeFile(join(dir, 'disk', 'file.txt'), `disk of ${id}`);
    const r = pausedRecord(id, opts.mounts);
    if (opts.pausedAt) r.paused!.pausedAt = opts.pausedAt;
    if (opts.metadata) r.metadata = opts.metadata;
    n.sharing.share(r, dir, { envd: '1' }, 'container');
    await n.sharing.settled(id);
  }

  async close(): Promise<void> {
    for (const r of this.repos.splice(0)) await r.close();
    await rm(this.base, { recursive: true, force: true });
  }
}

/** A paused sandbox's record as a node keeps it. */
export function pausedRecord(id: string, volumeMounts?: VolumeMountRecord[]): SandboxRecord {
  return {
    id,
    templateId: 'tpl',
    state: 'paused',
    createdAt: new Date().toISOString(),
    expiresAt: null,
    timeoutSecs: 300,
    resources: { cpuCount: 1, memoryMB: 256, diskSizeMB: 1024 },
    metadata: { team: 'rl' },
    envVars: {},
    secure: true,
    network: { allowPublicTraffic: true, allowOut: [], denyOut: [], allowInternetAccess: null },
    onTimeout: 'pause',
    autoResume: true,
    envdVersion: '0.5.15',
    defaultUser: 'user',
    paused: { kind: 'memory', pausedAt: new Date().toISOString(), artifactDir: '/x', bytes: 10 },
    backend: { imageRef: 'base' },
    ...(volumeMounts ? { volumeMounts } : {}),
  };
}
