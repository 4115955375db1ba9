// nftables scripts (for `nft -f -`) of the aenv table. Pure text generation; every address that
// reaches a script has been parsed into a Cidr first, so no caller string is ever pasted in.
//
// table inet <prefix>
//   forward (hook forward, prio filter-10): iif sandbox veth → sandbox_egress; oif sandbox veth → sandbox_ingress
//   sandbox_egress: established → [anti-spoof, v6 off] → DNS → internal CIDRs → always_denied → vmap @egress
//                   (per-slot chain: allowOut accept → denyOut reject → base deny) → accept
//   sandbox_ingress: only replies reach a sandbox through the forward path
//   input (hook input, prio filter-10): iif sandbox veth → sandbox_input (replies and DNS only)
//   postrouting (nat, prio srcnat-10): masquerade internal sources leaving through a non-sandbox interface
//   deny: tcp reset / icmp admin-prohibited, so refused connections fail at once

import { collapseCidrs, formatCidr, parseCidr, parseIPv4, type Cidr } from './ip.js';
import type { SlotNames } from './names.js';
import type { EgressPolicy } from './types.js';

export const EGRESS_MAP = 'egress';

interface BaseChain {
  type: 'filter' | 'nat';
  hook: 'forward' | 'input' | 'postrouting';
  /** Numeric priority as `nft -j list` reports it. */
  prio: number;
  /** Priority as written in a script. */
  prioText: string;
}

export const BASE_CHAINS: Record<string, BaseChain> = {
  forward: { type: 'filter', hook: 'forward', prio: -10, prioText: 'filter - 10' },
  input: { type: 'filter', hook: 'input', prio: -10, prioText: 'filter - 10' },
  postrouting: { type: 'nat', hook: 'postrouting', prio: 90, prioText: 'srcnat - 10' },
};

export const REGULAR_CHAINS = ['deny', 'sandbox_egress', 'sandbox_ingress', 'sandbox_input'] as const;

export const SHARED_CHAINS: readonly string[] = [...Object.keys(BASE_CHAINS), ...REGULAR_CHAINS];

export interface SharedRulesSpec {
  names: SlotNames;
  /** host_interaction_cidr and veth_cidr. */
  internalCidrs: readonly Cidr[];
  alwaysDeniedCidrs: readonly Cidr[];
  /** IPv4 nameserver the sandboxes may query on port 53; null: no DNS exception. */
  dnsServer: string | null;
}

/** What a listing of the table found that must go (see reconcile). */
export interface StaleObjects {
  /** vmap keys (interface names) to delete. */
  elements: readonly string[];
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
  const lines: string[] = [`add table ${t}`, `add map ${t} ${EGRESS_MAP} { type ifname : verdict ; }`];
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
  const elements = stale.elements.filter((k) => /^[A-Za-z0-9_.-]+$/.test(k));
  if (elements.length > 0) {
    const keys = elements.map((k) => JSON.stringify(k)).join(', ');
    lines.push(`delete element ${t} ${EGRESS_MAP} { ${keys} }`);
  }
  for (const name of stale.chains) lines.push(`flush chain ${t} ${name}`);
  for (const name of stale.chains) lines.push(`delete chain ${t} ${name}`);

  const rule = (chain: string, body: string) => lines.push(`add rule ${t} ${chain} ${body}`);
  rule('deny', 'meta l4proto tcp reject with tcp reset');
  rule('deny', 'reject with icmpx type admin-prohibited');

  rule('forward', `iifname ${veths} jump sandbox_egress`);
  rule('forward', `oifname ${veths} jump sandbox_ingress`);

  rule('sandbox_egress', 'ct state established,related accept');
  rule('sandbox_egress', 'ct state invalid drop');
  // IPv6 is not configured in slots; refuse it explicitly anyway.
  rule('sandbox_egress', 'meta nfproto ipv6 goto deny');
  // Source must be routed back through the interface it came in on: no spoofing from raw sockets.
  rule('sandbox_egress', 'fib saddr . iif oif missing drop');
  const dns = spec.dnsServer !== null ? dnsAddress(spec.dnsServer) : null;
  if (dns) rule('sandbox_egress', `ip daddr ${dns} meta l4proto { tcp, udp } th dport 53 accept`);
  const internal = v4Set(spec.internalCidrs);
  if (internal) rule('sandbox_egress', `ip daddr ${internal} goto deny`);
  const denied = v4Set(spec.alwaysDeniedCidrs);
  if (denied) rule('sandbox_egress', `ip daddr ${denied} goto deny`);
  rule('sandbox_egress', `iifname vmap @${EGRESS_MAP}`);
  rule('sandbox_egress', 'accept');

  rule('sandbox_ingress', 'ct state established,related accept');
  rule('sandbox_ingress', 'drop');

  rule('input', `iifname ${veths} jump sandbox_input`);
  rule('sandbox_input', 'ct state established,related accept');
  if (dns) rule('sandbox_input', `ip daddr ${dns} meta l4proto { tcp, udp } th dport 53 accept`);
  rule('sandbox_input', 'goto deny');

  rule('postrouting', `oifname ${veths} return`);
  if (internal) rule('postrouting', `ip saddr ${internal} masquerade`);
  return lines.join('\n') + '\n';
}

/** Replaces the slot's own rules (allowOut accept → denyOut reject → base deny) and hooks its veth to them. */
export function slotPolicyScript(names: SlotNames, index: number, policy: EgressPolicy): string {
  const t = `inet ${names.table}`;
  const chain = names.chain(index);
  const lines = [`add chain ${t} ${chain}`, `flush chain ${t} ${chain}`];
  const allow = v4Set(policyCidrs(policy.allowOut, 'allowOut'));
  const deny = v4Set(policyCidrs(policy.denyOut, 'denyOut'));
  if (allow) lines.push(`add rule ${t} ${chain} ip daddr ${allow} accept`);
  if (deny) lines.push(`add rule ${t} ${chain} ip daddr ${deny} goto deny`);
  if (policy.allowInternetAccess === false) lines.push(`add rule ${t} ${chain} goto deny`);
  lines.push(`add element ${t} ${EGRESS_MAP} { ${JSON.stringify(names.veth(index))} : jump ${chain} }`);
  return lines.join('\n') + '\n';
}

/**
 * Removes the slot's element and chain. Adding both first makes the transaction succeed whether or
 * not they exist, so no listing is needed.
 */
export function slotRemovalScript(names: SlotNames, index: number): string {
  const t = `inet ${names.table}`;
  const chain = names.chain(index);
  const key = JSON.stringify(names.veth(index));
  return (
    [
      `add chain ${t} ${chain}`,
      `add element ${t} ${EGRESS_MAP} { ${key} : jump ${chain} }`,
      `delete element ${t} ${EGRESS_MAP} { ${key} }`,
      `flush chain ${t} ${chain}`,
      `delete chain ${t} ${chain}`,
    ].join('\n') + '\n'
  );
}

/** Deletes the whole table if it exists. */
export function dropTableScript(names: SlotNames): string {
  return `add table inet ${names.table}\ndelete table inet ${names.table}\n`;
}

function policyCidrs(entries: readonly string[], field: string): Cidr[] {
  return entries.map((entry) => {
    const cidr = parseCidr(entry);
    if (!cidr)
      throw new Error(
        `${field} entry ${JSON.stringify(entry)} is not a normalized CIDR (use parseNetworkPolicy)`,
      );
    return cidr;
  });
}

function dnsAddress(text: string): string {
  const v4 = parseIPv4(text);
  if (v4 === null) throw new Error(`DNS server ${JSON.stringify(text)} is not an IPv4 address`);
  return text;
}
