// What a sandbox may send, as data. nft-rules.ts writes it into nftables; `verdictFor` answers the same question
// in process, to find the tracked connections a new policy no longer allows (they are then cut, conntrack.ts).
// Both follow the order below, so the kernel and the server agree on every flow:
//
//   1. internal CIDRs (other sandboxes, host link ends)            deny
//   2. TCP/UDP port 53 to the node's resolver                     accept if the slot's policy allows the resolver
//   3. built-in denies ∪ always_denied_cidrs                       deny
//   4. no policy installed yet (fresh slot)                        deny
//   5. the slot's rules: allowOut accept → denyOut deny → (internet on: port 53 elsewhere deny, then accept)
//                                                                  (internet off: deny)
//
// Domain entries of allowOut do not take part here: the nat chain (nft-rules.ts, `redirectRules`) sends the TCP
// flows this order would deny to the egress proxy (egress/), which judges them by name, and DNS to the node's
// resolver; neither reaches the forward path.
//
// A slot with an egressProxy (`tunneled`) has every TCP flow that step 5 would accept redirected to the egress
// proxy too (which tunnels it through the SOCKS5 upstream, egress/tunnel.ts), so its own chain denies whatever
// still reaches the forward path: nothing leaves such a sandbox except through its proxy.

import { cidrContainsAddress, collapseCidrs, parseCidr, type Cidr } from '@aenv/config';
import type { EgressPolicy } from './types.js';

export const DNS_PORT = 53;
export const PROTO_TCP = 6;
export const PROTO_UDP = 17;

/** A new outbound flow of a sandbox, as the filter sees its first packet. */
export interface Flow {
  /** IPv4 destination. */
  daddr: bigint;
  /** IANA protocol number. */
  protocol: number;
  /** Destination port (TCP, UDP); null for protocols without ports. */
  dport: number | null;
}

export type Verdict = 'accept' | 'deny';

/** One rule of a slot's own chain: a match, and what happens to a flow that matches. */
export interface SlotRule {
  /** Destination in one of these IPv4 CIDRs (absent: any destination). */
  to?: readonly Cidr[];
  /** TCP or UDP to this port only (absent: any protocol and port). */
  tcpUdpPort?: number;
  verdict: Verdict;
}

/** The node-wide part of the decision (the same for every slot). */
export interface EgressBase {
  /** host_interaction_cidr and veth_cidr. */
  internalCidrs: readonly Cidr[];
  /** Built-in denies and always_denied_cidrs. */
  deniedCidrs: readonly Cidr[];
  /** The node's resolver (IPv4), or null: sandboxes get no DNS. */
  resolver: bigint | null;
}

/** Whether an allowOut entry is a domain pattern (parseNetworkPolicy keeps them beside the CIDRs). */
export const isDomainEntry = (entry: string): boolean => !entry.includes('/') && !entry.includes(':');

/** Whether the policy has `network.rules` (its proxy-port flows then go through the egress proxy). */
export const hasRules = (policy: EgressPolicy): boolean => Object.keys(policy.rules ?? {}).length > 0;

/** The domain patterns of allowOut (`example.com`, `*.example.com`). */
export const domainPatterns = (policy: EgressPolicy): string[] => policy.allowOut.filter(isDomainEntry);

export const v4 = (entries: readonly string[]): Cidr[] =>
  collapseCidrs(
    entries.map((entry) => {
      const cidr = parseCidr(entry);
      if (!cidr)
        throw new Error(`${JSON.stringify(entry)} is not a normalized CIDR (use parseNetworkPolicy)`);
      return cidr;
    }),
  ).filter((c) => c.family === 4);

/** allowOut's IPv4 CIDRs (its domain patterns are the egress proxy's). */
export const allowedCidrs = (policy: EgressPolicy): Cidr[] =>
  v4(policy.allowOut.filter((entry) => !isDomainEntry(entry)));

/** Whether the slot's allowed TCP leaves through a SOCKS5 upstream (egress/tunnel.ts) rather than the kernel path. */
export const tunneled = (policy: EgressPolicy): boolean => policy.egressProxy !== undefined;

