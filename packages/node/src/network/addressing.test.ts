import { describe, expect, it } from 'vitest';
import { AddressPlan } from './addressing.js';

describe('AddressPlan', () => {
  it('derives the slot addresses of the reference defaults', () => {
    const plan = new AddressPlan('10.11.0.0/16', '10.12.0.0/16');
    expect(plan.maxIndex).toBe(32767);
    expect(plan.forIndex(1)).toEqual({
      hostInteractionIp: '10.11.0.1',
      hostLinkIp: '10.12.0.2',
      sandboxLinkIp: '10.12.0.3',
    });
    expect(plan.forIndex(300)).toEqual({
      hostInteractionIp: '10.11.1.44',
      hostLinkIp: '10.12.2.88',
      sandboxLinkIp: '10.12.2.89',
    });
    expect(plan.forIndex(32767)).toEqual({
      hostInteractionIp: '10.11.127.255',
      hostLinkIp: '10.12.255.254',
      sandboxLinkIp: '10.12.255.255',
    });
  });

  it('caps the slot count by the smaller CIDR', () => {
    expect(new AddressPlan('10.211.0.0/24', '10.212.0.0/16').maxIndex).toBe(255);
    expect(new AddressPlan('10.211.0.0/16', '10.212.0.0/24').maxIndex).toBe(127);
  });

  it('rejects indexes outside the plan', () => {
    const plan = new AddressPlan('10.211.0.0/24', '10.212.0.0/24');
    for (const bad of [0, -1, 128, 1.5, Number.NaN])
      expect(() => plan.forIndex(bad)).toThrow(/outside 1..127/);
  });

  it('rejects bad, non-IPv4 and overlapping CIDRs with the config key in the message', () => {
    expect(() => new AddressPlan('10.11.0.0', '10.12.0.0/16')).toThrow(
      /host_interaction_cidr must be an IPv4 CIDR/,
    );
    expect(() => new AddressPlan('10.11.0.0/16', 'fd00::/64')).toThrow(/veth_cidr must be an IPv4 CIDR/);
    expect(() => new AddressPlan('10.0.0.0/8', '10.12.0.0/16')).toThrow(/overlaps/);
    expect(() => new AddressPlan('10.11.0.0/32', '10.12.0.0/16')).toThrow(/no room/);
  });
});
