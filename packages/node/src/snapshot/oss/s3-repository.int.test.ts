import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSnapshotRepository, type SnapshotRepositoryOptions } from '../index.js';
import { defineRepositoryContract, type StoredBlobRef } from '../testing/contract-suite.js';
import { S3Storage } from './s3-storage.js';

// The S3-compatible test server (test/services/start.sh: moto on 127.0.0.1:9000); test/services/env.sh exports these.
const endpoint = process.env.AENV_TEST_S3_ENDPOINT ?? 'http://127.0.0.1:9000';
const bucket = process.env.AENV_TEST_S3_BUCKET ?? 'aenv-test';
const region = process.env.AENV_TEST_S3_REGION ?? 'us-east-1';
const accessKeyId = process.env.AENV_TEST_S3_ACCESS_KEY ?? 'aenvtest';
const secretAccessKey = process.env.AENV_TEST_S3_SECRET_KEY ?? 'aenvtestsecret';

const client = new S3Client({
  endpoint,
  region,
  forcePathStyle: true,
  credentials: { accessKeyId, secretAccessKey },
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
});

/** Fails (never skips) when the server is missing: CI starts it, so absence is a broken setup. */
async function requireServer(): Promise<void> {
  const probe = `${randomUUID()}/.reachability`;
  try {
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: probe, Body: 'x' }));
    await deletePrefix(probe);
  } catch (err) {
    throw new Error(
      `S3 test server not usable at ${endpoint} (bucket ${bucket}): ${(err as Error).message || (err as Error).name}. ` +
        'Start it with test/services/start.sh (CI does) and export the variables of test/services/env.sh.',
    );
  }
}

async function deletePrefix(prefix: string): Promise<void> {
  const { ListObjectsV2Command, DeleteObjectCommand } = await import('@aws-sdk/client-s3');
  let token: string | undefined;
  do {
    const r = await client.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
    );
    for (const o of r.Contents ?? [])
      await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: o.Key! }));
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
  } while (token);
}

async function makeTarget(prefix: string) {
  const local = await mkdtemp(join(tmpdir(), 'aenv-s3-repo-'));
  const options: Omit<SnapshotRepositoryOptions, 'logger'> = {
    backend: 'oss',
    posixFs: { snapshotStore: join(local, 'unused') },
    oss: { endpoint, bucket, region, prefix, accessKeyId, accessKeySecret: secretAccessKey, leaseMs: 2000 },
    localCachePath: join(local, 'cache'),
    cacheMaxSizeGb: 1,
    compression: { enabled: true, level: 3 },
    lockTimeoutMs: 30_000,
    signing: { secret: 'contract-test-secret' },
  };
  return { local, options };
}

const blobKey = (prefix: string, ref: StoredBlobRef) =>
  ref.kind === 'layer'
    ? `${prefix}layers/sha256/${ref.digest.slice('sha256:'.length)}`
    : `${prefix}artifacts/${ref.id}/${ref.name}`;

async function exists(key: string): Promise<boolean> {
  try {
    await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    return true;
  } catch {
    return false;
  }
}

