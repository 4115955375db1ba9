// Where an image's manifests and blobs come from: a registry, an OCI image layout directory (`oci:`), or a tar
// of one (`oci-archive:`, unpacked into a private temporary layout first).

import { mkdir, open, type FileHandle } from 'node:fs/promises';
import { constants as C } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { ImageError } from './errors.js';
import { parseImageDigest, verifyBuffer } from './digest.js';
import { MAX_MANIFEST_BYTES, parseManifestOrIndex, type Descriptor } from './manifest.js';
import type { BasicCredentials } from './credentials.js';
import type { RegistryClient } from './registry-client.js';
import type { LocalReference, RegistryReference } from './reference.js';
import { readTar } from './tar-reader.js';
import { below, openContained, readAllBounded, readContained, type ContainedPath } from './local-files.js';

export interface RootManifest {
  body: Buffer;
  contentType: string | undefined;
  digest: string;
}

export interface ImageSource {
  /** For messages: "docker.io/library/ubuntu:24.04", "oci:/srv/base:latest". */
  readonly name: string;
  /** The manifest or index the reference points at (digest-checked). */
  fetchRoot(signal?: AbortSignal): Promise<RootManifest>;
  /** A manifest by descriptor (digest- and size-checked). */
  fetchManifest(d: Descriptor, signal?: AbortSignal): Promise<Buffer>;
  /** A small blob (the image config) fully read and checked. */
  fetchBlob(d: Descriptor, limit: number, signal?: AbortSignal): Promise<Buffer>;
  /** A blob stream, unchecked: the caller verifies digest and size while reading. */
  openBlob(d: Descriptor, signal?: AbortSignal): Promise<Readable>;
}

export class RegistrySource implements ImageSource {
  readonly name: string;

  constructor(
    private readonly client: RegistryClient,
    private readonly ref: RegistryReference,
    private readonly credentials: BasicCredentials | undefined,
    name: string,
  ) {
    this.name = name;
  }

  private ctx(signal?: AbortSignal) {
    return { ...(signal ? { signal } : {}), ...(this.credentials ? { credentials: this.credentials } : {}) };
  }

  async fetchRoot(signal?: AbortSignal): Promise<RootManifest> {
    // Pinned by digest: ask for the digest (the tag, if also given, is informational).
    const reference = this.ref.digest ?? this.ref.tag ?? 'latest';
    return this.client.getManifest(this.ref, reference, this.ctx(signal));
  }

  async fetchManifest(d: Descriptor, signal?: AbortSignal): Promise<Buffer> {
    const m = await this.client.getManifest(this.ref, d.digest, this.ctx(signal));
    verifyBuffer(m.body, d, `manifest ${d.digest}`);
    return m.body;
  }

  async fetchBlob(d: Descriptor, limit: number, signal?: AbortSignal): Promise<Buffer> {
    if (d.size > limit)
      throw new ImageError('TooLarge', `blob ${d.digest} is ${d.size} bytes (limit ${limit})`);
    const blob = await this.client.openBlob(this.ref, d.digest, this.ctx(signal));
    const chunks: Buffer[] = [];
    let n = 0;
    for await (const c of blob.body) {
      n += (c as Buffer).length;
      if (n > d.size) {
        blob.body.destroy();
        throw new ImageError(
          'DigestMismatch',
          `blob ${d.digest}: size mismatch: more than the expected ${d.size} bytes`,
        );
      }
      chunks.push(c as Buffer);
    }
    const data = Buffer.concat(chunks);
    verifyBuffer(data, d, `blob ${d.digest}`);
    return data;
  }

  async openBlob(d: Descriptor, signal?: AbortSignal): Promise<Readable> {
    return (await this.client.openBlob(this.ref, d.digest, this.ctx(signal))).body;
  }
}

const REF_NAME = 'org.opencontainers.image.ref.name';
/** `oci-layout` is a one-line JSON file. */
const MAX_LAYOUT_FILE_BYTES = 64 * 1024;

