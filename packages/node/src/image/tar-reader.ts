// A streaming tar reader (ustar, GNU long names, PAX) that keeps names and xattr values byte-exact.
//
// Why not tar-stream's extractor: it decodes PAX values as UTF-8, which corrupts binary xattrs such as
// security.capability, and it decodes names as UTF-8, which is lossy for non-UTF-8 file names. Here every name
// is a "byte string": a JS string holding one char per byte (latin1), converted back with
// Buffer.from(s, 'latin1') at the filesystem boundary. Path logic works unchanged because "/" and "." are ASCII.

import { ImageError } from './errors.js';

export type TarEntryType = 'file' | 'hardlink' | 'symlink' | 'chardev' | 'blockdev' | 'directory' | 'fifo';

export interface TarHeader {
  /** Entry name as a byte string (see module comment). */
  name: string;
  type: TarEntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Seconds since the epoch (fractional with PAX). */
  mtime: number;
  /** Link target as a byte string (symlinks and hardlinks). */
  linkname: string;
  devmajor: number;
  devminor: number;
  /** From PAX "SCHILY.xattr.<name>" records; values are raw bytes. */
  xattrs: Map<string, Buffer>;
}

export interface TarEntry {
  header: TarHeader;
  /** The entry's data. Must be consumed (or left alone: the reader skips what is not read). */
  body(): AsyncGenerator<Buffer>;
  /** The whole body as one buffer (for small entries). */
  readAll(): Promise<Buffer>;
}

const BLOCK = 512;
const MAX_META_BYTES = 1024 * 1024; // PAX / GNU long-name records larger than this are hostile

function tarError(message: string): ImageError {
  return new ImageError('UnsupportedImage', `layer tar: ${message}`);
}

/** Pulls exact byte counts out of an async chunk stream. */
class ByteReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private done = false;
  private readonly it: AsyncIterator<Buffer>;

  constructor(source: AsyncIterable<Buffer>) {
    this.it = source[Symbol.asyncIterator]();
  }

  private async fill(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    if (r.done) {
      this.done = true;
      return false;
    }
    const chunk = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value as Uint8Array);
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
    return true;
  }

  /** Exactly n bytes, or null at a clean end of stream before any byte; throws on a truncated stream. */
  async readExact(n: number): Promise<Buffer | null> {
    while (this.buffered < n) {
      if (!(await this.fill())) {
        if (this.buffered === 0) return null;
        throw tarError('unexpected end of archive');
      }
    }
    return this.take(n);
  }

  private take(n: number): Buffer {
    const first = this.chunks[0]!;
    if (first.length === n) {
      this.chunks.shift();
      this.buffered -= n;
      return first;
    }
    if (first.length > n) {
      this.chunks[0] = first.subarray(n);
      this.buffered -= n;
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0]!;
      const k = Math.min(c.length, n - off);
      c.copy(out, off, 0, k);
      off += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    this.buffered -= n;
    return out;
  }

  /** Yields up to n bytes as they arrive. */
  async *stream(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (this.buffered === 0 && !(await this.fill()))
        throw tarError('unexpected end of archive inside an entry');
      const c = this.chunks[0];
      if (!c) continue;
      const k = Math.min(c.length, left);
      yield this.take(k);
      left -= k;
    }
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.stream(n)) {
      // discard
    }
  }

  /** Reads the rest of the stream (so that hashing streams upstream see every byte). */
  async drain(): Promise<void> {
    this.chunks = [];
    this.buffered = 0;
    while (await this.fill()) {
      this.chunks = [];
      this.buffered = 0;
    }
  }
}

function readString(buf: Buffer, off: number, len: number): string {
  const end = buf.indexOf(0, off);
  return buf.toString('latin1', off, end < 0 || end > off + len ? off + len : end);
}

function readNumber(buf: Buffer, off: number, len: number, field: string): number {
  const first = buf[off]!;
  if (first & 0x80) {
    // GNU base-256: big-endian two's complement; negative values are not meaningful for us.
    if (first === 0xff) throw tarError(`negative ${field}`);
    let v = first & 0x7f;
    for (let i = 1; i < len; i++) {
      v = v * 256 + buf[off + i]!;
      if (!Number.isSafeInteger(v)) throw tarError(`${field} too large`);
    }
    return v;
  }
  const s = buf
    .toString('latin1', off, off + len)
    .replace(/\0.*$/s, '')
    .trim();
  if (s === '') return 0;
  if (!/^[0-7]+$/.test(s)) throw tarError(`invalid octal ${field} "${s}"`);
  return parseInt(s, 8);
}

