import { describe, expect, it } from 'vitest';
import { BUILTIN_DENIED_CIDRS } from './builtin-denies.js';
import {
  PROTO_TCP,
  PROTO_UDP,
  addressVerdictFor,
  resolverAllowed,
  verdictFor,
  type EgressBase,
  type Flow,
} from './egress-model.js';
import { parseCidr, parseIPv4, type Cidr } from '@aenv/config';
import { parseNetworkPolicy } from './policy.js';

const ip = (t: string) => parseIPv4(t) as bigint;
const base: EgressBase = {
  internalCidrs: ['10.11.0.0/16', '10.12.0.0/16'].map((c) => parseCidr(c) as Cidr),
  deniedCidrs: [...BUILTIN_DENIED_CIDRS, parseCidr('10.0.0.0/8') as Cidr],
  resolver: ip('10.255.255.53'),
};
const tcp = (to: string, port = 80): Flow => ({ daddr: ip(to), protocol: PROTO_TCP, dport: port });
const udp = (to: string, port: number): Flow => ({ daddr: ip(to), protocol: PROTO_UDP, dport: port });
const icmp = (to: string): Flow => ({ daddr: ip(to), protocol: 1, dport: null });
const open = parseNetworkPolicy({});
const closed = parseNetworkPolicy({ allowInternetAccess: false });

describe('verdictFor', () => {
  it('denies everything to a slot without a policy, DNS included', () => {
    for (const f of [tcp('198.51.100.10'), udp('10.255.255.53', 53), icmp('198.51.100.10')])
      expect(verdictFor(base, null, f)).toBe('deny');
  });

  it('with internet on: anything public, DNS only to the resolver', () => {
    expect(verdictFor(base, open, tcp('198.51.100.10', 443))).toBe('accept');
    expect(verdictFor(base, open, icmp('198.51.100.10'))).toBe('accept');
    expect(verdictFor(base, open, udp('10.255.255.53', 53))).toBe('accept');
    expect(verdictFor(base, open, tcp('10.255.255.53', 53))).toBe('accept');
    expect(verdictFor(base, open, udp('198.51.100.10', 53))).toBe('deny');
    expect(verdictFor(base, open, tcp('198.51.100.10', 53))).toBe('deny');
    // Only port 53 of the resolver: it sits in an always-denied range.
    expect(verdictFor(base, open, tcp('10.255.255.53', 80))).toBe('deny');
  });

  it('with internet off: no DNS unless allowOut names the resolver', () => {
    expect(verdictFor(base, closed, udp('10.255.255.53', 53))).toBe('deny');
    expect(verdictFor(base, closed, tcp('198.51.100.10'))).toBe('deny');
    const withResolver = parseNetworkPolicy({ allowInternetAccess: false, allowOut: ['10.255.255.53'] });
    expect(verdictFor(base, withResolver, udp('10.255.255.53', 53))).toBe('accept');
    const withHost = parseNetworkPolicy({ allowInternetAccess: false, allowOut: ['198.51.100.10'] });
    expect(verdictFor(base, withHost, tcp('198.51.100.10', 443))).toBe('accept');
    expect(verdictFor(base, withHost, udp('198.51.100.10', 53))).toBe('accept');
    expect(verdictFor(base, withHost, tcp('198.51.100.20', 443))).toBe('deny');
  });

  it('denyOut naming the resolver takes DNS away', () => {
    const p = parseNetworkPolicy({ denyOut: ['10.255.255.53'] });
    expect(resolverAllowed(p, ip('10.255.255.53'))).toBe(false);
    expect(verdictFor(base, p, udp('10.255.255.53', 53))).toBe('deny');
  });

  it('never opens internal, built-in or configured denies, whatever allowOut says', () => {
    const p = parseNetworkPolicy({
      allowOut: ['169.254.169.254', '10.11.0.5', '127.0.0.1', '100.100.100.200', '10.1.2.3'],
    });
    for (const to of ['169.254.169.254', '10.11.0.5', '127.0.0.1', '100.100.100.200', '10.1.2.3'])
      expect(verdictFor(base, p, tcp(to)), to).toBe('deny');
  });

  it('keeps the built-in denies when the configured list is empty', () => {
    const bare: EgressBase = { ...base, deniedCidrs: BUILTIN_DENIED_CIDRS };
    expect(verdictFor(bare, open, tcp('169.254.169.254'))).toBe('deny');
    expect(verdictFor(bare, open, tcp('10.1.2.3'))).toBe('accept');
  });

  it('without a resolver, no DNS at all', () => {
    expect(verdictFor({ ...base, resolver: null }, open, udp('10.255.255.53', 53))).toBe('deny');
  });

  it('a tunneled slot denies everything in its own chain, but is still judged by address for its proxy', () => {
    const egressProxy = { address: '198.51.100.40:1080' };
    const p = parseNetworkPolicy({ denyOut: ['203.0.113.0/24'], egressProxy });
    expect(verdictFor(base, p, tcp('198.51.100.10', 443))).toBe('deny');
    expect(addressVerdictFor(base, p, tcp('198.51.100.10', 443))).toBe('accept');
    expect(addressVerdictFor(base, p, tcp('203.0.113.9', 443))).toBe('deny');
    expect(addressVerdictFor(base, p, tcp('10.11.0.5', 443))).toBe('deny');
    expect(addressVerdictFor(base, p, tcp('169.254.169.254', 80))).toBe('deny');
    const off = parseNetworkPolicy({ allowInternetAccess: false, allowOut: ['198.51.100.10'], egressProxy });
    expect(addressVerdictFor(base, off, tcp('198.51.100.10', 443))).toBe('accept');
    expect(addressVerdictFor(base, off, tcp('198.51.100.11', 443))).toBe('deny');
    // Without a proxy both agree.
    expect(addressVerdictFor(base, open, tcp('198.51.100.10'))).toBe(
      verdictFor(base, open, tcp('198.51.100.10')),
    );
  });
});
