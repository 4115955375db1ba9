import { posix } from 'node:path';

const BY_EXTENSION: Record<string, string> = {
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.htm': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.csv': 'text/csv; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.xml': 'text/xml; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.avif': 'image/avif',
  '.ico': 'image/vnd.microsoft.icon',
  '.pdf': 'application/pdf',
  '.zip': 'application/zip',
  '.gz': 'application/gzip',
  '.tar': 'application/x-tar',
  '.wasm': 'application/wasm',
  '.mp3': 'audio/mpeg',
  '.mp4': 'video/mp4',
  '.webm': 'video/webm',
};

/** Content-Type from the file extension, as Go's mime.TypeByExtension would give for common types. */
export function typeByExtension(path: string): string | undefined {
  return BY_EXTENSION[posix.extname(path).toLowerCase()];
}

/** A small subset of Go's http.DetectContentType: text when it looks like UTF-8 without control bytes. */
export function sniffContentType(head: Buffer): string {
  if (head.length === 0) return 'text/plain; charset=utf-8';
  if (head.subarray(0, 5).toString('latin1') === '%PDF-') return 'application/pdf';
  if (head.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])))
    return 'image/png';
  if (head[0] === 0x1f && head[1] === 0x8b) return 'application/x-gzip';
  for (const b of head) {
    if (b < 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0c && b !== 0x0d && b !== 0x1b)
      return 'application/octet-stream';
  }
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(head.length >= 512 ? head.subarray(0, 508) : head);
    return 'text/plain; charset=utf-8';
  } catch {
    return 'application/octet-stream';
  }
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** `inline; filename=…` formatted like Go's mime.FormatMediaType (token, quoted string, or RFC 2231). */
export function contentDisposition(filename: string): string {
  if (TOKEN.test(filename)) return `inline; filename=${filename}`;

  if (/^[\x20-\x7e]*$/.test(filename)) return `inline; filename="${filename.replace(/["\\]/g, '\\$&')}"`;
  return `inline; filename*=utf-8''${encodeURIComponent(filename).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)}`;
}
