import { describe, expect, it } from 'vitest';
import {
  cidrContains,
  cidrsOverlap,
  collapseCidrs,
  formatCidr,
  formatIPv6,
  parseCidr,
  parseIp,
  parseIPv4,
  parseIPv6,
  parseIpOrCidr,
} from './ip.js';

const cidr = (text: string) => {
  const c = parseCidr(text);
  if (!c) throw new Error(`bad test CIDR ${text}`);
  return c;
};

describe('IPv4 parsing', () => {
  it('accepts dotted quads and rejects everything else', () => {
    expect(parseIPv4('192.0.2.255')).toBe(0xc00002ffn);
    expect(parseIPv4('0.0.0.0')).toBe(0n);
    for (const bad of [
      '256.0.0.1',
      '1.2.3',
      '1.2.3.4.5',
      '01.2.3.4',
      '1.2.3.-4',
      ' 1.2.3.4',
      '1.2.3.4 ',
      '0x1.2.3.4',
      '',
    ]) {
      expect(parseIPv4(bad)).toBeNull();
    }
  });
});

describe('IPv6 parsing and formatting', () => {
  it('parses full, compressed and dotted-quad forms', () => {
    expect(parseIPv6('::')).toBe(0n);
    expect(parseIPv6('::1')).toBe(1n);
    expect(parseIPv6('2001:db8::')).toBe(0x20010db8n << 96n);
    expect(parseIPv6('2001:0db8:0000:0000:0000:0000:0000:0001')).toBe(parseIPv6('2001:db8::1'));
    expect(parseIPv6('::ffff:192.0.2.1')).toBe((0xffffn << 32n) | 0xc0000201n);
    expect(parseIPv6('1:2:3:4:5:6:7::')).toBe(parseIPv6('1:2:3:4:5:6:7:0'));
  });

  it('rejects malformed text and zone ids', () => {
    for (const bad of [
      ':',
      ':::',
      '1::2::3',
      '1:2:3:4:5:6:7:8:9',
      '1:2:3:4:5:6:7::8',
      '12345::',
      'fe80::1%eth0',
      '1.2.3.4::',
      'g::1',
      '',
    ]) {
      expect(parseIPv6(bad)).toBeNull();
    }
  });

  it('formats canonically (RFC 5952)', () => {
    const fmt = (t: string) => formatIPv6(parseIPv6(t) as bigint);
    expect(fmt('2001:DB8:0:0:1:0:0:1')).toBe('2001:db8::1:0:0:1');
    expect(fmt('2001:db8:0:1:1:1:1:1')).toBe('2001:db8:0:1:1:1:1:1');
    expect(fmt('0:0:0:0:0:0:0:0')).toBe('::');
    expect(fmt('1:0:0:2:0:0:0:3')).toBe('1:0:0:2::3');
    expect(fmt('::ffff:c000:201')).toBe('::ffff:192.0.2.1');
  });

  it('parseIp picks the family', () => {
    expect(parseIp('192.0.2.1')?.family).toBe(4);
    expect(parseIp('2001:db8::1')?.family).toBe(6);
    expect(parseIp('example.com')).toBeNull();
  });
});

describe('CIDRs', () => {
  it('clears host bits and checks prefix range', () => {
    expect(formatCidr(cidr('10.1.2.3/8'))).toBe('10.0.0.0/8');
    expect(formatCidr(cidr('2001:db8::ff/120'))).toBe('2001:db8::/120');
    expect(formatCidr(cidr('0.0.0.0/0'))).toBe('0.0.0.0/0');
    expect(parseCidr('10.0.0.0/33')).toBeNull();
    expect(parseCidr('10.0.0.0/+8')).toBeNull();
    expect(parseCidr('10.0.0.0')).toBeNull();
    expect(parseCidr('::/129')).toBeNull();
  });

  it('parseIpOrCidr makes host routes of bare addresses', () => {
    expect(formatCidr(parseIpOrCidr('192.0.2.1')!)).toBe('192.0.2.1/32');
    expect(formatCidr(parseIpOrCidr('2001:db8::1')!)).toBe('2001:db8::1/128');
  });

  it('containment and overlap respect family and prefix', () => {
    expect(cidrContains(cidr('10.0.0.0/8'), cidr('10.9.0.0/16'))).toBe(true);
    expect(cidrContains(cidr('10.9.0.0/16'), cidr('10.0.0.0/8'))).toBe(false);
    expect(cidrsOverlap(cidr('10.9.0.0/16'), cidr('10.0.0.0/8'))).toBe(true);
    expect(cidrsOverlap(cidr('10.11.0.0/16'), cidr('10.12.0.0/16'))).toBe(false);
    expect(cidrsOverlap(cidr('0.0.0.0/0'), cidr('::/0'))).toBe(false);
  });

  it('collapse drops nested and duplicate CIDRs so none overlap', () => {
    const out = collapseCidrs(
      ['10.1.0.0/16', '10.0.0.0/8', '192.0.2.0/24', '192.0.2.0/24', '192.0.2.128/25', '2001:db8::/32'].map(
        cidr,
      ),
    );
    expect(out.map(formatCidr)).toEqual(['10.0.0.0/8', '192.0.2.0/24', '2001:db8::/32']);
  });
});
