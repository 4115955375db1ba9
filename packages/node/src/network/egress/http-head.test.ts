import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MAX_HTTP_HEAD_BYTES, looksLikeHttp, parseHttpHead } from './http-head.js';

const head = (text: string) => parseHttpHead(Buffer.from(text, 'latin1'));

describe('parseHttpHead', () => {
  it('reads the Host of an origin-form request, without its port', () => {
    expect(head('GET /x?y=1 HTTP/1.1\r\nHost: API.Example.com:8080\r\nAccept: */*\r\n\r\n')).toEqual({
      kind: 'host',
      host: 'api.example.com',
    });
    expect(head('OPTIONS * HTTP/1.0\r\nhost: a.test\r\n\r\nbody')).toEqual({ kind: 'host', host: 'a.test' });
  });

  it('waits for the end of the head', () => {
    expect(head('GET / HTTP/1.1\r\nHost: a.test\r\n')).toEqual({ kind: 'incomplete' });
    expect(head('')).toEqual({ kind: 'incomplete' });
  });

  it('refuses what would let the upstream see another authority than the one checked', () => {
    const refused = [
      'GET http://evil.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n',
      'CONNECT evil.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n',
      'GET / HTTP/1.1\r\nHost: a.test\r\nHost: evil.test\r\n\r\n',
      'GET / HTTP/1.1\r\nHost : a.test\r\n\r\n',
      'GET / HTTP/1.1\r\nX: y\r\n\r\n',
      'GET / HTTP/1.1\r\nHost: a.test/evil\r\n\r\n',
      'GET / HTTP/1.1\r\nHost: user@a.test\r\n\r\n',
      'GET / HTTP/2.0\r\nHost: a.test\r\n\r\n',
      'GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n',
      'GET / HTTP/1.1\r\n folded\r\nHost: a.test\r\n\r\n',
    ];
    for (const text of refused) expect(head(text).kind, JSON.stringify(text)).toBe('invalid');
  });

  it('gives up on heads longer than the limit', () => {
    const long = `GET / HTTP/1.1\r\nX: ${'a'.repeat(MAX_HTTP_HEAD_BYTES)}`;
    expect(head(long)).toEqual({ kind: 'invalid', reason: 'request head too long' });
    expect(head(`${long}\r\nHost: a.test\r\n\r\n`).kind).toBe('invalid');
  });

  it('never throws on random or truncated input (fuzz)', () => {
    const valid = Buffer.from('GET / HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n');
    for (let i = 0; i < 2000; i++) {
      const noise = randomBytes(i % 200);
      const mutated = Buffer.from(valid);
      mutated[i % mutated.length] = noise[0] ?? 0;
      for (const input of [noise, mutated, valid.subarray(0, i % valid.length)]) {
        const r = parseHttpHead(input);
        expect(['incomplete', 'host', 'invalid']).toContain(r.kind);
        if (r.kind === 'host') expect(r.host).toMatch(/^[a-z0-9_.-]+$/);
      }
    }
  });
});

describe('looksLikeHttp', () => {
  it('tells a method token from TLS and binary', () => {
    expect(looksLikeHttp(Buffer.from('GET / HTTP/1.1'))).toBe(true);
    expect(looksLikeHttp(Buffer.from('POS'))).toBe(true);
    expect(looksLikeHttp(Buffer.from([0x16, 0x03, 0x01]))).toBe(false);
    expect(looksLikeHttp(Buffer.from('SSH-2.0-OpenSSH'))).toBe(false);
    expect(looksLikeHttp(Buffer.from(' GET'))).toBe(false);
    expect(looksLikeHttp(Buffer.from('A'.repeat(30)))).toBe(false);
  });
});
