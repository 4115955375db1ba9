// Validation of a sandbox's egress policy as the API receives it (docs/networking.md).

import { DomainError, ErrorKind } from '@aenv/protocol';
import {
  cidrContainsAddress,
  formatCidr,
  parseCidr,
  parseIPv4,
  parseIpOrCidr,
  type Cidr,
} from '@aenv/config';
import { BUILTIN_DENIED_CIDRS } from './builtin-denies.js';
import type { EgressPolicy, EgressProxyConfig } from './types.js';
import { parseRules, RuleInputError, secretReferences } from './egress/header-rules.js';

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
  egressProxy?: unknown;
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
  const egressProxy = parseEgressProxy(input.egressProxy);
  return {
    allowOut,
    denyOut,
    allowInternetAccess: allowInternetAccess ?? null,
    ...(Object.keys(rules).length > 0 ? { rules } : {}),
    ...(egressProxy ? { egressProxy } : {}),
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

/** RFC 1929: ULEN and PLEN are one byte each, and at least 1. */
const MAX_SOCKS_CREDENTIAL_BYTES = 255;
const EGRESS_PROXY_FIELDS = new Set(['address', 'username', 'password']);

/**
 * `network.egressProxy` (`SandboxEgressProxyConfig`): `{address: "host:port", username?, password?}`; null or
 * absent: none. The host is an IPv4 literal or a DNS name (IPv6 is refused: sandboxes and the node's egress are
 * IPv4-only, docs/differences.md). Whether the address may be dialled at all is the node's to judge
 * (manager.ts, egress/socks.ts): here only its shape.
 */
export function parseEgressProxy(value: unknown): EgressProxyConfig | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value))
    throw new NetworkPolicyError('egressProxy must be an object with an address');
  const fields = value as Record<string, unknown>;
  for (const key of Object.keys(fields)) {
    if (!EGRESS_PROXY_FIELDS.has(key))
      throw new NetworkPolicyError(
        `egressProxy.${key} is not a field of egressProxy (address, username, password)`,
      );
  }
  const { address, username, password } = fields;
  if (typeof address !== 'string')
    throw new NetworkPolicyError('egressProxy.address must be a string "host:port"');
  const { host, port } = splitProxyAddress(address);
  const credential = (v: unknown, field: string): string | undefined => {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') throw new NetworkPolicyError(`egressProxy.${field} must be a string`);
    const bytes = Buffer.byteLength(v, 'utf8');
    if (bytes < 1 || bytes > MAX_SOCKS_CREDENTIAL_BYTES)
      throw new NetworkPolicyError(
        `egressProxy.${field} must be 1 to ${MAX_SOCKS_CREDENTIAL_BYTES} bytes (RFC 1929), got ${bytes}`,
      );
    return v;
  };
  const user = credential(username, 'username');
  const pass = credential(password, 'password');
  if (pass !== undefined && user === undefined)
    throw new NetworkPolicyError('egressProxy.password is only valid together with egressProxy.username');
  return {
    address: `${host}:${port}`,
    host,
    port,
    ...(user !== undefined ? { username: user } : {}),
    ...(pass !== undefined ? { password: pass } : {}),
  };
}

function splitProxyAddress(address: string): { host: string; port: number } {
  const bad = (why: string) =>
    new NetworkPolicyError(`egressProxy.address ${JSON.stringify(address)} ${why}`);
  if (address.startsWith('[')) throw bad('is an IPv6 address; only IPv4 and DNS names are supported');
  const colon = address.lastIndexOf(':');
  if (colon < 0) throw bad('has no port (expected "host:port")');
  const hostText = address.slice(0, colon);
  const portText = address.slice(colon + 1);
  if (!/^\d{1,5}$/.test(portText)) throw bad('has no valid port (expected "host:port")');
  const port = Number(portText);
  if (port < 1 || port > 65535) throw bad('has a port outside 1-65535');
  if (parseIPv4(hostText) !== null) return { host: hostText, port };
  if (hostText.includes(':')) throw bad('is an IPv6 address; only IPv4 and DNS names are supported');
  const host = normalizeDnsName(hostText);
  if (host === null || /^[\d.]+$/.test(host)) throw bad('has no valid host name or IPv4 address');
  return { host, port };
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

/**
 * The ranges an egressProxy address may not be in: the node dials the proxy for the sandbox, so it gets a
 * sandbox destination's limits (built-in denies, `always_denied_cidrs`, the internal CIDRs). An operator whose
 * proxy sits in a private range takes that range out of always_denied_cidrs (docs/security.md).
 */
export function egressProxyRefusedRanges(config: {
  alwaysDeniedCidrs: readonly string[];
  internalCidrs: readonly string[];
}): Cidr[] {
  const parsed = [...config.alwaysDeniedCidrs, ...config.internalCidrs].map((t) => parseCidr(t.trim()));
  return [...BUILTIN_DENIED_CIDRS, ...parsed.filter((c): c is Cidr => c !== null && c.family === 4)];
}

/** Refuses (400) an egressProxy given as an IPv4 literal in `ranges`; a name is checked at every dial. */
export function refuseEgressProxyIn(policy: EgressPolicy, ranges: readonly Cidr[]): EgressPolicy {
  const proxy = policy.egressProxy;
  const v = proxy ? parseIPv4(proxy.host) : null;
  if (proxy && v !== null && ranges.some((c) => cidrContainsAddress(c, { family: 4, value: v })))
    throw new NetworkPolicyError(
      `egressProxy.address ${JSON.stringify(proxy.address)} is in a range sandboxes may not reach (internal or always_denied_cidrs)`,
    );
  return policy;
}

/**
 * Refuses (400) an egressProxy whose name does not resolve, or resolves only into `refused` addresses (those
 * the resolver refuses: denied ranges and the host's own), before the sandbox exists or its policy changes.
 * The name is resolved again at every dial (egress/socks.ts): this is the early answer, not the guard.
 */
export async function refuseUnresolvableEgressProxy(
  policy: EgressPolicy,
  resolve: (name: string) => Promise<{ ok: true } | { ok: false; reason: string }>,
): Promise<void> {
  const proxy = policy.egressProxy;
  if (!proxy || parseIPv4(proxy.host) !== null) return;
  const r = await resolve(proxy.host);
  if (!r.ok)
    throw new NetworkPolicyError(`egressProxy.address ${JSON.stringify(proxy.address)}: ${r.reason}`);
}

/**
 * Refuses (400, naming the entry) rules whose `${e2b.secrets.<name>}` names a secret that does not exist, before
 * the sandbox exists or its policy changes. Values are still read at every request (egress/intercept.ts): a secret
 * deleted later fails that request with a 502 naming it, never sends the placeholder on.
 */
export async function refuseUnknownSecrets(
  policy: EgressPolicy,
  existing: () => Promise<ReadonlySet<string>>,
): Promise<void> {
  const refs = secretReferences(policy.rules);
  if (refs.length === 0) return;
  const names = await existing();
  const missing = refs.find((r) => !names.has(r.secret));
  if (missing)
    throw new NetworkPolicyError(
      `${missing.where}: names secret ${missing.secret}, which does not exist (create it with POST /secrets first)`,
    );
}
