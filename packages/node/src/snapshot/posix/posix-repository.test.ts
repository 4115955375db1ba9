import { chmod, mkdir, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { existsSync } from 'node:fs';
import { defineRepositoryContract, type StoredBlobRef } from '../testing/contract-suite.js';

defineRepositoryContract(
  'posix_fs',
  async () => {
    const base = await mkdtemp(join(tmpdir(), 'aenv-posix-repo-'));
    const root = join(base, 'store', 'repository');
    const blobPath = (ref: StoredBlobRef) =>
      ref.kind === 'layer'
        ? join(root, 'layers/sha256', ref.digest.slice('sha256:'.length))
        : join(root, 'snapshots', ref.id, 'artifacts', ref.name);
    const docPath = (ns: 'records' | 'commits' | 'aliases', name: string) =>
      ns === 'records'
        ? join(root, 'catalog/records', `${name}.json`)
        : ns === 'aliases'
          ? join(root, 'catalog/aliases', name)
          : join(root, 'snapshots', name, 'commit');
    return {
      options: {
        backend: 'posix_fs',
        posixFs: { snapshotStore: join(base, 'store') },
        localCachePath: join(base, 'cache'),
        cacheMaxSizeGb: 1,
        compression: { enabled: true, level: 3 },
        lockTimeoutMs: 30_000,
        signing: { secret: 'contract-test-secret' },
      },
      async corruptBlob(ref) {
        await chmod(blobPath(ref), 0o644); // stored blobs are read-only
        const fd = await open(blobPath(ref), 'r+');
        try {
          const b = Buffer.alloc(1);
          await fd.read(b, 0, 1, 100);
          b[0] = b[0]! ^ 0xff;
          await fd.write(b, 0, 1, 100);
        } finally {
          await fd.close();
        }
      },
      removeBlob: (ref) => rm(blobPath(ref)),
      blobExists: async (ref) => existsSync(blobPath(ref)),
      writeDanglingAlias: (alias, id) => writeFile(join(root, 'catalog/aliases', alias), JSON.stringify(id)),
      aliasExists: async (alias) => existsSync(join(root, 'catalog/aliases', alias)),
      readRawDoc: async (ns, name) => {
        const path = docPath(ns, name);
        return existsSync(path) ? readFile(path, 'utf8') : undefined;
      },
      writeRawDoc: (ns, name, text) => writeFile(docPath(ns, name), text),
      async writeRawBlob(ref, content) {
        await rm(blobPath(ref), { force: true });
        await writeFile(blobPath(ref), content);
      },
      leaveTemporary: () => writeFile(join(root, 'tmp', 'half-written'), 'partial'),
      temporaryCount: async () => (await readdir(join(root, 'tmp'))).length,
      async leaveOrphanArtifact(id, name) {
        await mkdir(join(root, 'snapshots', id, 'artifacts'), { recursive: true });
        await writeFile(join(root, 'snapshots', id, 'artifacts', name), 'orphan');
      },
      hostTrees: [root],
      cleanup: () => rm(base, { recursive: true, force: true }),
    };
  },
  { localCache: false },
);
