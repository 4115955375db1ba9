import { describe, expect, it } from 'vitest';
import { matchesDomain, normalizeHostName } from './domain-match.js';

describe('matchesDomain', () => {
  const patterns = ['api.example.com', '*.example.org'];

  it('matches exact names only for plain patterns', () => {
    expect(matchesDomain(patterns, 'api.example.com')).toBe(true);
    expect(matchesDomain(patterns, 'x.api.example.com')).toBe(false);
    expect(matchesDomain(patterns, 'example.com')).toBe(false);
    expect(matchesDomain(patterns, 'evilapi.example.com')).toBe(false);
  });

  it('matches subdomains at any depth for wildcards, never the apex or a look-alike suffix', () => {
    expect(matchesDomain(patterns, 'a.example.org')).toBe(true);
    expect(matchesDomain(patterns, 'a.b.c.example.org')).toBe(true);
    expect(matchesDomain(patterns, 'example.org')).toBe(false);
    expect(matchesDomain(patterns, 'badexample.org')).toBe(false);
    expect(matchesDomain(patterns, 'example.org.evil.test')).toBe(false);
  });
});

describe('normalizeHostName', () => {
  it('lowercases and drops one trailing dot', () => {
    expect(normalizeHostName('API.Example.COM.')).toBe('api.example.com');
  });

  it('refuses what is no DNS name', () => {
    for (const bad of [
      '',
      '.',
      'a..b',
      'a b',
      'exa\u0000mple.com',
      'ex/ample.com',
      '-a.com',
      'a'.repeat(64) + '.com',
      '*.a.com',
      'a.com:443',
      '198.51.100.1:80',
    ]) {
      expect(normalizeHostName(bad)).toBeNull();
    }
    expect(normalizeHostName(`${'a.'.repeat(127)}a`)).toBeNull();
  });
});
