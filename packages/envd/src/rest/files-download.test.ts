import { describe, expect, it } from 'vitest';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { contentDisposition, sniffContentType, typeByExtension } from './content-type.js';
import { compressesPoorly, negotiateEncoding, parseRange } from './files-download.js';

describe('download negotiation', () => {
  it('prefers gzip when accepted, identity otherwise, and refuses when nothing fits', () => {
    expect(negotiateEncoding(undefined)).toBe('identity');
    expect(negotiateEncoding('gzip, deflate')).toBe('gzip');
    expect(negotiateEncoding('br')).toBe('identity');
    expect(negotiateEncoding('gzip;q=0, identity')).toBe('identity');
    expect(negotiateEncoding('*')).toBe('gzip');
    expect(negotiateEncoding('br, identity;q=0')).toBeUndefined();
    expect(negotiateEncoding('br, *;q=0')).toBeUndefined();
  });

  it('skips gzip for large files that do not compress, unless identity is refused', () => {
    expect(negotiateEncoding('gzip, deflate', true)).toBe('identity');
    expect(negotiateEncoding('gzip, identity;q=0', true)).toBe('gzip');
    const dir = mkdtempSync(join(tmpdir(), 'aenv-gz-'));
    try {
      const check = (name: string, data: Buffer) => {
        writeFileSync(join(dir, name), data);
        const fd = openSync(join(dir, name), 'r');
        try {
          return compressesPoorly(fd, data.length);
        } finally {
          closeSync(fd);
        }
      };
      expect(check('random', randomBytes(256 * 1024))).toBe(true);
      expect(check('text', Buffer.from('hello world\n'.repeat(30_000)))).toBe(false);
      expect(check('small-random', randomBytes(4096))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('parses single byte ranges', () => {
    expect(parseRange(undefined, 10)).toBeUndefined();
    expect(parseRange('bytes=2-4', 10)).toEqual({ start: 2, end: 4 });
    expect(parseRange('bytes=5-', 10)).toEqual({ start: 5, end: 9 });
    expect(parseRange('bytes=-3', 10)).toEqual({ start: 7, end: 9 });
    expect(parseRange('bytes=8-100', 10)).toEqual({ start: 8, end: 9 });
    expect(parseRange('bytes=10-', 10)).toBe('unsatisfiable');
    expect(parseRange('bytes=0-1,3-4', 10)).toBeUndefined();
    expect(parseRange('items=1-2', 10)).toBeUndefined();
  });

  it('names and types files like Go', () => {
    expect(contentDisposition('a.txt')).toBe('inline; filename=a.txt');
    expect(contentDisposition('a b.txt')).toBe('inline; filename="a b.txt"');
    expect(contentDisposition('é.txt')).toBe("inline; filename*=utf-8''%C3%A9.txt");
    expect(typeByExtension('/x/y.JSON')).toBe('application/json');
    expect(typeByExtension('/x/y')).toBeUndefined();
    expect(sniffContentType(Buffer.from('plain text\n'))).toBe('text/plain; charset=utf-8');
    expect(sniffContentType(Buffer.from([0, 1, 2]))).toBe('application/octet-stream');
    expect(sniffContentType(Buffer.from('%PDF-1.7'))).toBe('application/pdf');
  });
});
