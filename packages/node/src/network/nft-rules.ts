// nftables scripts (for `nft -f -`) of the aenv table. Pure text generation; every address that
// reaches a script has been parsed into a Cidr first, so no caller string is ever pasted in.
// The order of the egress decision is egress-model.ts's; these chains are its nftables form.
//
// table inet <prefix>
//   forward (hook forward, prio filter-10): iif sandbox veth → sandbox_egress; oif sandbox veth → sandbox_ingress
//   sandbox_egress: established → [v6 off, anti-spoof] → internal CIDRs → DNS to the resolver (vmap @dns)
//                   → built-in + always_denied → vmap @egress (per-slot chain, always ends in a verdict)
//                   → deny (a slot without a policy yet)
//   sandbox_ingress: only replies reach a sandbox through the forward path
//   input (hook input, prio filter-10): iif sandbox veth → sandbox_input (replies, DNS, redirected flows only);
//                   new flows to the egress proxy's ports from any other non-loopback interface: drop
//   prerouting (nat, prio dstnat-10): iif sandbox veth → vmap @proxied (per-slot `redirN` chain, domain slots only):
//                   DNS → the node resolver; TCP to the proxy ports that the CIDR policy would deny → egress proxy
//   postrouting (nat, prio srcnat-10): masquerade internal sources leaving through a non-sandbox interface
//   deny: tcp reset / icmp admin-prohibited, so refused connections fail at once

import {
  DNS_PORT,
  allowedCidrs,
  domainPatterns,
  hasRules,
  slotRules,
  tunneled,
  v4,
  type SlotRule,
} from './egress-model.js';
import type { RedirectTarget } from './egress/index.js';
import { collapseCidrs, formatCidr, parseIPv4, type Cidr } from '@aenv/config';
import type { SlotNames } from './names.js';
import type { EgressPolicy } from './types.js';

/** Slot veth → `jump slotN`: the slot's policy. A veth without an element is denied everything. */
export const EGRESS_MAP = 'egress';
/** Slot veth → `accept`: the slot may query the node's resolver. */
export const DNS_MAP = 'dns';
/** Slot veth → `jump redirN`: the nat redirects of a slot with domain entries. */
export const PROXIED_MAP = 'proxied';
export const SLOT_MAPS = [EGRESS_MAP, DNS_MAP, PROXIED_MAP] as const;
export type SlotMap = (typeof SLOT_MAPS)[number];

interface BaseChain {
  type: 'filter' | 'nat';
  hook: 'forward' | 'input' | 'postrouting' | 'prerouting';
  /** Numeric priority as `nft -j list` reports it. */
  prio: number;
  /** Priority as written in a script. */
  prioText: string;
}

export const BASE_CHAINS: Record<string, BaseChain> = {
  forward: { type: 'filter', hook: 'forward', prio: -10, prioText: 'filter - 10' },
  input: { type: 'filter', hook: 'input', prio: -10, prioText: 'filter - 10' },
  postrouting: { type: 'nat', hook: 'postrouting', prio: 90, prioText: 'srcnat - 10' },
  prerouting: { type: 'nat', hook: 'prerouting', prio: -110, prioText: 'dstnat - 10' },
};

export const REGULAR_CHAINS = ['deny', 'sandbox_egress', 'sandbox_ingress', 'sandbox_input'] as const;

export const SHARED_CHAINS: readonly string[] = [...Object.keys(BASE_CHAINS), ...REGULAR_CHAINS];

export interface SharedRulesSpec {
  names: SlotNames;
  /** host_interaction_cidr and veth_cidr. */
  internalCidrs: readonly Cidr[];
  /** Built-in denies and always_denied_cidrs. */
  deniedCidrs: readonly Cidr[];
  /** IPv4 nameserver slots whose policy allows it may query on port 53; null: no DNS exception. */
  dnsServer: string | null;
  /** The egress proxy's and node resolver's ports (null: no domain egress on this node). */
  redirect?: RedirectTarget | null;
}

/** What a listing of the table found that must go (see reconcile). */
export interface StaleObjects {
  /** vmap keys (interface names) to delete, per map. */
  elements: readonly { map: SlotMap; key: string }[];
  /** Regular chains to flush and delete. */
  chains: readonly string[];
  /** Base chains whose hook or priority differ from BASE_CHAINS: dropped and re-created. */
  mismatchedBaseChains: readonly string[];
}

