import { describe, expect, it } from 'vitest';
import { LeanHeaders } from './lean-headers.js';

describe('LeanHeaders', () => {
  it('behaves like WHATWG Headers for what connect uses', () => {
    const h = new LeanHeaders({ 'Content-Type': 'application/json', 'X-Multi': ['a', 'b'] });
    h.append('x-multi', ' c ');
    h.set('Connect-Timeout-Ms', '100');
    expect(h.get('content-type')).toBe('application/json');
    expect(h.get('X-MULTI')).toBe('a, b, c');
    expect(h.has('connect-timeout-ms')).toBe(true);
    h.delete('Connect-Timeout-Ms');
    expect(h.get('connect-timeout-ms')).toBeNull();
    const copy = new LeanHeaders(h);
    const native = new Headers(h as unknown as Headers);
    expect([...copy]).toEqual([...native]);
    const fromPairs = new LeanHeaders([
      ['b', '2'],
      ['a', '1'],
    ]);
    const seen: string[] = [];
    fromPairs.forEach((v, k) => seen.push(`${k}=${v}`));
    expect(seen).toEqual(['a=1', 'b=2']);
    expect(Object.prototype.toString.call(h)).toBe('[object Headers]');
  });
});
