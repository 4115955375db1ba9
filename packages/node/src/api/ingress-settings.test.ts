import { describe, expect, it } from 'vitest';
import { maskedHost } from '@aenv/proxy';
import { ApiError } from './errors.js';
import { parseIngressSettings } from './ingress-settings.js';

const refusal = (network: unknown): string => {
  try {
    parseIngressSettings(network, 49983);
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).status).toBe(400);
    return (e as ApiError).message;
  }
  throw new Error('expected a 400');
};

describe('parseIngressSettings', () => {
  it('takes httpsPorts (deduplicated) and a maskRequestHost template; nothing values are none', () => {
    expect(
      parseIngressSettings({ httpsPorts: [8443, 443, 8443], maskRequestHost: '${PORT}-a.test' }, 49983),
    ).toEqual({ httpsPorts: [8443, 443], maskRequestHost: '${PORT}-a.test' });
    expect(parseIngressSettings({ httpsPorts: [], maskRequestHost: '' }, 49983)).toEqual({});
    expect(parseIngressSettings({ httpsPorts: null, maskRequestHost: null }, 49983)).toEqual({});
    expect(parseIngressSettings(undefined, 49983)).toEqual({});
    expect(parseIngressSettings({ maskRequestHost: 'app.test:${PORT}' }, 49983)).toEqual({
      maskRequestHost: 'app.test:${PORT}',
    });
  });

  it('refuses bad entries, naming them', () => {
    expect(refusal({ httpsPorts: [49983] })).toMatch(/^network\.httpsPorts\[0\]: the envd port/);
    expect(refusal({ httpsPorts: [1, -1] })).toMatch(/^network\.httpsPorts\[1\] must be a port number/);
    expect(refusal({ httpsPorts: [null] })).toMatch(/got null/);
    expect(refusal({ httpsPorts: { 0: 443 } })).toMatch(/must be an array/);
    expect(refusal({ maskRequestHost: ['a.test'] })).toMatch(/must be a string/);
    for (const bad of [
      'a.test\nx: y',
      'a.test/path',
      '-a.test',
      'a.test:',
      'a.test:123456',
      'a@b.test',
      'a b',
    ])
      expect(refusal({ maskRequestHost: bad }), bad).toMatch(/is not a host name or host:port/);
  });
});

describe('maskedHost', () => {
  it('replaces every ${PORT}', () => {
    expect(maskedHost('${PORT}-x.test', 3000)).toBe('3000-x.test');
    expect(maskedHost('p${PORT}.x.test:${PORT}', 8)).toBe('p8.x.test:8');
    expect(maskedHost('fixed.test', 8)).toBe('fixed.test');
  });
});
