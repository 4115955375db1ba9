import { describe, expect, it } from 'vitest';
import {
  MAX_POLICY_ENTRIES,
  NetworkPolicyError,
  parseEgressProxy,
  parseNetworkPolicy,
  refuseUnknownSecrets,
  refuseUnresolvableEgressProxy,
} from './policy.js';

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
  it('takes network.rules together with an egressProxy, and each alone', () => {
    const rules = { 'api.test': [{ transform: { headers: { Authorization: 'x' } } }] };
    const egressProxy = { address: 'p.test:1080' };
    expect(parseNetworkPolicy({ rules, egressProxy })).toMatchObject({
      rules,
      egressProxy: { host: 'p.test', port: 1080 },
    });
    // Each part is still validated with the other present.
    expect(() => parseNetworkPolicy({ rules: { '*': [] }, egressProxy })).toThrow(/rules\["\*"\]/);
    expect(() => parseNetworkPolicy({ rules, egressProxy: { address: 'p.test' } })).toThrow(/has no port/);
    expect(parseNetworkPolicy({ rules }).rules).toEqual(rules);
    expect(parseNetworkPolicy({ egressProxy }).egressProxy).toMatchObject({ host: 'p.test', port: 1080 });
  });

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

describe('parseEgressProxy (network.egressProxy)', () => {
  it('takes host:port with optional RFC 1929 credentials; null or absent is none', () => {
    expect(parseEgressProxy(undefined)).toBeNull();
    expect(parseEgressProxy(null)).toBeNull();
    expect(parseEgressProxy({ address: 'Proxy.Example.COM:1080' })).toEqual({
      address: 'proxy.example.com:1080',
      host: 'proxy.example.com',
      port: 1080,
    });
    expect(parseEgressProxy({ address: '198.51.100.7:65535', username: 'u', password: 'p' })).toEqual({
      address: '198.51.100.7:65535',
      host: '198.51.100.7',
      port: 65535,
      username: 'u',
      password: 'p',
    });
    expect(parseEgressProxy({ address: 'p.test:1', username: 'é'.repeat(127) })?.username).toHaveLength(127);
  });

  it('travels in the parsed policy, and only when given', () => {
    expect(parseNetworkPolicy({ egressProxy: { address: 'p.test:1080' } }).egressProxy).toMatchObject({
      host: 'p.test',
    });
    expect('egressProxy' in parseNetworkPolicy({ egressProxy: null })).toBe(false);
  });

  it('refuses bad input, naming the field', () => {
    const bad = (value: unknown) => rejection({ egressProxy: value }).message;
    expect(bad('p.test:1080')).toBe('egressProxy must be an object with an address');
    expect(bad([])).toBe('egressProxy must be an object with an address');
    expect(bad({})).toBe('egressProxy.address must be a string "host:port"');
    expect(bad({ address: 1080 })).toBe('egressProxy.address must be a string "host:port"');
    expect(bad({ address: 'p.test' })).toMatch(/^egressProxy\.address "p\.test" has no port/);
    expect(bad({ address: 'p.test:' })).toMatch(/has no valid port/);
    expect(bad({ address: 'p.test:0' })).toMatch(/has a port outside 1-65535/);
    expect(bad({ address: 'p.test:65536' })).toMatch(/has a port outside 1-65535/);
    expect(bad({ address: 'p.test:123456' })).toMatch(/has no valid port/);
    expect(bad({ address: 'p.test:+80' })).toMatch(/has no valid port/);
    expect(bad({ address: ':1080' })).toMatch(/has no valid host name or IPv4 address/);
    expect(bad({ address: 'a b:1080' })).toMatch(/has no valid host name/);
    expect(bad({ address: '300.1.1.1:1080' })).toMatch(/has no valid host name or IPv4 address/);
    expect(bad({ address: '[2001:db8::1]:1080' })).toMatch(/IPv6/);
    expect(bad({ address: '2001:db8::1:1080' })).toMatch(/IPv6/);
    expect(bad({ address: 'p.test:1', username: 7 })).toBe('egressProxy.username must be a string');
    expect(bad({ address: 'p.test:1', username: '' })).toMatch(
      /^egressProxy\.username must be 1 to 255 bytes/,
    );
    expect(bad({ address: 'p.test:1', username: 'u'.repeat(256) })).toMatch(
      /^egressProxy\.username must be 1 to 255 bytes \(RFC 1929\), got 256/,
    );
    // Bytes, not characters: 128 two-byte characters are 256 bytes.
    expect(bad({ address: 'p.test:1', username: 'é'.repeat(128) })).toMatch(/got 256/);
    expect(bad({ address: 'p.test:1', username: 'u', password: 'p'.repeat(256) })).toMatch(
      /^egressProxy\.password must be 1 to 255 bytes/,
    );
    expect(bad({ address: 'p.test:1', username: 'u', password: {} })).toBe(
      'egressProxy.password must be a string',
    );
    expect(bad({ address: 'p.test:1', password: 'p' })).toBe(
      'egressProxy.password is only valid together with egressProxy.username',
    );
    expect(bad({ address: 'p.test:1', type: 'socks4' })).toMatch(/^egressProxy\.type is not a field/);
  });
});

describe('refuseUnresolvableEgressProxy', () => {
  it('asks the resolver for a proxy name only, and refuses what it refuses', async () => {
    const asked: string[] = [];
    const resolve = async (name: string) => {
      asked.push(name);
      return name === 'ok.test'
        ? { ok: true as const }
        : { ok: false as const, reason: `${name} does not resolve` };
    };
    const withProxy = (address: string) => parseNetworkPolicy({ egressProxy: { address } });
    await refuseUnresolvableEgressProxy(withProxy('ok.test:1080'), resolve);
    await refuseUnresolvableEgressProxy(withProxy('198.51.100.7:1080'), resolve);
    await refuseUnresolvableEgressProxy(parseNetworkPolicy({}), resolve);
    await expect(refuseUnresolvableEgressProxy(withProxy('gone.test:1080'), resolve)).rejects.toThrow(
      'egressProxy.address "gone.test:1080": gone.test does not resolve',
    );
    expect(asked).toEqual(['ok.test', 'gone.test']);
  });
});

describe('refuseUnknownSecrets', () => {
  const withHeader = (value: string) =>
    parseNetworkPolicy({ rules: { 'api.test': [{ transform: { headers: { Authorization: value } } }] } });

  it('refuses a placeholder naming no secret, naming the entry; looks the names up only when there are some', async () => {
    let lookups = 0;
    const existing = async () => {
      lookups++;
      return new Set(['api-key']);
    };
    await refuseUnknownSecrets(withHeader('Bearer ${e2b.secrets.API-Key}'), existing);
    await refuseUnknownSecrets(withHeader('Bearer literal'), existing);
    await refuseUnknownSecrets(parseNetworkPolicy({}), existing);
    expect(lookups).toBe(1);
    const refused = refuseUnknownSecrets(
      withHeader('${e2b.secrets.api-key}:${e2b.secrets.Missing}'),
      existing,
    );
    await expect(refused).rejects.toBeInstanceOf(NetworkPolicyError);
    await expect(refused).rejects.toThrow(
      'rules["api.test"][0].transform.headers["Authorization"]: names secret missing, which does not exist (create it with POST /secrets first)',
    );
    // No secrets at all (a node without /secrets): every placeholder is refused.
    await expect(
      refuseUnknownSecrets(withHeader('${e2b.secrets.api-key}'), async () => new Set()),
    ).rejects.toThrow(/names secret api-key, which does not exist/);
  });
});