function checksumOk(block: Buffer): boolean {
  const stored = readNumber(block, 148, 8, 'checksum');
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 32 : block[i]!;
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return stored === unsigned || stored === signed;
}

function isZeroBlock(block: Buffer): boolean {
  for (let i = 0; i < BLOCK; i++) if (block[i] !== 0) return false;
  return true;
}

interface PaxRecords {
  path?: string;
  linkpath?: string;
  size?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  xattrs: Map<string, Buffer>;
}

function parsePax(buf: Buffer): PaxRecords {
  const out: PaxRecords = { xattrs: new Map() };
  let off = 0;
  while (off < buf.length) {
    if (buf[off] === 0) break; // trailing NUL padding
    const sp = buf.indexOf(0x20, off);
    if (sp < 0) throw tarError('malformed PAX record (no length)');
    const lenStr = buf.toString('latin1', off, sp);
    if (!/^\d+$/.test(lenStr)) throw tarError(`malformed PAX record length "${lenStr}"`);
    const len = parseInt(lenStr, 10);
    const end = off + len;
    if (len <= sp - off + 2 || end > buf.length || buf[end - 1] !== 0x0a)
      throw tarError('malformed PAX record');
    const eq = buf.indexOf(0x3d, sp + 1);
    if (eq < 0 || eq >= end) throw tarError('malformed PAX record (no "=")');
    const key = buf.toString('utf8', sp + 1, eq);
    const value = buf.subarray(eq + 1, end - 1);
    const num = (what: string): number => {
      const s = value.toString('latin1');
      if (!/^-?\d+(\.\d+)?$/.test(s)) throw tarError(`invalid PAX ${what} "${s}"`);
      return Number(s);
    };
    if (key === 'path') out.path = value.toString('latin1');
    else if (key === 'linkpath') out.linkpath = value.toString('latin1');
    else if (key === 'size') out.size = num('size');
    else if (key === 'uid') out.uid = num('uid');
    else if (key === 'gid') out.gid = num('gid');
    else if (key === 'mtime') out.mtime = num('mtime');
    else if (key.startsWith('SCHILY.xattr.'))
      out.xattrs.set(key.slice('SCHILY.xattr.'.length), Buffer.from(value));
    else if (key.startsWith('GNU.sparse.')) throw tarError('sparse files are not supported');
    off = end;
  }
  return out;
}

const TYPES: Record<string, TarEntryType> = {
  '0': 'file',
  '\0': 'file',
  '7': 'file',
  '1': 'hardlink',
  '2': 'symlink',
  '3': 'chardev',
  '4': 'blockdev',
  '5': 'directory',
  '6': 'fifo',
};

/**
 * Iterates the entries of a tar stream. After the end-of-archive marker the rest of the source is drained,
 * so verifying streams upstream see (and check) every byte.
 */