const NO_STALE: StaleObjects = { elements: [], chains: [], mismatchedBaseChains: [] };

function v4Set(cidrs: readonly Cidr[]): string | null {
  const v4 = collapseCidrs(cidrs.filter((c) => c.family === 4));
  if (v4.length === 0) return null;
  return `{ ${v4.map(formatCidr).join(', ')} }`;
}

/**
 * One transaction that (re)builds the shared part of the table and removes stale objects, leaving
 * the per-slot chains of live slots untouched. Safe to run on an existing table: established
 * connections keep flowing because the whole swap is atomic.
 */
export function sharedTableScript(spec: SharedRulesSpec, stale: StaleObjects = NO_STALE): string {
  const t = `inet ${spec.names.table}`;
  const veths = JSON.stringify(spec.names.vethWildcard);
  const lines: string[] = [`add table ${t}`];
  for (const map of SLOT_MAPS) lines.push(`add map ${t} ${map} { type ifname : verdict ; }`);
  for (const name of REGULAR_CHAINS) lines.push(`add chain ${t} ${name}`);
  for (const name of stale.mismatchedBaseChains)
    lines.push(`flush chain ${t} ${name}`, `delete chain ${t} ${name}`);
  for (const [name, c] of Object.entries(BASE_CHAINS)) {
    lines.push(
      `add chain ${t} ${name} { type ${c.type} hook ${c.hook} priority ${c.prioText} ; policy accept ; }`,
    );
  }
  for (const name of SHARED_CHAINS) lines.push(`flush chain ${t} ${name}`);
  // Only aenv writes this map, so other keys are unexpected; ones nft could not parse back are left.
  for (const map of SLOT_MAPS) {
    const keys = stale.elements.filter((e) => e.map === map && /^[A-Za-z0-9_.-]+$/.test(e.key));
    if (keys.length > 0)
      lines.push(`delete element ${t} ${map} { ${keys.map((e) => JSON.stringify(e.key)).join(', ')} }`);
  }
  for (const name of stale.chains) lines.push(`flush chain ${t} ${name}`);
  for (const name of stale.chains) lines.push(`delete chain ${t} ${name}`);

  const rule = (chain: string, body: string) => lines.push(`add rule ${t} ${chain} ${body}`);
  rule('deny', 'meta l4proto tcp reject with tcp reset');
  rule('deny', 'reject with icmpx type admin-prohibited');

  rule('forward', `iifname ${veths} jump sandbox_egress`);
  rule('forward', `oifname ${veths} jump sandbox_ingress`);

  // Tightening a policy cuts the tracked connections it no longer allows (conntrack.ts), so established
  // flows may be accepted before the policy is looked at.
  rule('sandbox_egress', 'ct state established,related accept');
  rule('sandbox_egress', 'ct state invalid drop');
  // IPv6 is not configured in slots; refuse it explicitly anyway.
  rule('sandbox_egress', 'meta nfproto ipv6 goto deny');
  // Source must be routed back through the interface it came in on: no spoofing from raw sockets.
  rule('sandbox_egress', 'fib saddr . iif oif missing drop');
  const internal = v4Set(spec.internalCidrs);
  if (internal) rule('sandbox_egress', `ip daddr ${internal} goto deny`);
  const dns = spec.dnsServer !== null ? dnsAddress(spec.dnsServer) : null;
  const dnsRule = `ip daddr ${dns} meta l4proto { tcp, udp } th dport ${DNS_PORT} iifname vmap @${DNS_MAP}`;
  if (dns) rule('sandbox_egress', dnsRule);
  const denied = v4Set(spec.deniedCidrs);
  if (denied) rule('sandbox_egress', `ip daddr ${denied} goto deny`);
  rule('sandbox_egress', `iifname vmap @${EGRESS_MAP}`);
  rule('sandbox_egress', 'goto deny');

  rule('sandbox_ingress', 'ct state established,related accept');
  rule('sandbox_ingress', 'drop');

  rule('input', `iifname ${veths} jump sandbox_input`);
  const proxyPorts = spec.redirect ? redirectPorts(spec.redirect) : null;
  // The egress proxy listens on every address (the redirect picks the slot's veth one): only redirected
  // sandbox flows may reach it from outside. Only new flows, and not on loopback: the ports are ephemeral, and
  // once the node stops (the table stays for the sandboxes) the kernel hands them to other listeners and to
  // outgoing connections, whose packets this rule must not swallow.
  if (proxyPorts)
    rule('input', `iifname != "lo" ct state new meta l4proto { tcp, udp } th dport ${proxyPorts} drop`);
  rule('sandbox_input', 'ct state established,related accept');
  // Redirected flows skip the forward path's anti-spoof rule; the proxy tells slots apart by source address.
  rule('sandbox_input', 'fib saddr . iif oif missing drop');
  if (dns) rule('sandbox_input', dnsRule);
  if (proxyPorts)
    rule('sandbox_input', `ct status dnat meta l4proto { tcp, udp } th dport ${proxyPorts} accept`);
  rule('sandbox_input', 'goto deny');

  rule('prerouting', `iifname ${veths} iifname vmap @${PROXIED_MAP}`);

  rule('postrouting', `oifname ${veths} return`);
  if (internal) rule('postrouting', `ip saddr ${internal} masquerade`);
  return lines.join('\n') + '\n';
}

