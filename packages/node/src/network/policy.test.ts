import { describe, expect, it } from 'vitest';
import { MAX_POLICY_ENTRIES, NetworkPolicyError, parseNetworkPolicy } from './policy.js';

function rejection(input: Parameters<typeof parseNetworkPolicy>[0]): NetworkPolicyError {
  try {
    parseNetworkPolicy(input);
  } catch (e) {
    expect(e).toBeInstanceOf(NetworkPolicyError);
    expect((e as NetworkPolicyError).kind).toBe('invalid_argument');
    return e as NetworkPolicyError;
  }
  throw new Error('expected a NetworkPolicyError');
}

describe('parseNetworkPolicy', () => {
  it('turns addresses into host CIDRs and normalizes CIDRs', () => {
    const p = parseNetworkPolicy({
      allowOut: ['192.0.2.7', '2001:DB8:0:0::1', '198.51.100.77/24', '2001:db8:abcd::1/48', ' 203.0.113.9 '],
      denyOut: ['10.1.2.3/8', '0.0.0.0/0', '::ffff:192.0.2.1'],
    });
    expect(p.allowOut).toEqual([
      '192.0.2.7/32',
      '2001:db8::1/128',
      '198.51.100.0/24',
      '2001:db8:abcd::/48',
      '203.0.113.9/32',
    ]);
    expect(p.denyOut).toEqual(['10.0.0.0/8', '0.0.0.0/0', '::ffff:192.0.2.1/128']);
    expect(p.allowInternetAccess).toBeNull();
  });

  it('drops duplicates after normalization, keeping first-seen order', () => {
    const p = parseNetworkPolicy({
      allowOut: ['192.0.2.7', '198.51.100.1', '192.0.2.7/32', '198.51.100.1/32'],
      denyOut: ['203.0.113.1', '203.0.113.1/32', '203.0.113.0/24', '203.0.113.200/24'],
    });
    expect(p.allowOut).toEqual(['192.0.2.7/32', '198.51.100.1/32']);
    expect(p.denyOut).toEqual(['203.0.113.1/32', '203.0.113.0/24']);
  });

  it('maps allowInternetAccess to true / false / null', () => {
    expect(parseNetworkPolicy({ allowInternetAccess: true }).allowInternetAccess).toBe(true);
    expect(parseNetworkPolicy({ allowInternetAccess: false }).allowInternetAccess).toBe(false);
    expect(parseNetworkPolicy({ allowInternetAccess: null }).allowInternetAccess).toBeNull();
    expect(parseNetworkPolicy({}).allowInternetAccess).toBeNull();
    expect(rejection({ allowInternetAccess: 'no' }).message).toBe('allowInternetAccess must be a boolean');
  });

  it('treats missing or null lists as empty', () => {
    expect(parseNetworkPolicy({ allowOut: null, denyOut: undefined })).toEqual({
      allowOut: [],
      denyOut: [],
      allowInternetAccess: null,
    });
  });

  it('keeps domain patterns in allowOut, normalized, next to the CIDRs', () => {
    const p = parseNetworkPolicy({
      allowOut: ['Example.COM.', '192.0.2.1', '*.Example.com', 'example.com', 'xn--bcher-kva.example'],
      denyOut: ['0.0.0.0/0'],
    });
    expect(p.allowOut).toEqual(['example.com', '192.0.2.1/32', '*.example.com', 'xn--bcher-kva.example']);
  });

  it('refuses a bare wildcard, inner wildcards and non-ASCII names, naming the entry', () => {
    for (const bad of [
      '*',
      '*.',
      'a.*.example.com',
      '**.example.com',
      'bücher.example',
      'a..b',
      '.example.com',
    ]) {
      expect(rejection({ allowOut: [bad] }).message).toBe(
        `invalid allowOut domain entry ${JSON.stringify(bad)}`,
      );
    }
    expect(rejection({ allowOut: [`${'a'.repeat(64)}.example`] }).message).toMatch(
      /^invalid allowOut domain entry/,
    );
  });

  it('refuses over-long lists and non-string entries, naming them', () => {
    const many = Array.from({ length: MAX_POLICY_ENTRIES + 1 }, (_, i) => `h${i}.example.com`);
    expect(rejection({ allowOut: many }).message).toBe(
      `allowOut has ${MAX_POLICY_ENTRIES + 1} entries; at most ${MAX_POLICY_ENTRIES} are allowed`,
    );
    expect(rejection({ denyOut: ['192.0.2.1', 42] }).message).toBe('denyOut[1] must be a string, got 42');
  });

  it('names entries that are neither address nor domain', () => {
    expect(rejection({ allowOut: ['not a host!'] }).message).toBe(
      'invalid allowOut domain entry "not a host!"',
    );
    expect(rejection({ allowOut: ['-bad-.example'] }).message).toBe(
      'invalid allowOut domain entry "-bad-.example"',
    );
    expect(rejection({ allowOut: [''] }).message).toBe('invalid allowOut domain entry ""');
  });

  it('rejects broken CIDRs with the reference message', () => {
    for (const bad of [
      '10.0.0.0/33',
      '10.0.0/8',
      'example.com/8',
      '1.2.3.4/',
      '/8',
      '2001:db8::/129',
      '1.2.3.4/-1',
    ]) {
      expect(rejection({ allowOut: [bad] }).message).toBe(`invalid IP or CIDR entry ${JSON.stringify(bad)}`);
      expect(rejection({ denyOut: [bad] }).message).toBe(`invalid IP or CIDR entry ${JSON.stringify(bad)}`);
    }
  });

  it('requires IPs or CIDRs in denyOut', () => {
    expect(rejection({ denyOut: ['example.com'] }).message).toBe(
      'denyOut entry "example.com" must be an IP address or CIDR block',
    );
    expect(rejection({ denyOut: ['256.1.1.1'] }).message).toBe(
      'denyOut entry "256.1.1.1" must be an IP address or CIDR block',
    );
  });

  it('reports the first broken entry whatever else the lists hold', () => {
    expect(rejection({ allowOut: ['example.com', '10.0.0.0/99'] }).message).toBe(
      'invalid IP or CIDR entry "10.0.0.0/99"',
    );
    expect(rejection({ allowOut: ['example.com'], denyOut: ['nope'] }).message).toBe(
      'denyOut entry "nope" must be an IP address or CIDR block',
    );
  });

  it('rejects values of the wrong type', () => {
    expect(rejection({ allowOut: '192.0.2.1' }).message).toBe('allowOut must be an array of strings');
  });
});
