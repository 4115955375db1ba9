// A snapshot repository that the nodes of one e2e cluster share: moto S3 (the test services') or a directory.
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import {
  AbortMultipartUploadCommand,
  DeleteObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  S3Client,
} from '@aws-sdk/client-s3';

/** `oss`: a prefix of its own in the test S3 bucket; `posix_fs`: a directory of its own. */
export type RepositoryKind = 'oss' | 'posix_fs';

export const REPOSITORY_KINDS: readonly RepositoryKind[] = ['oss', 'posix_fs'];

const s3 = {
  endpoint: process.env.AENV_TEST_S3_ENDPOINT ?? 'http://127.0.0.1:9000',
  bucket: process.env.AENV_TEST_S3_BUCKET ?? 'aenv-test',
  region: process.env.AENV_TEST_S3_REGION ?? 'us-east-1',
  accessKeyId: process.env.AENV_TEST_S3_ACCESS_KEY ?? 'aenvtest',
  secretAccessKey: process.env.AENV_TEST_S3_SECRET_KEY ?? 'aenvtestsecret',
};

export interface SharedRepository {
  /** The `[snapshot]` and `[backend.*]` lines of every node's config. */
  toml: string[];
  /** Removes everything the nodes wrote there (objects and unfinished uploads under the prefix, or the dir). */
  cleanup(): Promise<void>;
}

/** A new, empty repository of `kind`, named after `name` (a short tag of the test using it) and a random id. */
export function sharedRepository(kind: RepositoryKind, name: string): SharedRepository {
  const unique = `${name}-${randomUUID().slice(0, 8)}`;
  if (kind === 'posix_fs') {
    const dir = `/var/lib/aenv-e2e/${unique}`;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return {
      toml: [
        '[snapshot]',
        'repository_backend = "posix_fs"',
        '[backend.posix_fs]',
        `snapshot_store = "${dir}"`,
      ],
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const prefix = `${unique}/`;
  return {
    toml: [
      '[snapshot]',
      'repository_backend = "oss"',
      '[backend.oss]',
      `endpoint = "${s3.endpoint}"`,
      `bucket = "${s3.bucket}"`,
      `region = "${s3.region}"`,
      'addressing_style = "path"',
      `prefix = "${prefix}"`,
      `access_key_id = "${s3.accessKeyId}"`,
      `access_key_secret = "${s3.secretAccessKey}"`,
    ],
    cleanup: () => emptyPrefix(prefix),
  };
}

async function emptyPrefix(prefix: string): Promise<void> {
  const client = new S3Client({
    endpoint: s3.endpoint,
    region: s3.region,
    forcePathStyle: true,
    credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
  });
  try {
    // Uploads a node killed -9 left unfinished hold parts that no listing of objects shows.
    const uploads = await client.send(new ListMultipartUploadsCommand({ Bucket: s3.bucket, Prefix: prefix }));
    for (const u of uploads.Uploads ?? [])
      await client.send(
        new AbortMultipartUploadCommand({ Bucket: s3.bucket, Key: u.Key!, UploadId: u.UploadId! }),
      );
    let token: string | undefined;
    do {
      const page = await client.send(
        new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: prefix, ContinuationToken: token }),
      );
      for (const o of page.Contents ?? [])
        await client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: o.Key! }));
      token = page.NextContinuationToken;
    } while (token);
  } finally {
    client.destroy();
  }
}
