import { describe, expect, it } from 'vitest';
import { parseCidr, type Cidr } from '@aenv/config';
import { SlotNames } from './names.js';
import { redirectRules, sharedTableScript, slotPolicyScript, slotRemovalScript } from './nft-rules.js';
import type { EgressPolicy } from './types.js';

const names = new SlotNames('aenv');
const cidrs = (...t: string[]) => t.map((x) => parseCidr(x) as Cidr);

const spec = {
  names,
  internalCidrs: cidrs('10.11.0.0/16', '10.12.0.0/16'),
  deniedCidrs: cidrs('10.0.0.0/8', '169.254.0.0/16'),
  dnsServer: '192.0.2.53',
};

const rulesOf = (script: string, chain: string) =>
  script
    .split('\n')
    .filter((l) => l.startsWith(`add rule inet aenv ${chain} `))
    .map((l) => l.slice(`add rule inet aenv ${chain} `.length));

describe('sharedTableScript', () => {
  const script = sharedTableScript(spec);

  it('orders sandbox egress as egress-model.ts: internal, DNS per slot, denied, per-slot rules, deny', () => {
    expect(rulesOf(script, 'sandbox_egress')).toEqual([
      'ct state established,related accept',
      'ct state invalid drop',
      'meta nfproto ipv6 goto deny',
      'fib saddr . iif oif missing drop',
      'ip daddr { 10.11.0.0/16, 10.12.0.0/16 } goto deny',
      'ip daddr 192.0.2.53 meta l4proto { tcp, udp } th dport 53 iifname vmap @dns',
      'ip daddr { 10.0.0.0/8, 169.254.0.0/16 } goto deny',
      'iifname vmap @egress',
      // A slot without a policy (fresh, warm, or mid-restore) is denied everything.
      'goto deny',
    ]);
  });

  it('sends sandbox veth traffic through the sandbox chains and masquerades the rest', () => {
    expect(rulesOf(script, 'forward')).toEqual([
      'iifname "aenv-v*" jump sandbox_egress',
      'oifname "aenv-v*" jump sandbox_ingress',
    ]);
    expect(rulesOf(script, 'input')).toEqual(['iifname "aenv-v*" jump sandbox_input']);
    expect(rulesOf(script, 'prerouting')).toEqual(['iifname "aenv-v*" iifname vmap @proxied']);
    expect(rulesOf(script, 'sandbox_input')).toEqual([
      'ct state established,related accept',
      'fib saddr . iif oif missing drop',
      'ip daddr 192.0.2.53 meta l4proto { tcp, udp } th dport 53 iifname vmap @dns',
      'goto deny',
    ]);
    expect(rulesOf(script, 'sandbox_ingress')).toEqual(['ct state established,related accept', 'drop']);
    expect(rulesOf(script, 'postrouting')).toEqual([
      'oifname "aenv-v*" return',
      'ip saddr { 10.11.0.0/16, 10.12.0.0/16 } masquerade',
    ]);
    expect(rulesOf(script, 'deny')).toEqual([
      'meta l4proto tcp reject with tcp reset',
      'reject with icmpx type admin-prohibited',
    ]);
  });

  it('hooks at the priorities docs/networking.md gives and flushes before re-adding', () => {
    expect(script).toContain(
      'add chain inet aenv forward { type filter hook forward priority filter - 10 ; policy accept ; }',
    );
    expect(script).toContain(
      'add chain inet aenv postrouting { type nat hook postrouting priority srcnat - 10 ; policy accept ; }',
    );
    const lines = script.split('\n');
    expect(lines.indexOf('flush chain inet aenv sandbox_egress')).toBeLessThan(
      lines.findIndex((l) => l.startsWith('add rule inet aenv sandbox_egress')),
    );
  });

  it('leaves out the DNS exception without a nameserver and the deny rule without CIDRs', () => {
    const bare = sharedTableScript({ ...spec, dnsServer: null, deniedCidrs: [] });
    expect(bare).not.toContain('dport 53');
    expect(rulesOf(bare, 'sandbox_egress')).toHaveLength(7);
  });

  it('removes stale elements and chains after flushing, and re-creates mismatched base chains', () => {
    const s = sharedTableScript(spec, {
      elements: [
        { map: 'egress', key: 'aenv-v7' },
        { map: 'dns', key: 'aenv-v7' },
        { map: 'egress', key: 'weird"name' },
      ],
      chains: ['slot7', 'stray'],
      mismatchedBaseChains: ['forward'],
    });
    const lines = s.split('\n');
    const at = (l: string) => lines.indexOf(l);
    expect(at('delete element inet aenv egress { "aenv-v7" }')).toBeGreaterThan(0);
    expect(at('delete element inet aenv dns { "aenv-v7" }')).toBeGreaterThan(0);
    expect(s).not.toContain('weird');
    expect(at('flush chain inet aenv slot7')).toBeLessThan(at('delete chain inet aenv slot7'));
    expect(at('delete chain inet aenv forward')).toBeLessThan(
      lines.findIndex((l) => l.startsWith('add chain inet aenv forward {')),
    );
  });

  it('admits only redirected sandbox flows to the egress proxy and resolver ports', () => {
    const s = sharedTableScript({
      ...spec,
      redirect: {
        dnsPort: 15053,
        tcp: new Map([
          [80, 15080],
          [443, 15081],
        ]),
      },
    });
    expect(rulesOf(s, 'input')).toEqual([
      'iifname "aenv-v*" jump sandbox_input',
      'iifname != "lo" ct state new meta l4proto { tcp, udp } th dport { 15053, 15080, 15081 } drop',
    ]);
    expect(rulesOf(s, 'sandbox_input').slice(-2)).toEqual([
      'ct status dnat meta l4proto { tcp, udp } th dport { 15053, 15080, 15081 } accept',
      'goto deny',
    ]);
    expect(s).toContain(
      'add chain inet aenv prerouting { type nat hook prerouting priority dstnat - 10 ; policy accept ; }',
    );
  });

  it('refuses a nameserver that is not an IPv4 address', () => {
    expect(() => sharedTableScript({ ...spec, dnsServer: '192.0.2.53; flush ruleset' })).toThrow(
      /not an IPv4/,
    );
  });
});

