import { describe, expect, it } from 'vitest';
import { appendServerTiming } from './server-timing.js';

describe('appendServerTiming', () => {
  it("keeps the node's phases and adds the gateway's after them", () => {
    const headers: Record<string, string | string[]> = { 'server-timing': 'boot;dur=12.0, total;dur=40.2' };
    appendServerTiming(headers, { 'gateway-place': 1.234, 'gateway-record': 0.56 });
    expect(headers['server-timing']).toBe(
      'boot;dur=12.0, total;dur=40.2, gateway-place;dur=1.2, gateway-record;dur=0.6',
    );
  });

  it('adds a field when the node sent none, and joins a repeated one', () => {
    const none: Record<string, string | string[]> = {};
    appendServerTiming(none, { 'gateway-record': 2 });
    expect(none['server-timing']).toBe('gateway-record;dur=2.0');
    const repeated: Record<string, string | string[]> = { 'server-timing': ['a;dur=1', 'b;dur=2'] };
    appendServerTiming(repeated, { 'gateway-record': 3 });
    expect(repeated['server-timing']).toBe('a;dur=1, b;dur=2, gateway-record;dur=3.0');
  });

  it('leaves the headers alone with no phases', () => {
    const headers: Record<string, string | string[]> = {};
    appendServerTiming(headers, {});
    expect(headers).toEqual({});
  });
});
