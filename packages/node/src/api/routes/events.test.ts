import { describe, expect, it } from 'vitest';
import { parseEventQuery } from './events.js';

describe('parseEventQuery', () => {
  it('applies E2B defaults and refuses bad values with a 400', () => {
    expect(parseEventQuery({})).toEqual({ offset: 0, limit: 10, orderAsc: false, types: [] });
    expect(
      parseEventQuery({ offset: '5', limit: '100', orderAsc: 'true', types: 'sandbox.lifecycle.killed' }),
    ).toEqual({
      offset: 5,
      limit: 100,
      orderAsc: true,
      types: ['sandbox.lifecycle.killed'],
    });
    for (const q of [
      { limit: '0' },
      { limit: '101' },
      { limit: '-1' },
      { limit: '1e2' },
      { offset: '-3' },
      { offset: 'x' },
      { offset: '99999999999999999999' },
      { limit: ['1', '2'] },
      { orderAsc: 'yes' },
      { types: 'sandbox.lifecycle.exploded' },
      { types: Array(7).fill('sandbox.lifecycle.killed') },
    ]) {
      expect(() => parseEventQuery(q), JSON.stringify(q)).toThrow(expect.objectContaining({ status: 400 }));
    }
  });
});