export async function* readTar(source: AsyncIterable<Buffer>): AsyncGenerator<TarEntry> {
  const r = new ByteReader(source);
  let globalPax: PaxRecords | undefined;
  let pax: PaxRecords | undefined;
  let longName: string | undefined;
  let longLink: string | undefined;

  for (;;) {
    const block = await r.readExact(BLOCK);
    if (block === null) return; // no end-of-archive marker; tolerated like GNU tar does
    if (isZeroBlock(block)) {
      await r.drain();
      return;
    }
    if (!checksumOk(block)) throw tarError('header checksum mismatch (corrupt or not a tar archive)');
    const typeflag = String.fromCharCode(block[156]!);
    const size = readNumber(block, 124, 12, 'size');

    if (typeflag === 'x' || typeflag === 'g' || typeflag === 'L' || typeflag === 'K') {
      if (size > MAX_META_BYTES) throw tarError(`metadata record of ${size} bytes is too large`);
      const data = (await r.readExact(size)) ?? Buffer.alloc(0);
      await r.skip((BLOCK - (size % BLOCK)) % BLOCK);
      if (typeflag === 'x') pax = parsePax(data);
      else if (typeflag === 'g') globalPax = parsePax(data);
      else {
        const end = data.indexOf(0);
        const s = data.toString('latin1', 0, end < 0 ? data.length : end);
        if (typeflag === 'L') longName = s;
        else longLink = s;
      }
      continue;
    }

    let type = TYPES[typeflag];
    if (type === undefined) {
      const what = typeflag === 'S' ? 'GNU sparse files are' : `entry type "${typeflag}" is`;
      throw tarError(`${what} not supported`);
    }

    const magic = block.toString('latin1', 257, 263);
    let name = readString(block, 0, 100);
    if (magic === 'ustar\0') {
      const prefix = readString(block, 345, 155);
      if (prefix) name = `${prefix}/${name}`;
    }
    // Pre-POSIX archives mark directories only by a trailing slash on a regular-file entry.
    if (typeflag === '\0' && name.endsWith('/')) type = 'directory';
    const h: TarHeader = {
      name,
      type,
      mode: readNumber(block, 100, 8, 'mode') & 0o7777,
      uid: readNumber(block, 108, 8, 'uid'),
      gid: readNumber(block, 116, 8, 'gid'),
      size: type === 'file' ? size : 0,
      mtime: readNumber(block, 136, 12, 'mtime'),
      linkname: readString(block, 157, 100),
      devmajor: type === 'chardev' || type === 'blockdev' ? readNumber(block, 329, 8, 'devmajor') : 0,
      devminor: type === 'chardev' || type === 'blockdev' ? readNumber(block, 337, 8, 'devminor') : 0,
      xattrs: new Map(),
    };
    // Hardlink and directory headers may announce data (POSIX leaves it to the implementation); it is skipped.
    // Symlinks, devices and fifos never carry data blocks, whatever their size field says.
    const carriesData = type === 'file' || type === 'hardlink' || type === 'directory';
    let dataSize = carriesData ? size : 0;
    if (longName !== undefined) h.name = longName;
    if (longLink !== undefined) h.linkname = longLink;
    for (const p of [globalPax, pax]) {
      if (!p) continue;
      if (p === pax) {
        if (p.path !== undefined) h.name = p.path;
        if (p.linkpath !== undefined) h.linkname = p.linkpath;
        if (p.size !== undefined) {
          if (!Number.isSafeInteger(p.size) || p.size < 0) throw tarError('invalid PAX size');
          if (type === 'file') h.size = p.size;
          if (carriesData) dataSize = p.size;
        }
      }
      if (p.uid !== undefined) h.uid = p.uid;
      if (p.gid !== undefined) h.gid = p.gid;
      if (p.mtime !== undefined) h.mtime = p.mtime;
      for (const [k, v] of p.xattrs) h.xattrs.set(k, v);
    }
    pax = undefined;
    longName = undefined;
    longLink = undefined;
    if (!Number.isSafeInteger(h.uid) || h.uid < 0 || !Number.isSafeInteger(h.gid) || h.gid < 0) {
      throw tarError(`entry has an invalid owner ${h.uid}:${h.gid}`);
    }

    const bodySize = type === 'file' ? h.size : 0;
    let consumed = false;
    const entry: TarEntry = {
      header: h,
      body: async function* () {
        if (consumed) throw new Error('tar entry body read twice');
        consumed = true;
        yield* r.stream(bodySize);
      },
      readAll: async () => {
        if (consumed) throw new Error('tar entry body read twice');
        consumed = true;
        return bodySize === 0 ? Buffer.alloc(0) : ((await r.readExact(bodySize)) ?? Buffer.alloc(0));
      },
    };
    yield entry;
    if (!consumed) await r.skip(bodySize);
    const extra = dataSize - bodySize;
    if (extra > 0) await r.skip(extra);
    await r.skip((BLOCK - (dataSize % BLOCK)) % BLOCK);
  }
}

/** Converts a byte string (one char per byte) back to bytes for fs calls. */
export function bytesOf(s: string): Buffer {
  return Buffer.from(s, 'latin1');
}

/** A byte string shown as UTF-8, for messages. */
export function displayName(s: string): string {
  return JSON.stringify(Buffer.from(s, 'latin1').toString('utf8'));
}