/**
 * An OCI image layout directory (image-spec image-layout.md), read below its allowed directory without following
 * symlinks (local-files.ts). Messages name files of the layout, never their content.
 */
export class OciLayoutSource implements ImageSource {
  readonly name: string;

  constructor(
    private readonly layout: ContainedPath,
    private readonly tag: string | undefined,
    name: string,
  ) {
    this.name = name;
  }

  private blobPath(digest: string): ContainedPath {
    const { algorithm, hex } = parseImageDigest(digest, this.name);
    return below(this.layout, 'blobs', algorithm, hex);
  }

  private async openBlobFile(d: Descriptor): Promise<FileHandle> {
    let fh: FileHandle;
    try {
      fh = await openContained(this.blobPath(d.digest), 'file');
    } catch (e) {
      if (e instanceof ImageError && e.reason === 'NotFound') {
        throw new ImageError('NotFound', `${this.name}: blob ${d.digest} is missing from the layout`);
      }
      throw prefixed(this.name, e);
    }
    const { size } = await fh.stat();
    if (size !== d.size) {
      await fh.close();
      throw new ImageError(
        'DigestMismatch',
        `${this.name}: blob ${d.digest}: size mismatch: expected ${d.size} bytes, the file has ${size}`,
      );
    }
    return fh;
  }

  private async readBlob(d: Descriptor, limit: number): Promise<Buffer> {
    if (d.size > limit)
      throw new ImageError('TooLarge', `${this.name}: blob ${d.digest} is ${d.size} bytes (limit ${limit})`);
    const fh = await this.openBlobFile(d);
    let data: Buffer;
    try {
      data = await readAllBounded(fh, d.size, `${this.name}: blob ${d.digest}`);
    } catch (e) {
      throw e instanceof ImageError && e.reason === 'TooLarge'
        ? new ImageError('DigestMismatch', `${this.name}: blob ${d.digest}: more than ${d.size} bytes`)
        : e;
    } finally {
      await fh.close();
    }
    verifyBuffer(data, d, `${this.name}: blob ${d.digest}`);
    return data;
  }

  private async readLayoutFile(name: string, limit: number): Promise<Buffer> {
    try {
      return await readContained(below(this.layout, name), limit, name);
    } catch (e) {
      if (e instanceof ImageError && e.reason === 'NotFound') {
        throw new ImageError('NotFound', `${this.name}: not an OCI image layout (it has no ${name})`);
      }
      throw prefixed(this.name, e);
    }
  }

  async fetchRoot(): Promise<RootManifest> {
    const layout = parseJsonObject(await this.readLayoutFile('oci-layout', MAX_LAYOUT_FILE_BYTES));
    if (typeof layout?.imageLayoutVersion !== 'string') {
      throw new ImageError('UnsupportedImage', `${this.name}: oci-layout has no imageLayoutVersion`);
    }
    const indexBody = await this.readLayoutFile('index.json', MAX_MANIFEST_BYTES);
    const index = parseManifestOrIndex(indexBody, undefined, `${this.name} index.json`);
    if (index.kind !== 'index')
      throw new ImageError('UnsupportedImage', `${this.name}: index.json is not an image index`);
    let chosen: Descriptor | undefined;
    if (this.tag !== undefined) {
      chosen = index.manifests.find((m) => m.annotations?.[REF_NAME] === this.tag);
      if (!chosen) {
        const tags = index.manifests.map((m) => m.annotations?.[REF_NAME]).filter((t): t is string => !!t);
        throw new ImageError(
          'NotFound',
          `${this.name}: no image tagged "${this.tag}" in the layout (tags: ${tags.slice(0, 20).join(', ') || 'none'})`,
        );
      }
    } else if (index.manifests.length === 1) {
      chosen = index.manifests[0];
    } else {
      throw new ImageError(
        'InvalidReference',
        `${this.name}: the layout holds ${index.manifests.length} images; name one with oci:<dir>:<tag>`,
      );
    }
    const body = await this.readBlob(chosen!, MAX_MANIFEST_BYTES);
    return { body, contentType: chosen!.mediaType || undefined, digest: chosen!.digest };
  }