defineRepositoryContract(
  'oss (S3)',
  async () => {
    await requireServer();
    const prefix = `contract-${randomUUID()}/`;
    const { local, options } = await makeTarget(prefix);
    return {
      options,
      async corruptBlob(ref) {
        const key = blobKey(prefix, ref);
        const obj = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        const body = Buffer.from(await obj.Body!.transformToByteArray());
        body[Math.floor(body.length / 2)]! ^= 0xff;
        await client.send(
          new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, Metadata: obj.Metadata }),
        );
      },
      async removeBlob(ref) {
        const { DeleteObjectCommand } = await import('@aws-sdk/client-s3');
        await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: blobKey(prefix, ref) }));
      },
      blobExists: (ref) => exists(blobKey(prefix, ref)),
      async writeDanglingAlias(alias, id) {
        await client.send(
          new PutObjectCommand({
            Bucket: bucket,
            Key: `${prefix}catalog/aliases/${alias}.json`,
            Body: JSON.stringify(id),
          }),
        );
      },
      aliasExists: (alias) => exists(`${prefix}catalog/aliases/${alias}.json`),
      async readRawDoc(ns, name) {
        try {
          const obj = await client.send(
            new GetObjectCommand({ Bucket: bucket, Key: `${prefix}catalog/${ns}/${name}.json` }),
          );
          return await obj.Body!.transformToString();
        } catch {
          return undefined;
        }
      },
      async writeRawDoc(ns, name, text) {
        await client.send(
          new PutObjectCommand({ Bucket: bucket, Key: `${prefix}catalog/${ns}/${name}.json`, Body: text }),
        );
      },
      async writeRawBlob(ref, content) {
        // What an attacker stores: the raw bytes, with metadata claiming whatever the record expects.
        const digest = `sha256:${createHash('sha256').update(content).digest('hex')}`;
        await client.send(
          new PutObjectCommand({
            Bucket: bucket,
            Key: blobKey(prefix, ref),
            Body: content,
            Metadata: {
              'aenv-digest': ref.kind === 'layer' ? ref.digest : digest,
              'aenv-codec': 'none',
              'aenv-raw-size': String(content.length),
              'aenv-compressed-size': String(content.length),
            },
          }),
        );
      },
      async leaveTemporary() {
        const key = `${prefix}layers/sha256/${'0'.repeat(64)}`;
        await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
      },
      async temporaryCount() {
        const r = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix }));
        return (r.Uploads ?? []).length;
      },
      async leaveOrphanArtifact(id, name) {
        const key = `${prefix}artifacts/${id}/${name}`;
        await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'orphan' }));
      },
      hostTrees: [options.localCachePath],
      async cleanup() {
        await deletePrefix(prefix);
        await rm(local, { recursive: true, force: true });
      },
    };
  },
  { localCache: true },
);

