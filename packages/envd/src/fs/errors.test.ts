import { Code } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { fileHttpError } from '../rest/errors.js';
import { errnoCode, fsConnectError } from './errors.js';

// What Node 20 throws for a write past a btrfs quota: libuv has no name for EDQUOT.
const quotaError = Object.assign(new Error('Unknown system error -122: Unknown system error -122, write'), {
  code: 'Unknown system error -122',
  errno: -122,
  syscall: 'write',
});

describe('errno names', () => {
  it('names errnos libuv does not know from their number', () => {
    expect(errnoCode(quotaError)).toBe('EDQUOT');
    expect(errnoCode(Object.assign(new Error('x'), { code: 'ENOENT', errno: -2 }))).toBe('ENOENT');
    expect(
      errnoCode(Object.assign(new Error('x'), { code: 'Unknown system error -9999', errno: -9999 })),
    ).toBe('Unknown system error -9999');
    expect(errnoCode('not an error')).toBeUndefined();
  });

  it('reports a full disk quota as 507 over REST and ResourceExhausted over RPC, saying why', () => {
    const http = fileHttpError(quotaError, '/home/user/f');
    expect(http.status).toBe(507);
    expect(http.message).toMatch(/disk size limit/);
    const rpc = fsConnectError(quotaError, 'write /home/user/f');
    expect(rpc.code).toBe(Code.ResourceExhausted);
    expect(rpc.message).toMatch(/disk size limit/);
  });
});
