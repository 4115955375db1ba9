// Files uploaded for COPY steps, stored by the SDK's filesHash (which covers the COPY arguments and the files'
// paths, modes, sizes and contents — not the tar bytes, so it cannot be recomputed from the upload; the store
// checks instead that the upload is a well-formed tar or tar.gz of relative paths).
//
//   <dir>/<hash>.tar | <hash>.tar.gz   complete uploads (mtime = last use)
//   <dir>/tmp/                         uploads in progress; emptied at startup
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { link, mkdir, open, readdir, rm, stat, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { once } from 'node:events';
import type { Readable } from 'node:stream';
import { finished, pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import tar from 'tar-stream';
import { DomainError, ErrorKind } from '@aenv/protocol';

export interface StoredFiles {
  path: string;
  gzip: boolean;
  size: number;
}

export interface TemplateFileStoreOptions {
  dir: string;
  /** Key of the upload-link signatures. */
  secret: string | Buffer;
  /** Largest upload accepted (bytes of the request body). */
  maxUploadBytes: number;
  /** How long an upload link stays valid. */
  linkTtlMs?: number;
  /** Bytes the node's build artefacts may still take (`[template_build].artefacts_quota_mb`), after pruning. */
  room?: () => Promise<number>;
}

/** An upload the caller got wrong (the endpoint answers it; anything else is an internal failure). */
export class UploadError extends DomainError {
  constructor(
    kind: typeof ErrorKind.InvalidArgument | typeof ErrorKind.TooLarge | typeof ErrorKind.InsufficientStorage,
    message: string,
  ) {
    super(kind, message);
    this.name = 'UploadError';
  }
}

const HASH_RE = /^[0-9a-f]{64}$/;
const DEFAULT_LINK_TTL_MS = 60 * 60_000;

export function isFilesHash(hash: string): boolean {
  return HASH_RE.test(hash);
}

async function isGzip(path: string): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(2);
    const { bytesRead } = await fh.read(buf, 0, 2, 0);
    return bytesRead === 2 && buf[0] === 0x1f && buf[1] === 0x8b;
  } finally {
    await fh.close();
  }
}

function checkEntryName(name: string, symlinks: Set<string>): void {
  const clean = name.replace(/^\.\/+/, '').replace(/\/+$/, '');
  if (name.startsWith('/'))
    throw new UploadError(ErrorKind.InvalidArgument, `tar entry ${JSON.stringify(name)} is an absolute path`);
  const parts = clean.split('/');
  if (parts.includes('..'))
    throw new UploadError(
      ErrorKind.InvalidArgument,
      `tar entry ${JSON.stringify(name)} leaves the build context`,
    );
  for (let i = 1; i < parts.length; i++) {
    if (symlinks.has(parts.slice(0, i).join('/'))) {
      throw new UploadError(
        ErrorKind.InvalidArgument,
        `tar entry ${JSON.stringify(name)} lies below a symlink of the same archive`,
      );
    }
  }
}

/** Reads the whole archive and rejects anything that is not a plain tar(.gz) of relative files, dirs and links. */
export async function validateArchive(path: string, gzip: boolean): Promise<{ entries: number }> {
  const extract = tar.extract();
  const symlinks = new Set<string>();
  let entries = 0;
  // The first problem is remembered and the rest of the archive only drained: failing the stream from inside
  // an entry handler does not reliably reach the pipeline with tar-stream's streams.
  let problem: UploadError | undefined;
  extract.on('entry', (header, body, next) => {
    entries++;
    if (!problem) {
      try {
        checkEntryName(header.name, symlinks);
        const t = header.type;
        if (t !== 'file' && t !== 'directory' && t !== 'symlink' && t !== 'link' && t !== 'contiguous-file') {
          throw new UploadError(
            ErrorKind.InvalidArgument,
            `tar entry ${JSON.stringify(header.name)} has unsupported type ${t}`,
          );
        }
        if (t === 'symlink') symlinks.add(header.name.replace(/^\.\/+/, '').replace(/\/+$/, ''));
        if (t === 'link') checkEntryName(header.linkname ?? '', symlinks);
      } catch (e) {
        problem =
          e instanceof UploadError ? e : new UploadError(ErrorKind.InvalidArgument, (e as Error).message);
      }
    }
    body.on('end', () => next());
    body.resume();
  });
  try {
    const source = createReadStream(path);
    await (gzip ? pipeline(source, createGunzip(), extract) : pipeline(source, extract));
  } catch (e) {
    throw new UploadError(
      ErrorKind.InvalidArgument,
      `the upload is not a valid tar${gzip ? '.gz' : ''} archive: ${(e as Error).message}`,
    );
  }
  if (problem) throw problem;
  return { entries };
}

export class TemplateFileStore {
  private readonly tmpDir: string;
  private readonly ttlMs: number;

  constructor(private readonly opts: TemplateFileStoreOptions) {
    this.tmpDir = join(opts.dir, 'tmp');
    this.ttlMs = opts.linkTtlMs ?? DEFAULT_LINK_TTL_MS;
  }

  async init(): Promise<void> {
    await mkdir(this.tmpDir, { recursive: true, mode: 0o700 });
    for (const name of await readdir(this.tmpDir))
      await rm(join(this.tmpDir, name), { recursive: true, force: true });
  }

  private pathFor(hash: string, gzip: boolean): string {
    return join(this.opts.dir, `${hash}.tar${gzip ? '.gz' : ''}`);
  }

