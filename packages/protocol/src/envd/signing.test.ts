import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { FILE_SIGNATURE_SHAPE, fileSignature } from './signing.js';

describe('file signatures', () => {
  it('matches the SDK formula: v1_ + unpadded base64(sha256(path:op:user:token[:exp]))', () => {
    const expected = `v1_${createHash('sha256').update('/a.txt:read:user:tok').digest('base64').replace(/=+$/, '')}`;
    expect(fileSignature('/a.txt', 'read', 'user', 'tok')).toBe(expected);
    const withExp = `v1_${createHash('sha256').update('a.txt:write::tok:1700000000').digest('base64').replace(/=+$/, '')}`;
    expect(fileSignature('a.txt', 'write', '', 'tok', '1700000000')).toBe(withExp);
  });

  it('always has the shape the proxy pre-checks', () => {
    for (const path of ['', '/a', 'é/ü', 'x'.repeat(5000)])
      expect(fileSignature(path, 'read', 'user', 'tok')).toMatch(FILE_SIGNATURE_SHAPE);
    expect('v1_short').not.toMatch(FILE_SIGNATURE_SHAPE);
  });
});
