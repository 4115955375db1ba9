import { describe, expect, it } from 'vitest';
import { fileSignature } from '@aenv/protocol/envd';
import { checkFileSigning, isTokenExempt, safeEqual, usernameFromBasicAuth } from './access.js';

describe('file signatures', () => {
  const base = {
    token: 'tok',
    headerToken: undefined,
    path: 'a.txt',
    op: 'read' as const,
    username: undefined,
    expiration: undefined,
    nowSeconds: 1000,
  };

  it('allows everything when no token is set, and a matching header token', () => {
    expect(checkFileSigning({ ...base, token: undefined, signature: undefined })).toBeUndefined();
    expect(checkFileSigning({ ...base, headerToken: 'tok', signature: undefined })).toBeUndefined();
    expect(checkFileSigning({ ...base, headerToken: 'bad', signature: undefined })).toMatch(/does not match/);
  });

  it('checks the signature, its operation, user and expiration', () => {
    const sig = fileSignature('a.txt', 'read', '', 'tok');
    expect(checkFileSigning({ ...base, signature: sig })).toBeUndefined();
    expect(checkFileSigning({ ...base, signature: undefined })).toBe('missing signature query parameter');
    expect(checkFileSigning({ ...base, op: 'write', signature: sig })).toBe('invalid signature');
    expect(checkFileSigning({ ...base, username: 'root', signature: sig })).toBe('invalid signature');
    const exp = fileSignature('a.txt', 'read', '', 'tok', '999');
    expect(checkFileSigning({ ...base, signature: exp, expiration: '999' })).toBe(
      'signature is already expired',
    );
    const later = fileSignature('a.txt', 'read', '', 'tok', '2000');
    expect(checkFileSigning({ ...base, signature: later, expiration: '2000' })).toBeUndefined();
    expect(checkFileSigning({ ...base, signature: later, expiration: 'abc' })).toBe(
      'invalid signature expiration',
    );
  });
});

describe('access helpers', () => {
  it('compares tokens exactly', () => {
    expect(safeEqual('abc', 'abc')).toBe(true);
    expect(safeEqual('abc', 'abd')).toBe(false);
    expect(safeEqual('abc', 'abcd')).toBe(false);
    expect(safeEqual('', '')).toBe(true);
  });

  it('exempts only health, files and init from the token', () => {
    expect(isTokenExempt('GET', '/health')).toBe(true);
    expect(isTokenExempt('GET', '/files')).toBe(true);
    expect(isTokenExempt('POST', '/files')).toBe(true);
    expect(isTokenExempt('POST', '/init')).toBe(true);
    expect(isTokenExempt('GET', '/envs')).toBe(false);
    expect(isTokenExempt('POST', '/process.Process/Start')).toBe(false);
    expect(isTokenExempt('DELETE', '/files')).toBe(false);
  });

  it('decodes Basic auth with an empty password', () => {
    expect(usernameFromBasicAuth('Basic cm9vdDo=')).toBe('root');
    expect(usernameFromBasicAuth(`Basic ${Buffer.from('user:').toString('base64')}`)).toBe('user');
    expect(usernameFromBasicAuth(undefined)).toBeUndefined();
    expect(usernameFromBasicAuth('Bearer x')).toBeUndefined();
    expect(usernameFromBasicAuth(`Basic ${Buffer.from(':').toString('base64')}`)).toBeUndefined();
  });
});