  /** Synchronous presence check (build validation). */
  hasSync(hash: string): boolean {
    return (
      isFilesHash(hash) && (existsSync(this.pathFor(hash, true)) || existsSync(this.pathFor(hash, false)))
    );
  }

  async get(hash: string): Promise<StoredFiles | undefined> {
    if (!isFilesHash(hash)) return undefined;
    for (const gzip of [true, false]) {
      const path = this.pathFor(hash, gzip);
      try {
        const st = await stat(path);
        return { path, gzip, size: st.size };
      } catch {
        // try the other form
      }
    }
    return undefined;
  }

  /** Marks the files as used now (eviction is by last use). */
  async touch(hash: string): Promise<void> {
    const f = await this.get(hash);
    if (f) {
      const now = new Date();
      await utimes(f.path, now, now).catch(() => {});
    }
  }

  private sign(templateId: string, hash: string, expires: number): string {
    return createHmac('sha256', this.opts.secret)
      .update(`template-upload\n${templateId}\n${hash}\n${expires}`)
      .digest('hex');
  }

  /** `<expiry unix seconds>.<hmac>` binding the link to one template and one hash. */
  uploadToken(templateId: string, hash: string, now = Date.now()): string {
    const expires = Math.floor((now + this.ttlMs) / 1000);
    return `${expires}.${this.sign(templateId, hash, expires)}`;
  }

  verifyToken(
    templateId: string,
    hash: string,
    token: string,
    now = Date.now(),
  ): 'ok' | 'invalid' | 'expired' {
    const m = /^(\d{1,12})\.([0-9a-f]{64})$/.exec(token);
    if (!m) return 'invalid';
    const expires = Number(m[1]);
    const expected = Buffer.from(this.sign(templateId, hash, expires), 'hex');
    if (!timingSafeEqual(expected, Buffer.from(m[2]!, 'hex'))) return 'invalid';
    return expires * 1000 < now ? 'expired' : 'ok';
  }

  /**
   * Streams an upload to disk (never held in memory), checks it is a tar or tar.gz, and stores it under `hash`.
   * An upload of a hash that is already stored is read and dropped; the stored files stay as they were.
   */
  async store(hash: string, body: Readable, declaredLength?: number): Promise<StoredFiles> {
    if (!isFilesHash(hash))
      throw new UploadError(ErrorKind.InvalidArgument, `invalid files hash ${JSON.stringify(hash)}`);
    if (declaredLength !== undefined && declaredLength > this.opts.maxUploadBytes) {
      throw new UploadError(
        ErrorKind.TooLarge,
        `upload of ${declaredLength} bytes is larger than the limit of ${this.opts.maxUploadBytes}`,
      );
    }
    const room = (await this.opts.room?.()) ?? Infinity;
    if (declaredLength !== undefined && declaredLength > room) throw this.noRoom(room);
    const tmp = join(this.tmpDir, `${hash}.${randomUUID()}`);
    try {
      const bytes = await this.spool(body, tmp, room);
      if (declaredLength !== undefined && bytes !== declaredLength) {
        throw new UploadError(
          ErrorKind.InvalidArgument,
          `upload ended after ${bytes} of ${declaredLength} bytes`,
        );
      }
      if (bytes === 0) throw new UploadError(ErrorKind.InvalidArgument, 'the upload is empty');
      const gzip = await isGzip(tmp);
      await validateArchive(tmp, gzip);
      const existing = await this.get(hash);
      if (existing) return existing;
      const dest = this.pathFor(hash, gzip);
      try {
        // link() never replaces: two concurrent uploads of one hash store it once.
        await link(tmp, dest);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      return { path: dest, gzip, size: bytes };
    } finally {
      await rm(tmp, { force: true });
    }
  }

  /**
   * Copies the body to `path`, stopping (without destroying the body, so an error answer can still be sent) once
   * it passes the size limit.
   */
  private noRoom(room: number): UploadError {
    return new UploadError(
      ErrorKind.InsufficientStorage,
      `the build artefacts of this node (build logs, uploads, build cache) are at template_build.artefacts_quota_mb: ${Math.floor(room / 1024 ** 2)} MiB left, not enough for this upload; retry after builds finished or with a smaller build context`,
    );
  }

  private async spool(body: Readable, path: string, room: number): Promise<number> {
    const out = createWriteStream(path, { mode: 0o600, flags: 'wx' });
    const closed = finished(out);
    let bytes = 0;
    try {
      for await (const chunk of body.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
        bytes += chunk.length;
        if (bytes > this.opts.maxUploadBytes) {
          throw new UploadError(
            ErrorKind.TooLarge,
            `upload larger than the limit of ${this.opts.maxUploadBytes} bytes`,
          );
        }
        if (bytes > room) throw this.noRoom(room);
        if (!out.write(chunk)) await Promise.race([once(out, 'drain'), closed]);
      }
    } finally {
      out.end();
      await closed;
    }
    return bytes;
  }

  /** Removes uploads not used for `maxAgeMs`, keeping `keep`. */
  async gc(maxAgeMs: number, keep: ReadonlySet<string> = new Set(), now = Date.now()): Promise<string[]> {
    const removed: string[] = [];
    for (const name of await readdir(this.opts.dir)) {
      const m = /^([0-9a-f]{64})\.tar(\.gz)?$/.exec(name);
      if (!m || keep.has(m[1]!)) continue;
      const path = join(this.opts.dir, name);
      const st = await stat(path).catch(() => undefined);
      if (st && now - st.mtimeMs > maxAgeMs) {
        await rm(path, { force: true });
        removed.push(m[1]!);
      }
    }
    return removed;
  }
}
