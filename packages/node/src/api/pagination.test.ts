import { describe, expect, it } from 'vitest';
import { paginate, parseLimit } from './pagination.js';

const item = (id: string, createdAt: string) => ({ id, createdAt });

describe('pagination', () => {
  const items = [
    item('00000000-0000-7000-8000-000000000003', '2026-01-01T00:00:03.000Z'),
    item('00000000-0000-7000-8000-000000000001', '2026-01-01T00:00:01.000Z'),
    item('00000000-0000-7000-8000-00000000000b', '2026-01-01T00:00:02.000Z'),
    item('00000000-0000-7000-8000-00000000000a', '2026-01-01T00:00:02.000Z'),
  ];

  it('orders newest first, then by id, and walks pages with tokens', () => {
    const p1 = paginate(items, 2);
    expect(p1.items.map((i) => i.id.slice(-1))).toEqual(['3', 'a']);
    expect(p1.nextToken).toBeDefined();
    const p2 = paginate(items, 2, p1.nextToken);
    expect(p2.items.map((i) => i.id.slice(-1))).toEqual(['b', '1']);
    expect(p2.nextToken).toBeUndefined();
  });

  it('pages oldest first when asked, with tokens that remember the order', () => {
    const p1 = paginate(items, 3, undefined, 'asc');
    expect(p1.items.map((i) => i.id.slice(-1))).toEqual(['1', 'a', 'b']);
    expect(Buffer.from(p1.nextToken!, 'base64url').toString()).toMatch(/__asc$/);
    const p2 = paginate(items, 3, p1.nextToken, 'asc');
    expect(p2.items.map((i) => i.id.slice(-1))).toEqual(['3']);
    expect(p2.nextToken).toBeUndefined();
  });

  it('returns everything without a limit and no token when nothing remains', () => {
    expect(paginate(items, undefined).items).toHaveLength(4);
    expect(paginate(items, 4).nextToken).toBeUndefined();
  });

  it('rejects bad tokens and limits with 400', () => {
    expect(() => paginate(items, 1, '!!!')).toThrow(/invalid next token/);
    expect(() => paginate(items, 1, Buffer.from('nounderscores').toString('base64url'))).toThrow(
      /invalid cursor format/,
    );
    expect(() => paginate(items, 1, Buffer.from('yesterday__x').toString('base64url'))).toThrow(
      /invalid timestamp/,
    );
    for (const bad of ['0', '101', 'x', '1.5']) expect(() => parseLimit(bad)).toThrow(/invalid limit/);
    expect(parseLimit('100')).toBe(100);
    expect(parseLimit(undefined)).toBeUndefined();
  });
});