/** The slot's own chain for `policy` (step 5). It always ends in a verdict: nothing falls through. */
export function slotRules(policy: EgressPolicy): SlotRule[] {
  if (tunneled(policy)) return [{ verdict: 'deny' }];
  return addressRules(policy);
}

/** Step 5 by address alone, as if the slot had no egressProxy: what a tunneled slot's proxy may carry. */
export function addressRules(policy: EgressPolicy): SlotRule[] {
  const rules: SlotRule[] = [];
  const allow = allowedCidrs(policy);
  const deny = v4(policy.denyOut);
  if (allow.length > 0) rules.push({ to: allow, verdict: 'accept' });
  if (deny.length > 0) rules.push({ to: deny, verdict: 'deny' });
  if (policy.allowInternetAccess === false) {
    rules.push({ verdict: 'deny' });
  } else {
    // DNS goes to the node's resolver only (step 2): a resolver of the sandbox's choosing is a way around it.
    rules.push({ tcpUdpPort: DNS_PORT, verdict: 'deny' });
    rules.push({ verdict: 'accept' });
  }
  return rules;
}

/**
 * Whether the slot may query the node's resolver (step 2): the resolver counts as a destination of the policy
 * (allowOut first, then denyOut, then allow_internet_access), except that always-denied ranges do not block it,
 * as resolvers often sit in private or link-local ranges.
 */
export function resolverAllowed(policy: EgressPolicy, resolver: bigint): boolean {
  const hit = (cidrs: readonly Cidr[]) => cidrs.some((c) => inCidr(c, resolver));
  if (hit(allowedCidrs(policy))) return true;
  if (hit(v4(policy.denyOut))) return false;
  return policy.allowInternetAccess !== false;
}

/** The verdict the filter gives the first packet of `flow` from a slot with `policy` (null: none installed). */
export function verdictFor(base: EgressBase, policy: EgressPolicy | null, flow: Flow): Verdict {
  return judge(base, policy, flow, slotRules);
}

/**
 * `verdictFor` by address alone, as if the slot had no egressProxy: whether its policy lets it reach the
 * destination at all, through its SOCKS5 upstream or not (what the egress proxy admits a name's address by).
 */
export function addressVerdictFor(base: EgressBase, policy: EgressPolicy | null, flow: Flow): Verdict {
  return judge(base, policy, flow, addressRules);
}

function judge(
  base: EgressBase,
  policy: EgressPolicy | null,
  flow: Flow,
  rulesOf: (policy: EgressPolicy) => SlotRule[],
): Verdict {
  const hit = (cidrs: readonly Cidr[]) => cidrs.some((c) => inCidr(c, flow.daddr));
  if (hit(base.internalCidrs)) return 'deny';
  if (
    base.resolver !== null &&
    flow.daddr === base.resolver &&
    isTcpUdp(flow) &&
    flow.dport === DNS_PORT &&
    policy !== null &&
    resolverAllowed(policy, base.resolver)
  ) {
    return 'accept';
  }
  if (hit(base.deniedCidrs)) return 'deny';
  if (policy === null) return 'deny';
  return rulesVerdict(rulesOf(policy), flow);
}

/** The first verdict of `rules` for `flow` (deny when none matches). */
export function rulesVerdict(rules: readonly SlotRule[], flow: Flow): Verdict {
  for (const rule of rules) if (ruleMatches(rule, flow)) return rule.verdict;
  return 'deny';
}

function ruleMatches(rule: SlotRule, flow: Flow): boolean {
  if (rule.to && !rule.to.some((c) => inCidr(c, flow.daddr))) return false;
  if (rule.tcpUdpPort !== undefined && !(isTcpUdp(flow) && flow.dport === rule.tcpUdpPort)) return false;
  return true;
}

const isTcpUdp = (flow: Flow) => flow.protocol === PROTO_TCP || flow.protocol === PROTO_UDP;

const inCidr = (cidr: Cidr, addr: bigint) => cidrContainsAddress(cidr, { family: 4, value: addr });
