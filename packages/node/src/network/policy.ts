// Validation of a sandbox's egress policy as the API receives it (docs/networking.md).

import { DomainError, ErrorKind } from '@aenv/protocol';
import { formatCidr, parseIpOrCidr } from '@aenv/config';
import type { EgressPolicy } from './types.js';
import { parseRules, RuleInputError } from './egress/header-rules.js';

/** A policy the caller got wrong; the API answers it with this message. */
export class NetworkPolicyError extends DomainError {
  constructor(message: string) {
    super(ErrorKind.InvalidArgument, message);
    this.name = 'NetworkPolicyError';
  }
}

export interface NetworkPolicyInput {
  allowOut?: unknown;
  denyOut?: unknown;
  allowInternetAccess?: unknown;
  /** `network.rules` (egress/header-rules.ts). */
  rules?: unknown;
}

/** Most entries one list may hold: each becomes an nft set element or a pattern every proxied flow is matched against. */
export const MAX_POLICY_ENTRIES = 1000;

/**
 * Parses `network.allowOut` / `network.denyOut` and `allow_internet_access`:
 * IPs become /32 (/128), CIDRs are normalized (host bits cleared), domain patterns in allowOut (`example.com`,
 * `*.example.com`) are lowercased without a trailing dot, duplicates are dropped keeping first-seen order.
 * allowOut keeps CIDRs and domains in one list (as the API shows it); egress-model.ts tells them apart.
 * Throws NetworkPolicyError (status 400) naming the entry for anything else.
 */
export function parseNetworkPolicy(input: NetworkPolicyInput): EgressPolicy {
  const allowEntries = stringList(input.allowOut, 'allowOut');
  const denyEntries = stringList(input.denyOut, 'denyOut');

  const allowOut: string[] = [];
  for (const entry of allowEntries) {
    const cidr = ipOrCidrEntry(entry);
    if (cidr !== null) {
      pushUnique(allowOut, cidr);
      continue;
    }
    const domain = normalizeDomainPattern(entry);
    if (domain === null)
      throw new NetworkPolicyError(`invalid allowOut domain entry ${JSON.stringify(entry)}`);
    pushUnique(allowOut, domain);
  }

  const denyOut: string[] = [];
  for (const entry of denyEntries) {
    const cidr = ipOrCidrEntry(entry);
    if (cidr === null) {
      throw new NetworkPolicyError(
        `denyOut entry ${JSON.stringify(entry)} must be an IP address or CIDR block`,
      );
    }
    pushUnique(denyOut, cidr);
  }

  const allowInternetAccess = input.allowInternetAccess;
  if (
    allowInternetAccess !== undefined &&
    allowInternetAccess !== null &&
    typeof allowInternetAccess !== 'boolean'
  ) {
    throw new NetworkPolicyError('allowInternetAccess must be a boolean');
  }
  const rules = parsePolicyRules(input.rules);
  return {
    allowOut,
    denyOut,
    allowInternetAccess: allowInternetAccess ?? null,
    ...(Object.keys(rules).length > 0 ? { rules } : {}),
  };
}

function parsePolicyRules(input: unknown): NonNullable<EgressPolicy['rules']> {
  try {
    return parseRules(input, normalizeDomainPattern);
  } catch (e) {
    if (e instanceof RuleInputError) throw new NetworkPolicyError(e.message);
    throw e;
  }
}

export const DEFAULT_EGRESS_POLICY: EgressPolicy = Object.freeze({
  allowOut: [],
  denyOut: [],
  allowInternetAccess: null,
}) as EgressPolicy;

function stringList(value: unknown, field: string): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new NetworkPolicyError(`${field} must be an array of strings`);
  if (value.length > MAX_POLICY_ENTRIES)
    throw new NetworkPolicyError(
      `${field} has ${value.length} entries; at most ${MAX_POLICY_ENTRIES} are allowed`,
    );
  return value.map((entry, i) => {
    if (typeof entry !== 'string')
      throw new NetworkPolicyError(`${field}[${i}] must be a string, got ${JSON.stringify(entry)}`);
    return entry;
  });
}

/** Normalized CIDR string, null when the entry is not an address at all, error for a broken `a/b`. */
function ipOrCidrEntry(entry: string): string | null {
  const text = entry.trim();
  const cidr = parseIpOrCidr(text);
  if (cidr) return formatCidr(cidr);
  if (text.includes('/')) throw new NetworkPolicyError(`invalid IP or CIDR entry ${JSON.stringify(entry)}`);
  return null;
}

/** `example.com` or `*.example.com`, lowercased, trailing dot removed; null when not a DNS name. */
export function normalizeDomainPattern(entry: string): string | null {
  const text = entry.trim();
  const wildcard = text.startsWith('*.');
  const name = normalizeDnsName(wildcard ? text.slice(2) : text);
  if (name === null) return null;
  return wildcard ? `*.${name}` : name;
}

function normalizeDnsName(text: string): string | null {
  const name = text.trim().replace(/\.$/, '').toLowerCase();
  if (name.length === 0 || name.length > 253) return null;
  const labelOk = (label: string) => /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(label);
  return name.split('.').every(labelOk) ? name : null;
}

function pushUnique(list: string[], value: string): void {
  if (!list.includes(value)) list.push(value);
}
