// Where an image's manifests and blobs come from: a registry, an OCI image layout directory (`oci:`), or a tar
// of one (`oci-archive:`, unpacked into a private temporary layout first).

import { mkdir, open, readFile, stat } from 'node:fs/promises';
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
      throw new ImageError('UnsupportedImage', `blob ${d.digest} is ${d.size} bytes (limit ${limit})`);
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

/** An OCI image layout directory (image-spec image-layout.md). */
export class OciLayoutSource implements ImageSource {
  readonly name: string;

  constructor(
    private readonly dir: string,
    private readonly tag: string | undefined,
    name: string,
  ) {
    this.name = name;
  }

  private blobPath(digest: string): string {
    const { algorithm, hex } = parseImageDigest(digest, this.name);
    return join(this.dir, 'blobs', algorithm, hex);
  }

  private async readBlob(d: Descriptor, limit: number): Promise<Buffer> {
    if (d.size > limit)
      throw new ImageError(
        'UnsupportedImage',
        `${this.name}: blob ${d.digest} is ${d.size} bytes (limit ${limit})`,
      );
    let data: Buffer;
    try {
      // O_NOFOLLOW on the last component only: the layout is the operator's own directory.
      const fh = await open(this.blobPath(d.digest), C.O_RDONLY | C.O_NOFOLLOW);
      try {
        data = await fh.readFile();
      } finally {
        await fh.close();
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new ImageError('NotFound', `${this.name}: blob ${d.digest} is missing from the layout`);
      }
      throw new ImageError('Internal', `${this.name}: reading blob ${d.digest}: ${(e as Error).message}`, {
        cause: e,
      });
    }
    verifyBuffer(data, d, `${this.name}: blob ${d.digest}`);
    return data;
  }

  async fetchRoot(): Promise<RootManifest> {
    let indexBody: Buffer;
    try {
      const layout = JSON.parse(await readFile(join(this.dir, 'oci-layout'), 'utf8')) as {
        imageLayoutVersion?: unknown;
      };
      if (typeof layout.imageLayoutVersion !== 'string') throw new Error('no imageLayoutVersion');
      indexBody = await readFile(join(this.dir, 'index.json'));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') {
        throw new ImageError(
          'NotFound',
          `${this.name}: ${this.dir} is not an OCI image layout (no oci-layout or index.json)`,
        );
      }
      throw new ImageError('UnsupportedImage', `${this.name}: invalid OCI layout: ${(e as Error).message}`, {
        cause: e,
      });
    }
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
          `${this.name}: no image tagged "${this.tag}" in the layout (tags: ${tags.join(', ') || 'none'})`,
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
    const path = this.blobPath(d.digest);
    try {
      const fh = await open(path, C.O_RDONLY | C.O_NOFOLLOW);
      return fh.createReadStream({ highWaterMark: 1024 * 1024 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new ImageError('NotFound', `${this.name}: blob ${d.digest} is missing from the layout`);
      }
      throw new ImageError('Internal', `${this.name}: opening blob ${d.digest}: ${(e as Error).message}`, {
        cause: e,
      });
    }
  }
}

/** Identifies a local file's content cheaply (changes when the file is replaced or rewritten). */
export async function fileStamp(path: string): Promise<string> {
  try {
    const s = await stat(path);
    return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      throw new ImageError('NotFound', `${path} does not exist`);
    throw new ImageError('Internal', `stat ${path}: ${(e as Error).message}`, { cause: e });
  }
}

const LAYOUT_FILE = /^(oci-layout|index\.json|blobs\/(sha256|sha512)\/[0-9a-f]{64,128})$/;

/**
 * Extracts the layout files of an oci-archive (oci-layout, index.json, blobs/<alg>/<hex>) into `dir`, which must
 * be an empty private directory. Anything else in the archive is ignored; nothing is written outside `dir`.
 */
export async function extractOciArchive(file: string, dir: string, signal?: AbortSignal): Promise<void> {
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
  await mkdir(join(dir, 'blobs', 'sha512'), { recursive: true });
  let source: Readable;
  try {
    const fh = await open(file, C.O_RDONLY);
    source = fh.createReadStream({ highWaterMark: 1024 * 1024 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      throw new ImageError('NotFound', `oci-archive ${file} does not exist`);
    throw new ImageError('Internal', `opening ${file}: ${(e as Error).message}`, { cause: e });
  }
  try {
    for await (const entry of readTar(source)) {
      signal?.throwIfAborted();
      const name = entry.header.name.replace(/^(\.\/)+/, '').replace(/^\/+/, '');
      if (entry.header.type !== 'file' || !LAYOUT_FILE.test(name)) continue;
      const fh = await open(join(dir, name), C.O_WRONLY | C.O_CREAT | C.O_TRUNC | C.O_NOFOLLOW, 0o600);
      try {
        for await (const chunk of entry.body()) await fh.write(chunk);
      } finally {
        await fh.close();
      }
    }
  } catch (e) {
    if (e instanceof ImageError) {
      throw new ImageError(e.kind, `oci-archive ${file}: ${e.message}`, { cause: e });
    }
    throw e;
  } finally {
    source.destroy();
  }
}

export function localName(ref: LocalReference): string {
  return ref.tag === undefined ? `${ref.transport}:${ref.path}` : `${ref.transport}:${ref.path}:${ref.tag}`;
}