describe('slotPolicyScript', () => {
  const script = (policy: Partial<EgressPolicy>, dnsAllowed = true) =>
    slotPolicyScript(
      names,
      7,
      { allowOut: [], denyOut: [], allowInternetAccess: null, ...policy },
      { dnsAllowed },
    );

  it('writes allowOut accept, denyOut reject, base deny, then maps the veth to the chain', () => {
    const s = script(
      {
        allowOut: ['198.51.100.0/24', '198.51.100.10/32', '2001:db8::/32'],
        denyOut: ['203.0.113.0/24'],
        allowInternetAccess: false,
      },
      false,
    );
    expect(s.split('\n').filter(Boolean)).toEqual([
      'add chain inet aenv slot7',
      'flush chain inet aenv slot7',
      'add rule inet aenv slot7 ip daddr { 198.51.100.0/24 } accept',
      'add rule inet aenv slot7 ip daddr { 203.0.113.0/24 } goto deny',
      'add rule inet aenv slot7 goto deny',
      'add element inet aenv egress { "aenv-v7" : jump slot7 }',
      'add element inet aenv dns { "aenv-v7" : accept }',
      'delete element inet aenv dns { "aenv-v7" }',
      // No domain entries: the nat chain is empty and unhooked.
      'add chain inet aenv redir7',
      'flush chain inet aenv redir7',
      'add element inet aenv proxied { "aenv-v7" : jump redir7 }',
      'delete element inet aenv proxied { "aenv-v7" }',
    ]);
  });

  it('with internet on ends in accept, after refusing port 53 to anything but the resolver', () => {
    expect(rulesOf(script({ denyOut: ['203.0.113.0/24'], allowInternetAccess: true }), 'slot7')).toEqual([
      'ip daddr { 203.0.113.0/24 } goto deny',
      'meta l4proto { tcp, udp } th dport 53 goto deny',
      'accept',
    ]);
    // The default policy gets a chain too: without one the slot is denied everything.
    expect(rulesOf(script({}), 'slot7')).toEqual([
      'meta l4proto { tcp, udp } th dport 53 goto deny',
      'accept',
    ]);
  });

  it('keeps the DNS element only when the resolver is allowed', () => {
    expect(script({}, true)).not.toContain('delete element inet aenv dns');
    expect(script({}, false)).toContain('delete element inet aenv dns { "aenv-v7" }');
  });

  it('refuses entries that are not normalized CIDRs instead of pasting them', () => {
    expect(() => script({ allowOut: ['1.2.3.4/32 accept; flush ruleset'] })).toThrow(/not a normalized CIDR/);
    expect(() => script({ denyOut: ['example.com'] })).toThrow(/not a normalized CIDR/);
  });
});

