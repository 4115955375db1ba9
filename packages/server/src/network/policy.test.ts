import { describe, expect, it } from 'vitest';
import { DOMAIN_ENTRIES_UNSUPPORTED, NetworkPolicyError, parseNetworkPolicy } from './policy.js';

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

  it('refuses domain entries in allowOut until the egress proxy exists', () => {
    expect(rejection({ allowOut: ['example.com'] }).message).toBe(DOMAIN_ENTRIES_UNSUPPORTED);
    expect(rejection({ allowOut: ['192.0.2.1', '*.Example.COM.'] }).message).toBe(DOMAIN_ENTRIES_UNSUPPORTED);
    expect(DOMAIN_ENTRIES_UNSUPPORTED).toBe(
      'domain entries in allowOut are not supported until TCP egress proxy is enabled',
    );
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

  it('reports list errors before the domain refusal, as the reference does', () => {
    expect(rejection({ allowOut: ['example.com', '10.0.0.0/99'] }).message).toBe(
      'invalid IP or CIDR entry "10.0.0.0/99"',
    );
    expect(rejection({ allowOut: ['example.com'], denyOut: ['nope'] }).message).toBe(
      'denyOut entry "nope" must be an IP address or CIDR block',
    );
  });

  it('rejects values of the wrong type', () => {
    expect(rejection({ allowOut: '192.0.2.1' }).message).toBe('allowOut must be an array of strings');
    expect(rejection({ denyOut: [42] }).message).toBe('denyOut must be an array of strings');
  });
});
