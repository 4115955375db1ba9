// A minimal tar writer (ustar headers, PAX records when needed) that keeps names and xattr values byte-exact:
// names are "byte strings" (one char per byte, as image/tar-reader.ts yields them).

export type TarWriteType = 'file' | 'hardlink' | 'symlink' | 'directory' | 'fifo';

export interface TarWriteHeader {
  /** Byte string; directories without a trailing slash. */
  name: string;
  type: TarWriteType;
  mode: number;
  uid: number;
  gid: number;
  /** Seconds since the epoch. */
  mtime: number;
  /** Data bytes that follow (files only). */
  size?: number;
  /** Byte string (symlinks, hardlinks). */
  linkname?: string;
  xattrs?: ReadonlyMap<string, Buffer>;
}

const BLOCK = 512;
const TYPEFLAG: Record<TarWriteType, string> = {
  file: '0',
  hardlink: '1',
  symlink: '2',
  directory: '5',
  fifo: '6',
};
const MAX_OCTAL_8 = 0o7777777;
const MAX_OCTAL_12 = 0o77777777777;

function octal(buf: Buffer, value: number, offset: number, width: number): void {
  buf.write(
    `${Math.floor(value)
      .toString(8)
      .padStart(width - 1, '0')}\0`,
    offset,
    width,
    'latin1',
  );
}

function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`, 'latin1'), value, Buffer.from('\n')]);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return Buffer.concat([Buffer.from(String(len), 'latin1'), body]);
}

function padding(size: number): Buffer {
  return Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);
}

function ustar(h: TarWriteHeader, name: string, linkname: string, typeflag: string, size: number): Buffer {
  const b = Buffer.alloc(BLOCK);
  b.write(name, 0, 100, 'latin1');
  octal(b, h.mode & 0o7777, 100, 8);
  octal(b, Math.min(h.uid, MAX_OCTAL_8), 108, 8);
  octal(b, Math.min(h.gid, MAX_OCTAL_8), 116, 8);
  octal(b, Math.min(size, MAX_OCTAL_12), 124, 12);
  octal(b, Math.max(0, Math.min(h.mtime, MAX_OCTAL_12)), 136, 12);
  b.fill(0x20, 148, 156);
  b.write(typeflag, 156, 1, 'latin1');
  b.write(linkname, 157, 100, 'latin1');
  b.write('ustar\0', 257, 6, 'latin1');
  b.write('00', 263, 2, 'latin1');
  let sum = 0;
  for (const byte of b) sum += byte;
  b.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'latin1');
  return b;
}

/** The header block(s) of one entry: a PAX record first when a field does not fit ustar or xattrs are present. */
export function tarHeader(h: TarWriteHeader): Buffer {
  const size = h.type === 'file' ? (h.size ?? 0) : 0;
  const linkname = h.linkname ?? '';
  const records: Buffer[] = [];
  if (h.name.length > 100) records.push(paxRecord('path', Buffer.from(h.name, 'latin1')));
  if (linkname.length > 100) records.push(paxRecord('linkpath', Buffer.from(linkname, 'latin1')));
  if (h.uid > MAX_OCTAL_8) records.push(paxRecord('uid', Buffer.from(String(h.uid))));
  if (h.gid > MAX_OCTAL_8) records.push(paxRecord('gid', Buffer.from(String(h.gid))));
  if (size > MAX_OCTAL_12) records.push(paxRecord('size', Buffer.from(String(size))));
  for (const [k, v] of h.xattrs ?? []) records.push(paxRecord(`SCHILY.xattr.${k}`, v));
  const main = ustar(h, h.name.slice(0, 100), linkname.slice(0, 100), TYPEFLAG[h.type], size);
  if (records.length === 0) return main;
  const pax = Buffer.concat(records);
  const paxHeader = ustar(
    { name: 'PaxHeader', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: h.mtime },
    `PaxHeaders/${h.name.slice(0, 88)}`,
    '',
    'x',
    pax.length,
  );
  return Buffer.concat([paxHeader, pax, padding(pax.length), main]);
}

export function tarPadding(size: number): Buffer {
  return padding(size);
}

/** Two zero blocks. */
export function tarEnd(): Buffer {
  return Buffer.alloc(2 * BLOCK);
}
