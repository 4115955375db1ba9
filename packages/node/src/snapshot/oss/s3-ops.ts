import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  UploadPartCommand,
  type S3Client,
} from '@aws-sdk/client-s3';

/** Objects up to this size go up in one PUT; larger ones as a multipart upload. */
const SINGLE_PUT_MAX = 16 * 1024 * 1024;
const MIN_PART_SIZE = 16 * 1024 * 1024;
const MAX_PARTS = 9000;
const PART_CONCURRENCY = 4;

export interface HeadResult {
  etag: string;
  size: number;
  lastModifiedMs: number;
  metadata: Record<string, string>;
}

export interface ListedObject {
  key: string;
  etag: string;
  size: number;
  lastModifiedMs: number;
}

export class PreconditionFailed extends Error {
  constructor(key: string) {
    super(`precondition failed for ${key}`);
    this.name = 'PreconditionFailed';
  }
}

function status(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

export function isNotFound(err: unknown): boolean {
  const name = (err as Error | null)?.name;
  return name === 'NoSuchKey' || name === 'NotFound' || status(err) === 404;
}

/** 412, or 409 ConditionalRequestConflict (S3's answer when two conditional writes race). */
function isPrecondition(err: unknown): boolean {
  const s = status(err);
  return s === 412 || s === 409 || (err as Error | null)?.name === 'PreconditionFailed';
}

/** Bucket + prefix bound S3 calls; keys given here are relative to the prefix. */
export class S3Ops {
  /** Cleared when the server ignores or rejects `If-Match` on DELETE (see the capability probe). */
  conditionalDelete = true;

  constructor(
    readonly client: S3Client,
    readonly bucket: string,
    readonly prefix: string,
  ) {}

  full(key: string): string {
    return this.prefix + key;
  }

  async headBucket(): Promise<void> {
    await this.client.send(new HeadBucketCommand({ Bucket: this.bucket }));
  }

  async getText(key: string): Promise<string | undefined> {
    return (await this.getVersionedText(key))?.text;
  }

  /** The object's text and ETag, or undefined when it does not exist. */
  async getVersionedText(key: string): Promise<{ text: string; etag: string } | undefined> {
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.full(key) }));
      return { text: (await r.Body?.transformToString('utf8')) ?? '', etag: r.ETag ?? '' };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** The object's body stream and metadata, or undefined when it does not exist. */
  async getStream(key: string): Promise<{ body: Readable; metadata: Record<string, string> } | undefined> {
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.full(key) }));
      return { body: r.Body as Readable, metadata: r.Metadata ?? {} };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async head(key: string): Promise<HeadResult | undefined> {
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.full(key) }));
      return {
        etag: r.ETag ?? '',
        size: r.ContentLength ?? 0,
        lastModifiedMs: r.LastModified?.getTime() ?? 0,
        metadata: r.Metadata ?? {},
      };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /**
   * PUT a small body. `ifNoneMatch: '*'` = create only; `ifMatch` = replace only that version.
   * Throws PreconditionFailed when the condition does not hold; returns the new ETag.
   */
  async putText(
    key: string,
    body: string,
    cond: { ifNoneMatch?: '*'; ifMatch?: string } = {},
  ): Promise<string> {
    try {
      const r = await this.client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: this.full(key),
          Body: body,
          ContentType: 'application/json',
          ...(cond.ifNoneMatch ? { IfNoneMatch: cond.ifNoneMatch } : {}),
          ...(cond.ifMatch ? { IfMatch: cond.ifMatch } : {}),
        }),
      );
      return r.ETag ?? '';
    } catch (err) {
      if ((cond.ifNoneMatch || cond.ifMatch) && isPrecondition(err)) throw new PreconditionFailed(key);
      throw err;
    }
  }

  /** Idempotent delete; with `ifMatch`, PreconditionFailed when the object changed. */
  async delete(key: string, ifMatch?: string): Promise<void> {
    if (!this.conditionalDelete) ifMatch = undefined;
    try {
      await this.client.send(
        new DeleteObjectCommand({
          Bucket: this.bucket,
          Key: this.full(key),
          ...(ifMatch ? { IfMatch: ifMatch } : {}),
        }),
      );
    } catch (err) {
      if (isNotFound(err)) return;
      if (ifMatch && isPrecondition(err)) throw new PreconditionFailed(key);
      throw err;
    }
  }

  async list(prefix: string): Promise<ListedObject[]> {
    const out: ListedObject[] = [];
    let token: string | undefined;
    do {
      const r = await this.client.send(
        new ListObjectsV2Command({
          Bucket: this.bucket,
          Prefix: this.full(prefix),
          ContinuationToken: token,
        }),
      );
      for (const o of r.Contents ?? []) {
        if (!o.Key) continue;
        out.push({
          key: o.Key.slice(this.prefix.length),
          etag: o.ETag ?? '',
          size: o.Size ?? 0,
          lastModifiedMs: o.LastModified?.getTime() ?? 0,
        });
      }
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return out;
  }

  /** The next path segment of every key under `prefix` (ListObjectsV2 with delimiter '/'). */
  async listChildren(prefix: string): Promise<string[]> {
    const out: string[] = [];
    let token: string | undefined;
    do {
      const r = await this.client.send(
        new ListObjectsV2Command({
          Bucket: this.bucket,
          Prefix: this.full(prefix),
          Delimiter: '/',
          ContinuationToken: token,
        }),
      );
      for (const p of r.CommonPrefixes ?? []) {
        if (p.Prefix) out.push(p.Prefix.slice(this.full(prefix).length).replace(/\/$/, ''));
      }
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return out;
  }

  /** Uploads a local file; single PUT or multipart — either way the object appears whole or not at all. */
  async putFile(key: string, file: string, size: number, metadata: Record<string, string>): Promise<void> {
    const Key = this.full(key);
    if (size <= SINGLE_PUT_MAX) {
      await this.client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key,
          Body: createReadStream(file),
          ContentLength: size,
          Metadata: metadata,
        }),
      );
      return;
    }
    const partSize = Math.max(MIN_PART_SIZE, Math.ceil(size / MAX_PARTS));
    const created = await this.client.send(
      new CreateMultipartUploadCommand({ Bucket: this.bucket, Key, Metadata: metadata }),
    );
    const UploadId = created.UploadId;
    if (!UploadId) throw new Error(`CreateMultipartUpload for ${Key} returned no UploadId`);
    try {
      const count = Math.ceil(size / partSize);
      const etags: string[] = new Array(count);
      let next = 0;
      const worker = async () => {
        while (next < count) {
          const i = next++;
          const start = i * partSize;
          const end = Math.min(size, start + partSize);
          const r = await this.client.send(
            new UploadPartCommand({
              Bucket: this.bucket,
              Key,
              UploadId,
              PartNumber: i + 1,
              Body: createReadStream(file, { start, end: end - 1 }),
              ContentLength: end - start,
            }),
          );
          etags[i] = r.ETag ?? '';
        }
      };
      await Promise.all(Array.from({ length: Math.min(PART_CONCURRENCY, count) }, worker));
      await this.client.send(
        new CompleteMultipartUploadCommand({
          Bucket: this.bucket,
          Key,
          UploadId,
          MultipartUpload: { Parts: etags.map((ETag, i) => ({ ETag, PartNumber: i + 1 })) },
        }),
      );
    } catch (err) {
      await this.client
        .send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key, UploadId }))
        .catch(() => {});
      throw err;
    }
  }

  /** Aborts multipart uploads under the prefix started before `cutoffMs` (left by crashed publishers). */
  async abortStaleUploads(cutoffMs: number): Promise<number> {
    let aborted = 0;
    let keyMarker: string | undefined;
    let uploadIdMarker: string | undefined;
    do {
      const r = await this.client.send(
        new ListMultipartUploadsCommand({
          Bucket: this.bucket,
          Prefix: this.prefix,
          KeyMarker: keyMarker,
          UploadIdMarker: uploadIdMarker,
        }),
      );
      for (const u of r.Uploads ?? []) {
        if (!u.Key || !u.UploadId || (u.Initiated?.getTime() ?? 0) >= cutoffMs) continue;
        await this.client.send(
          new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: u.Key, UploadId: u.UploadId }),
        );
        aborted++;
      }
      keyMarker = r.IsTruncated ? r.NextKeyMarker : undefined;
      uploadIdMarker = r.IsTruncated ? r.NextUploadIdMarker : undefined;
    } while (keyMarker);
    return aborted;
  }
}