describe('redirectRules', () => {
  const target = {
    dnsPort: 15053,
    tcp: new Map([
      [80, 15080],
      [443, 15081],
    ]),
  };
  const base = { internalCidrs: cidrs('10.11.0.0/16'), deniedCidrs: cidrs('169.254.0.0/16') };
  const policy = (p: Partial<EgressPolicy>): EgressPolicy => ({
    allowOut: [],
    denyOut: [],
    allowInternetAccess: null,
    ...p,
  });
  const redirectAll = 'tcp dport { 80, 443 } redirect to : tcp dport map { 80 : 15080, 443 : 15081 }';

  it('adds nothing without domain entries', () => {
    expect(
      redirectRules(policy({ allowOut: ['198.51.100.0/24'], allowInternetAccess: false }), target, base),
    ).toEqual([]);
  });

  it('with internet off sends DNS to the resolver and what the address filter would not accept to the proxy', () => {
    expect(
      redirectRules(
        policy({ allowOut: ['a.test', '198.51.100.7/32'], allowInternetAccess: false }),
        target,
        base,
      ),
    ).toEqual([
      'meta l4proto { tcp, udp } th dport 53 redirect to :15053',
      'ip daddr { 10.11.0.0/16 } return',
      'ip daddr { 169.254.0.0/16 } return',
      'ip daddr { 198.51.100.7/32 } return',
      redirectAll,
    ]);
  });

  it('with internet on redirects only denyOut destinations, so domain allows beat denyOut', () => {
    expect(
      redirectRules(policy({ allowOut: ['*.a.test'], denyOut: ['0.0.0.0/0'] }), target, base).slice(-2),
    ).toEqual(['ip daddr != { 0.0.0.0/0 } return', redirectAll]);
    // Nothing denied: every address is allowed already; only DNS goes to the node resolver.
    expect(redirectRules(policy({ allowOut: ['a.test'] }), target, base).at(-1)).toBe(
      'ip daddr { 169.254.0.0/16 } return',
    );
  });

  it('with network.rules sends every proxy-port flow the address filter leaves open through the proxy', () => {
    const rules = { 'api.test': [{ transform: { headers: { Authorization: 'x' } } }] };
    // Internet on, no domains, nothing denied: still through the proxy (it intercepts the rules' names).
    expect(redirectRules(policy({ rules }), target, base)).toEqual([
      'meta l4proto { tcp, udp } th dport 53 redirect to :15053',
      'ip daddr { 10.11.0.0/16 } return',
      'ip daddr { 169.254.0.0/16 } return',
      redirectAll,
    ]);
    // denyOut does not send the rest direct: the proxy judges by the same CIDR policy.
    expect(redirectRules(policy({ rules, denyOut: ['203.0.113.0/24'] }), target, base).at(-1)).toBe(
      redirectAll,
    );
    expect(redirectRules(policy({ rules: {} }), target, base)).toEqual([]);
  });

  describe('with an egressProxy (tunneled)', () => {
    const tunnel = { ...target, tunnelPort: 15090 };
    const egressProxy = { address: 'p.test:1080', host: 'p.test', port: 1080 };
    const toTunnel = 'meta l4proto tcp redirect to :15090';

    it('sends the TCP the address policy allows to the tunnel, never internal or denied destinations', () => {
      expect(
        redirectRules(
          policy({ allowOut: ['a.test', '198.51.100.7/32'], allowInternetAccess: false, egressProxy }),
          tunnel,
          base,
        ),
      ).toEqual([
        'meta l4proto { tcp, udp } th dport 53 redirect to :15053',
        'ip daddr { 10.11.0.0/16 } return',
        'ip daddr { 169.254.0.0/16 } return',
        `ip daddr { 198.51.100.7/32 } ${toTunnel}`,
        redirectAll,
      ]);
    });

    it('tunnels everything outside denyOut with internet on, and all TCP with nothing denied', () => {
      expect(
        redirectRules(
          policy({ allowOut: ['a.test'], denyOut: ['192.0.2.0/24'], egressProxy }),
          tunnel,
          base,
        ).slice(-2),
      ).toEqual([`ip daddr != { 192.0.2.0/24 } ${toTunnel}`, redirectAll]);
      // No domains: DNS is left to the filter (the node's nameserver), and there is no domain redirect.
      expect(redirectRules(policy({ egressProxy }), tunnel, base)).toEqual([
        'meta l4proto { tcp, udp } th dport 53 return',
        'ip daddr { 10.11.0.0/16 } return',
        'ip daddr { 169.254.0.0/16 } return',
        toTunnel,
      ]);
    });

    it('with network.rules too: proxy ports to the proxy first, then the rest the policy allows to the tunnel', () => {
      const rules = { 'api.test': [{ transform: { headers: { Authorization: 'x' } } }] };
      // Internet on, nothing denied: every proxy-port flow is intercepted or carried, all other TCP tunneled.
      expect(redirectRules(policy({ rules, egressProxy }), tunnel, base)).toEqual([
        'meta l4proto { tcp, udp } th dport 53 redirect to :15053',
        'ip daddr { 10.11.0.0/16 } return',
        'ip daddr { 169.254.0.0/16 } return',
        redirectAll,
        toTunnel,
      ]);
      expect(
        redirectRules(
          policy({ rules, egressProxy, allowOut: ['198.51.100.7/32'], denyOut: ['192.0.2.0/24'] }),
          tunnel,
          base,
        ).slice(-3),
      ).toEqual([
        `ip daddr { 198.51.100.7/32 } ${toTunnel}`,
        redirectAll,
        `ip daddr != { 192.0.2.0/24 } ${toTunnel}`,
      ]);
      // Internet off: only allowOut's CIDRs by address; the proxy ports for names.
      expect(
        redirectRules(
          policy({ rules, egressProxy, allowOut: ['a.test', '198.51.100.7/32'], allowInternetAccess: false }),
          tunnel,
          base,
        ).slice(-2),
      ).toEqual([`ip daddr { 198.51.100.7/32 } ${toTunnel}`, redirectAll]);
      const s = slotPolicyScript(names, 4, policy({ rules, egressProxy }), {
        dnsAllowed: true,
        redirect: tunnel,
        base,
      });
      expect(rulesOf(s, 'slot4')).toEqual(['goto deny']);
    });

    it('denies in the slot chain whatever is not redirected (UDP, ICMP, denied TCP)', () => {
      const s = slotPolicyScript(names, 4, policy({ egressProxy }), {
        dnsAllowed: true,
        redirect: tunnel,
        base,
      });
      expect(rulesOf(s, 'slot4')).toEqual(['goto deny']);
      expect(rulesOf(s, 'redir4').at(-1)).toBe(toTunnel);
      expect(s).not.toContain('p.test');
    });

    it('opens the tunnel port to redirected sandbox flows only', () => {
      const shared = sharedTableScript({ ...spec, redirect: tunnel });
      expect(rulesOf(shared, 'sandbox_input')).toContain(
        'ct status dnat meta l4proto { tcp, udp } th dport { 15053, 15080, 15081, 15090 } accept',
      );
    });
  });

  it('hooks the slot veth to its nat chain when there are rules', () => {
    const s = slotPolicyScript(names, 7, policy({ allowOut: ['a.test'], allowInternetAccess: false }), {
      dnsAllowed: false,
      redirect: target,
      base,
    });
    expect(s).toContain('add element inet aenv proxied { "aenv-v7" : jump redir7 }');
    expect(s).not.toContain('delete element inet aenv proxied');
    expect(rulesOf(s, 'redir7').at(-1)).toBe(redirectAll);
    // The domain never reaches a script: the proxy judges names.
    expect(s).not.toContain('a.test');
  });
});

describe('slotRemovalScript', () => {
  it('adds before deleting so it succeeds whether or not the chain and elements exist', () => {
    expect(slotRemovalScript(names, 3).split('\n').filter(Boolean)).toEqual([
      'add chain inet aenv slot3',
      'add chain inet aenv redir3',
      'add element inet aenv egress { "aenv-v3" : jump slot3 }',
      'add element inet aenv dns { "aenv-v3" : accept }',
      'add element inet aenv proxied { "aenv-v3" : jump redir3 }',
      'delete element inet aenv egress { "aenv-v3" }',
      'delete element inet aenv dns { "aenv-v3" }',
      'delete element inet aenv proxied { "aenv-v3" }',
      'flush chain inet aenv slot3',
      'delete chain inet aenv slot3',
      'flush chain inet aenv redir3',
      'delete chain inet aenv redir3',
    ]);
  });
});
