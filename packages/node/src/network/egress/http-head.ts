// The Host of a plain-HTTP request, read from the bytes a sandbox sent first. Only what the egress proxy needs
// to pick the upstream: the request line must be origin-form (`GET /path HTTP/1.1`), so a server cannot be told
// another authority in an absolute URI than the Host that was checked, and there must be exactly one Host.

import { normalizeHostName } from './domain-match.js';

/** Longest request head read before the connection is refused. */
export const MAX_HTTP_HEAD_BYTES = 16 * 1024;

export type HttpHeadResult =
  { kind: 'incomplete' } | { kind: 'host'; host: string } | { kind: 'invalid'; reason: string };

const REQUEST_LINE = /^[A-Z]{1,20} (\/[\x21-\x7e]*|\*) HTTP\/1\.[01]$/;

/** Whether `first` can begin an HTTP/1 request (a method token then a space), from its first bytes. */
export function looksLikeHttp(first: Buffer): boolean {
  const n = Math.min(first.length, 21);
  for (let i = 0; i < n; i++) {
    const c = first[i] as number;
    if (c === 0x20) return i > 0;
    if (c < 0x41 || c > 0x5a) return false;
  }
  return n < 21;
}

export function parseHttpHead(buf: Buffer): HttpHeadResult {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) {
    return buf.length >= MAX_HTTP_HEAD_BYTES
      ? { kind: 'invalid', reason: 'request head too long' }
      : { kind: 'incomplete' };
  }
  if (end + 4 > MAX_HTTP_HEAD_BYTES) return { kind: 'invalid', reason: 'request head too long' };
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const requestLine = lines[0] ?? '';
  if (requestLine.startsWith('CONNECT ')) return { kind: 'invalid', reason: 'CONNECT is not proxied' };
  if (!REQUEST_LINE.test(requestLine))
    return { kind: 'invalid', reason: 'not an origin-form HTTP/1 request' };
  let host: string | null = null;
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0 || /[\s]/.test(line.slice(0, colon)))
      return { kind: 'invalid', reason: 'malformed header' };
    if (line.slice(0, colon).toLowerCase() !== 'host') continue;
    if (host !== null) return { kind: 'invalid', reason: 'more than one Host header' };
    host = line.slice(colon + 1).trim();
  }
  if (host === null) return { kind: 'invalid', reason: 'no Host header' };
  const name = normalizeHostName(host.replace(/:\d{1,5}$/, ''));
  if (name === null) return { kind: 'invalid', reason: 'Host is not a DNS name' };
  return { kind: 'host', host: name };
}
