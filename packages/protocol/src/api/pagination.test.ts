import { describe, expect, it } from 'vitest';
import { decodePageToken, encodePageToken, PageTokenError, timestampNs } from './pagination.js';

const item = { id: '00000000-0000-7000-8000-000000000001', createdAt: '2026-01-01T00:00:01.000Z' };

describe('page tokens', () => {
  it('encodes the reference cursor format', () => {
    const token = encodePageToken(item);
    expect(Buffer.from(token, 'base64url').toString()).toBe(
      '2026-01-01T00:00:01.000000000Z__00000000-0000-7000-8000-000000000001',
    );
    // Padded base64url, as the reference emits it.
    expect(token.length % 4).toBe(0);
    expect(Buffer.from(encodePageToken(item, 'asc'), 'base64url').toString()).toMatch(/__asc$/);
  });

  it('reads back what it wrote, in both orders, to the nanosecond', () => {
    const fine = { id: 'x', createdAt: '2026-01-01T00:00:01.123456789Z' };
    for (const order of ['asc', 'desc'] as const) {
      expect(decodePageToken(encodePageToken(fine, order))).toEqual({
        timeNs: timestampNs(fine.createdAt),
        id: 'x',
      });
    }
    expect(timestampNs(fine.createdAt) - timestampNs('2026-01-01T00:00:01Z')).toBe(123_456_789n);
    expect(timestampNs('2026-01-01T01:00:01+01:00')).toBe(timestampNs('2026-01-01T00:00:01Z'));
  });

  it('names what is wrong with a bad token', () => {
    const bad = (token: string) => {
      try {
        decodePageToken(token);
      } catch (e) {
        expect(e).toBeInstanceOf(PageTokenError);
        return (e as Error).message;
      }
      throw new Error(`${token} was accepted`);
    };
    expect(bad('%%%garbage')).toBe('invalid next token: error decoding cursor: illegal base64 data');
    expect(bad(Buffer.from('nounderscores').toString('base64url'))).toBe(
      'invalid next token: invalid cursor format',
    );
    expect(bad(Buffer.from('yesterday__x').toString('base64url'))).toBe(
      'invalid next token: invalid timestamp format in cursor: invalid timestamp yesterday',
    );
    expect(bad(Buffer.from('2026-01-01T00:00:01Z__').toString('base64url'))).toBe(
      'invalid next token: invalid cursor value: empty id',
    );
  });
});