/**
 * Replaces the slot's own chain with `policy`'s rules and hooks its veth to it; adds or removes the veth's
 * DNS element (`dnsAllowed`: see egress-model.ts `resolverAllowed`). One transaction.
 */
export function slotPolicyScript(
  names: SlotNames,
  index: number,
  policy: EgressPolicy,
  opts: { dnsAllowed: boolean; redirect?: RedirectTarget | null; base?: RedirectBase },
): string {
  const t = `inet ${names.table}`;
  const chain = names.chain(index);
  const redir = names.redirectChain(index);
  const key = JSON.stringify(names.veth(index));
  const lines = [`add chain ${t} ${chain}`, `flush chain ${t} ${chain}`];
  for (const r of slotRules(policy)) lines.push(`add rule ${t} ${chain} ${renderSlotRule(r)}`);
  lines.push(`add element ${t} ${EGRESS_MAP} { ${key} : jump ${chain} }`);
  lines.push(`add element ${t} ${DNS_MAP} { ${key} : accept }`);
  if (!opts.dnsAllowed) lines.push(`delete element ${t} ${DNS_MAP} { ${key} }`);
  lines.push(`add chain ${t} ${redir}`, `flush chain ${t} ${redir}`);
  lines.push(`add element ${t} ${PROXIED_MAP} { ${key} : jump ${redir} }`);
  const rules = opts.redirect && opts.base ? redirectRules(policy, opts.redirect, opts.base) : [];
  if (rules.length === 0) lines.push(`delete element ${t} ${PROXIED_MAP} { ${key} }`);
  for (const r of rules) lines.push(`add rule ${t} ${redir} ${r}`);
  return lines.join('\n') + '\n';
}

/** The node-wide destinations the nat chain leaves to the filter (which denies them). */
export interface RedirectBase {
  internalCidrs: readonly Cidr[];
  deniedCidrs: readonly Cidr[];
}

/**
 * The nat rules of a slot with domain entries (none without): all its DNS goes to the node resolver, and TCP to
 * a proxy port goes to the egress proxy unless the filter would decide it by address anyway: internal and
 * always-denied destinations (denied there), allowOut CIDRs (accepted there), and, with internet access on,
 * destinations outside denyOut (accepted there). Domain allows thereby beat denyOut, as E2B documents.
 * A tunneled slot (egressProxy) sends the TCP the filter would accept by address to the egress proxy's tunnel
 * port instead, so it leaves through the SOCKS5 upstream (egress/tunnel.ts); its DNS stays as it was.
 */