  fetchManifest(d: Descriptor): Promise<Buffer> {
    return this.readBlob(d, MAX_MANIFEST_BYTES);
  }

  fetchBlob(d: Descriptor, limit: number): Promise<Buffer> {
    return this.readBlob(d, limit);
  }

  async openBlob(d: Descriptor): Promise<Readable> {
    const fh = await this.openBlobFile(d);
    // `end` is inclusive: at most one byte more than announced is read, which the verifier then rejects.
    return fh.createReadStream({ highWaterMark: 1024 * 1024, start: 0, end: d.size });
  }
}

function parseJsonObject(body: Buffer): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(body.toString('utf8'));
    return typeof v === 'object' && v !== null && !Array.isArray(v)
      ? (v as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined; // the parser's message quotes the content: never shown
  }
}

function prefixed(name: string, e: unknown): unknown {
  return e instanceof ImageError ? new ImageError(e.reason, `${name}: ${e.message}`, { cause: e }) : e;
}

/** Identifies a local file's content cheaply (changes when the file is replaced or rewritten). */
export async function fileStamp(file: ContainedPath): Promise<string> {
  const fh = await openContained(file, 'file');
  try {
    const s = await fh.stat();
    return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
  } finally {
    await fh.close();
  }
}

const LAYOUT_FILE = /^(oci-layout|index\.json|blobs\/(sha256|sha512)\/[0-9a-f]{64,128})$/;

/**
 * Extracts the layout files of an oci-archive (oci-layout, index.json, blobs/<alg>/<hex>) into `dir`, which must
 * be an empty private directory. Anything else in the archive is ignored; nothing is written outside `dir`. An
 * archive larger than `maxBytes` is refused (checked before and while reading).
 */
export async function extractOciArchive(
  file: ContainedPath,
  name: string,
  dir: string,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<void> {
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
  await mkdir(join(dir, 'blobs', 'sha512'), { recursive: true });
  let fh: FileHandle;
  try {
    fh = await openContained(file, 'file');
  } catch (e) {
    throw prefixed(name, e);
  }
  const { size } = await fh.stat();
  if (size > maxBytes) {
    await fh.close();
    throw new ImageError('TooLarge', `${name}: the archive is ${size} bytes (limit ${maxBytes})`);
  }
  const source = fh.createReadStream({ highWaterMark: 1024 * 1024, start: 0, end: maxBytes });
  let read = 0;
  const bounded = async function* (): AsyncGenerator<Buffer> {
    for await (const chunk of source) {
      read += (chunk as Buffer).length;
      if (read > maxBytes)
        throw new ImageError('TooLarge', `${name}: the archive is larger than ${maxBytes} bytes`);
      yield chunk as Buffer;
    }
  };
  try {
    for await (const entry of readTar(bounded())) {
      signal?.throwIfAborted();
      const entryName = entry.header.name.replace(/^(\.\/)+/, '').replace(/^\/+/, '');
      if (entry.header.type !== 'file' || !LAYOUT_FILE.test(entryName)) continue;
      const out = await open(join(dir, entryName), C.O_WRONLY | C.O_CREAT | C.O_TRUNC | C.O_NOFOLLOW, 0o600);
      try {
        for await (const chunk of entry.body()) await out.write(chunk);
      } finally {
        await out.close();
      }
    }
  } catch (e) {
    throw prefixed(name, e);
  } finally {
    source.destroy();
  }
}

export function localName(ref: LocalReference): string {
  return ref.tag === undefined ? `${ref.transport}:${ref.path}` : `${ref.transport}:${ref.path}:${ref.tag}`;
}
