import { describe, expect, it } from 'vitest';
import { cidrsOverlap, parseIpv4Cidr, type Ipv4Cidr } from './cidr.js';
import { isListenAddr, isUuid, normalizeProxyDomains } from './net.js';

describe('listen addresses', () => {
  it('accepts host:port forms and rejects the rest', () => {
    for (const ok of ['0.0.0.0:8000', '127.0.0.1:0', '[::1]:8000', 'localhost:65535', 'node-a.internal:1']) {
      expect(isListenAddr(ok), ok).toBe(true);
    }
    for (const bad of [
      '8000',
      ':8000',
      '0.0.0.0:65536',
      '[::1]',
      '::1:8000',
      '[zz]:1',
      'a b:1',
      '0.0.0.0:-1',
    ]) {
      expect(isListenAddr(bad), bad).toBe(false);
    }
  });
});

describe('proxy domains', () => {
  it('normalises, de-duplicates in order and rejects invalid names', () => {
    expect(normalizeProxyDomains(['B.test.', ' a.test', 'b.test', ''])).toEqual(['b.test', 'a.test']);
    expect(() => normalizeProxyDomains(['ok.test', 'bad_.test'])).toThrow(
      'sandbox_proxy.domains contains invalid domain "bad_.test"',
    );
    expect(() => normalizeProxyDomains([`${'a.'.repeat(127)}ab`])).toThrow(/invalid domain/);
  });
});

describe('IPv4 CIDRs', () => {
  it('parses, rejects malformed input and host bits, and detects overlap', () => {
    expect(parseIpv4Cidr('10.11.0.0/16')).toEqual({
      family: 4,
      network: BigInt((10 * 256 + 11) * 65536),
      prefix: 16,
    });
    expect(parseIpv4Cidr('0.0.0.0/0')).toEqual({ family: 4, network: 0n, prefix: 0 });
    for (const bad of [
      '10.0.0.0/33',
      '256.0.0.0/8',
      '10.0.0/8',
      '010.0.0.0/8',
      '10.0.0.0',
      'x/8',
      '10.0.0.0/08',
      '::/0',
    ]) {
      expect(parseIpv4Cidr(bad), bad).toHaveProperty('error');
    }
    expect(parseIpv4Cidr('10.0.0.1/8')).toEqual({ error: 'has host bits set (the network is 10.0.0.0/8)' });
    const a = parseIpv4Cidr('10.0.0.0/8') as Ipv4Cidr;
    const b = parseIpv4Cidr('10.200.0.0/16') as Ipv4Cidr;
    const c = parseIpv4Cidr('11.0.0.0/8') as Ipv4Cidr;
    expect(cidrsOverlap(a, b)).toBe(true);
    expect(cidrsOverlap(a, c)).toBe(false);
  });
});

describe('UUIDs', () => {
  it('recognises canonical UUIDs only', () => {
    expect(isUuid('0193a1b2-0000-7000-8000-000000000001')).toBe(true);
    expect(isUuid('0193A1B2-0000-7000-8000-000000000001')).toBe(true);
    expect(isUuid('0193a1b200007000800000000000001')).toBe(false);
    expect(isUuid('{0193a1b2-0000-7000-8000-000000000001}')).toBe(false);
  });
});
