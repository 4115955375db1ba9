// Builds tar archives byte by byte for tests: any name (hostile ones included), any entry type, binary PAX
// xattrs. Not used by the server itself.

export type TarSpecType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'chardev' | 'blockdev' | 'fifo';

export interface TarSpec {
  /** A string (UTF-8) or raw bytes. */
  name: string | Buffer;
  type?: TarSpecType;
  mode?: number;
  uid?: number;
  gid?: number;
  /** Seconds since the epoch. */
  mtime?: number;
  content?: Buffer | string;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
  xattrs?: Record<string, Buffer | string>;
  /** Extra raw PAX records ("path" here overrides the header name). */
  pax?: Record<string, string>;
  /** Write the name with a GNU "L" long-name record instead of the header field. */
  gnuLongName?: boolean;
}

const TYPEFLAG: Record<TarSpecType, string> = {
  file: '0',
  hardlink: '1',
  symlink: '2',
  chardev: '3',
  blockdev: '4',
  dir: '5',
  fifo: '6',
};

function octal(buf: Buffer, off: number, len: number, value: number): void {
  buf.write(value.toString(8).padStart(len - 1, '0') + '\0', off, len, 'latin1');
}

function header(name: Buffer, typeflag: string, size: number, s: TarSpec, linkname: Buffer): Buffer {
  const b = Buffer.alloc(512);
  name.copy(b, 0, 0, Math.min(100, name.length));
  octal(b, 100, 8, s.mode ?? (s.type === 'dir' ? 0o755 : 0o644));
  octal(b, 108, 8, s.uid ?? 0);
  octal(b, 116, 8, s.gid ?? 0);
  octal(b, 124, 12, size);
  octal(b, 136, 12, s.mtime ?? 1_700_000_000);
  b.write('        ', 148, 8, 'latin1');
  b.write(typeflag, 156, 1, 'latin1');
  linkname.copy(b, 157, 0, Math.min(100, linkname.length));
  b.write('ustar\0', 257, 6, 'latin1');
  b.write('00', 263, 2, 'latin1');
  octal(b, 329, 8, s.devmajor ?? 0);
  octal(b, 337, 8, s.devminor ?? 0);
  let sum = 0;
  for (let i = 0; i < 512; i++) sum += b[i]!;
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'latin1');
  return b;
}

/** The ustar header of a regular file of `size` bytes (its content and padding follow it in the archive). */
export function fileHeader(name: string, size: number, mode = 0o644): Buffer {
  return header(Buffer.from(name), TYPEFLAG.file, size, { name, mode }, Buffer.alloc(0));
}

function pad(n: number): Buffer {
  return Buffer.alloc((512 - (n % 512)) % 512);
}

function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`, 'utf8'), value, Buffer.from('\n')]);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return Buffer.concat([Buffer.from(String(len)), body]);
}

/** Serialises entries, in order, into a tar archive (PAX headers when names are long or xattrs are set). */
export function buildTar(entries: readonly TarSpec[]): Buffer {
  const parts: Buffer[] = [];
  for (const s of entries) {
    const type = s.type ?? 'file';
    const raw = Buffer.isBuffer(s.name) ? s.name : Buffer.from(s.name, 'utf8');
    const name =
      type === 'dir' && raw[raw.length - 1] !== 0x2f ? Buffer.concat([raw, Buffer.from('/')]) : raw;
    const linkname = Buffer.from(s.linkname ?? '', 'utf8');
    const content =
      s.content === undefined
        ? Buffer.alloc(0)
        : Buffer.isBuffer(s.content)
          ? s.content
          : Buffer.from(s.content);
    const records: Buffer[] = [];
    if (s.gnuLongName) {
      const ln = Buffer.concat([name, Buffer.alloc(1)]);
      parts.push(
        header(Buffer.from('././@LongLink'), 'L', ln.length, {} as TarSpec, Buffer.alloc(0)),
        ln,
        pad(ln.length),
      );
    } else if (name.length > 100) records.push(paxRecord('path', name));
    for (const [k, v] of Object.entries(s.pax ?? {})) records.push(paxRecord(k, Buffer.from(v)));
    if (linkname.length > 100) records.push(paxRecord('linkpath', linkname));
    for (const [k, v] of Object.entries(s.xattrs ?? {})) {
      records.push(paxRecord(`SCHILY.xattr.${k}`, Buffer.isBuffer(v) ? v : Buffer.from(v)));
    }
    if (records.length > 0) {
      const pax = Buffer.concat(records);
      parts.push(
        header(Buffer.from('PaxHeaders/x'), 'x', pax.length, {} as TarSpec, Buffer.alloc(0)),
        pax,
        pad(pax.length),
      );
    }
    const size = type === 'file' ? content.length : 0;
    const headerName = s.gnuLongName ? Buffer.from('placeholder') : name;
    parts.push(header(headerName, TYPEFLAG[type], size, { ...s, type }, linkname));
    if (size > 0) parts.push(content, pad(size));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}