describe('oss backend specifics', () => {
  const prefix = `specifics-${randomUUID()}/`;
  let local: string;
  let options: Omit<SnapshotRepositoryOptions, 'logger'>;
  const logger = pino({ level: process.env.T_DEBUG ? 'debug' : 'silent' }, pino.destination(2));

  beforeAll(async () => {
    await requireServer();
    ({ local, options } = await makeTarget(prefix));
  });

  afterAll(async () => {
    await deletePrefix(prefix);
    await rm(local, { recursive: true, force: true });
  });

  it('probes which conditional requests the server enforces, matching what a direct request shows', async () => {
    const store = new S3Storage({
      oss: options.oss!,
      localCachePath: options.localCachePath,
      cacheMaxBytes: 1 << 30,
      cacheMinEvictAgeMs: 0,
      compression: options.compression,
      logger,
    });
    await store.init();
    const key = `${prefix}direct-probe`;
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'a' }));
    const rejected = async (cmd: PutObjectCommand) =>
      client.send(cmd).then(
        () => false,
        (err: { $metadata?: { httpStatusCode?: number } }) => err.$metadata?.httpStatusCode === 412,
      );
    const create = await rejected(
      new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'b', IfNoneMatch: '*' }),
    );
    const replace = await rejected(
      new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'c', IfMatch: '"0123"' }),
    );
    expect(store.capabilities).toMatchObject({ conditionalCreate: create, conditionalReplace: replace });
    // Alias binding and the commit marker rely on create-if-absent: the test server must enforce it.
    expect(store.capabilities.conditionalCreate).toBe(true);
    await store.close();
  });

  it('stores layers zstd-compressed with codec and sizes in metadata; fetch returns raw bytes', async () => {
    const repo = createSnapshotRepository({ ...options, logger });
    const raw = Buffer.from('compressible line of text\n'.repeat(40_000));
    const path = join(local, 'layer');
    await writeFile(path, raw);
    const rec = await repo.create({
      source: { kind: 'sandbox', sourceSandboxId: 's' },
      resources: { cpuCount: 1, memoryMB: 128, diskSizeMB: 0 },
    });
    const done = await repo.publish(rec.id, {
      layers: [{ path, mediaType: 'l' }],
      artifacts: {},
      committed: {
        context: { envVars: {}, workdir: '/', exposedPorts: [], volumes: [], labels: {} },
        runtimeVersions: {},
        virtualizationMode: 'container',
      },
    });
    const layer = done.committed!.layers[0]!;
    const head = await client.send(
      new HeadObjectCommand({ Bucket: bucket, Key: `${prefix}layers/sha256/${layer.digest.slice(7)}` }),
    );
    expect(head.Metadata).toMatchObject({
      'aenv-codec': 'zstd',
      'aenv-digest': layer.digest,
      'aenv-raw-size': String(raw.length),
      'aenv-compressed-size': String(head.ContentLength),
    });
    expect(head.ContentLength!).toBeLessThan(raw.length / 10);
    expect((await readFile(await repo.fetch(layer))).equals(raw)).toBe(true);
    await repo.close();
  });

  it('stores raw blobs (codec none) when compression is disabled', async () => {
    const repo = createSnapshotRepository({ ...options, compression: { enabled: false, level: 3 }, logger });
    const raw = Buffer.from('plain\n'.repeat(10_000));
    const path = join(local, 'plain');
    await writeFile(path, raw);
    const rec = await repo.create({
      source: { kind: 'paused', sandboxId: 'p' },
      resources: { cpuCount: 1, memoryMB: 128, diskSizeMB: 0 },
    });
    const done = await repo.publish(rec.id, {
      layers: [],
      artifacts: { memory: { path, mediaType: 'm' } },
      committed: {
        context: { envVars: {}, workdir: '/', exposedPorts: [], volumes: [], labels: {} },
        runtimeVersions: {},
        virtualizationMode: 'container',
      },
    });
    const head = await client.send(
      new HeadObjectCommand({ Bucket: bucket, Key: `${prefix}artifacts/${rec.id}/memory` }),
    );
    expect(head.Metadata).toMatchObject({
      'aenv-codec': 'none',
      'aenv-digest': done.committed!.artifacts.memory!.digest,
    });
    expect(head.ContentLength).toBe(raw.length);
    expect((await readFile(await repo.fetchArtifact(rec.id, 'memory'))).equals(raw)).toBe(true);
    await repo.close();
  });

  it('takes credentials from credential_process (argv, no shell)', async () => {
    const script = join(local, 'creds.mjs');
    await writeFile(
      script,
      `console.log(JSON.stringify({ Version: 1, AccessKeyId: ${JSON.stringify(accessKeyId)}, SecretAccessKey: ${JSON.stringify(secretAccessKey)}, Expiration: new Date(Date.now() + 3600e3).toISOString() }));\n`,
    );
    const oss = {
      ...options.oss!,
      accessKeyId: undefined,
      accessKeySecret: undefined,
      credentialProcess: [process.execPath, script],
    };
    const repo = createSnapshotRepository({ ...options, oss, logger });
    expect(Array.isArray(await repo.list())).toBe(true);
    await repo.close();
    const failing = createSnapshotRepository({
      ...options,
      oss: { ...oss, credentialProcess: `${process.execPath} -e "process.exit(3)"` },
      logger,
    });
    await expect(failing.list()).rejects.toThrow(/credential_process .* failed: exited with 3/);
    await failing.close();
  });

  it('reports an unreachable endpoint clearly', async () => {
    const repo = createSnapshotRepository({
      ...options,
      oss: { ...options.oss!, endpoint: 'http://127.0.0.1:1' },
      logger,
    });
    await expect(repo.list()).rejects.toMatchObject({
      reason: 'Backend',
      message: expect.stringMatching(/not reachable/),
    });
    await repo.close();
  });
});