export function redirectRules(policy: EgressPolicy, target: RedirectTarget, base: RedirectBase): string[] {
  // A slot with `network.rules` sends every flow to the proxy ports through the proxy, which intercepts the
  // rules' names and judges the others by name or, failing that, by this same CIDR policy (proxy.ts `admitted`).
  // With an egressProxy as well, what the proxy ports do not take and the CIDR policy allows goes to the tunnel
  // after them, so the rules' names are intercepted and everything still leaves through the SOCKS5 upstream.
  const intercepts = hasRules(policy);
  const domains = domainPatterns(policy).length > 0;
  const tunnel = tunneled(policy) && target.tunnelPort !== undefined ? target.tunnelPort : null;
  if (!domains && !intercepts && tunnel === null) return [];
  const rules = [
    domains || intercepts
      ? `meta l4proto { tcp, udp } th dport ${DNS_PORT} redirect to :${target.dnsPort}`
      : `meta l4proto { tcp, udp } th dport ${DNS_PORT} return`,
  ];
  const byAddress = tunnel !== null ? `meta l4proto tcp redirect to :${tunnel}` : 'return';
  for (const cidrs of [base.internalCidrs, base.deniedCidrs]) {
    const set = v4Set(cidrs);
    if (set) rules.push(`ip daddr ${set} return`);
  }
  const allowed = v4Set(allowedCidrs(policy));
  if (allowed) rules.push(`ip daddr ${allowed} ${byAddress}`);
  const internet = policy.allowInternetAccess !== false;
  const deny = v4Set(v4(policy.denyOut));
  // With internet access on, the addresses outside denyOut (all, when it is empty) are allowed by address.
  const rest = deny ? `ip daddr != ${deny} ${byAddress}` : byAddress;
  if (internet && !intercepts) {
    // Internet on and nothing denied: every address is allowed, the proxy has nothing to add.
    if (!deny) {
      if (tunnel !== null) rules.push(byAddress);
      return rules;
    }
    rules.push(rest);
  }
  if ((domains || intercepts) && target.tcp.size > 0) {
    const ports = [...target.tcp.keys()].join(', ');
    const map = [...target.tcp].map(([from, to]) => `${from} : ${to}`).join(', ');
    rules.push(`tcp dport { ${ports} } redirect to : tcp dport map { ${map} }`);
  }
  // Without a tunnel the filter accepts these itself (the slot chain); a tunneled slot's chain denies them.
  if (internet && intercepts && tunnel !== null) rules.push(rest);
  return rules;
}

function redirectPorts(target: RedirectTarget): string {
  const tunnel = target.tunnelPort !== undefined ? [target.tunnelPort] : [];
  return `{ ${[target.dnsPort, ...target.tcp.values(), ...tunnel].join(', ')} }`;
}

function renderSlotRule(rule: SlotRule): string {
  const parts: string[] = [];
  if (rule.to) {
    const set = v4Set(rule.to);
    if (!set) throw new Error('a slot rule names no IPv4 destination');
    parts.push(`ip daddr ${set}`);
  }
  if (rule.tcpUdpPort !== undefined) parts.push(`meta l4proto { tcp, udp } th dport ${rule.tcpUdpPort}`);
  parts.push(rule.verdict === 'accept' ? 'accept' : 'goto deny');
  return parts.join(' ');
}

/**
 * Removes the slot's elements and chain: the slot is denied everything again. Adding them first makes the
 * transaction succeed whether or not they exist, so no listing is needed.
 */
export function slotRemovalScript(names: SlotNames, index: number): string {
  const t = `inet ${names.table}`;
  const chain = names.chain(index);
  const redir = names.redirectChain(index);
  const key = JSON.stringify(names.veth(index));
  return (
    [
      `add chain ${t} ${chain}`,
      `add chain ${t} ${redir}`,
      `add element ${t} ${EGRESS_MAP} { ${key} : jump ${chain} }`,
      `add element ${t} ${DNS_MAP} { ${key} : accept }`,
      `add element ${t} ${PROXIED_MAP} { ${key} : jump ${redir} }`,
      `delete element ${t} ${EGRESS_MAP} { ${key} }`,
      `delete element ${t} ${DNS_MAP} { ${key} }`,
      `delete element ${t} ${PROXIED_MAP} { ${key} }`,
      `flush chain ${t} ${chain}`,
      `delete chain ${t} ${chain}`,
      `flush chain ${t} ${redir}`,
      `delete chain ${t} ${redir}`,
    ].join('\n') + '\n'
  );
}

/** Deletes the whole table if it exists. */
export function dropTableScript(names: SlotNames): string {
  return `add table inet ${names.table}\ndelete table inet ${names.table}\n`;
}

function dnsAddress(text: string): string {
  const v4 = parseIPv4(text);
  if (v4 === null) throw new Error(`DNS server ${JSON.stringify(text)} is not an IPv4 address`);
  return text;
}
