// `network.rules` (E2B's per-domain transforms): which header overrides apply to a request for a name, and the
// validation of the rules as the API receives them (docs/networking.md#credentials-at-the-edge). Keys are exact
// names or `*.suffix`; the exact key wins, then the longest matching wildcard; the rule lists of different keys
// are never merged. Within one key's list the rules apply in order (a later one overrides an earlier header).

import type { NetworkRules } from '../types.js';
import { parsePlaceholders } from './placeholders.js';

/** A policy part the caller got wrong; policy.ts turns it into a NetworkPolicyError (400). */
export class RuleInputError extends Error {}

/** Most domain keys one policy may hold. */
export const MAX_RULE_DOMAINS = 100;
/** Most rules one key may list. */
export const MAX_RULES_PER_DOMAIN = 16;
/** Most headers one transform may set. */
export const MAX_HEADERS_PER_TRANSFORM = 32;
/** Longest header name and value accepted (the upstream's own limits are often 8 KiB per line). */
export const MAX_HEADER_NAME_BYTES = 256;
export const MAX_HEADER_VALUE_BYTES = 8 * 1024;

/**
 * Headers a rule may not set: they frame the message or the connection (the proxy owns them on each hop), or
 * pick the upstream (Host: the name the request was checked for is the one it goes to).
 */
export const FORBIDDEN_HEADERS: ReadonlySet<string> = new Set([
  'host',
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'content-length',
  'te',
  'trailer',
  'upgrade',
  'http2-settings',
]);

/** RFC 9110 `token`. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** RFC 9110 field-value characters a value may carry: no CR, LF, NUL or other controls (header splitting). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** One key's header overrides, merged from its rule list: [name as given, value]. */
export type HeaderOverrides = readonly (readonly [string, string])[];

/** The rules of a slot, compiled for lookups by name. */
export interface RuleMatcher {
  exact: ReadonlyMap<string, HeaderOverrides>;
  /** `.suffix` → overrides, longest suffix first. */
  wildcards: readonly (readonly [string, HeaderOverrides])[];
}

/**
 * Validates `rules` (already key-normalized by `normalizeKey`) into the stored form. Throws RuleInputError naming
 * the entry. `normalizeKey` returns the lowercased key or null for one that is not a domain pattern.
 */
export function parseRules(input: unknown, normalizeKey: (key: string) => string | null): NetworkRules {
  if (input === undefined || input === null) return {};
  if (typeof input !== 'object' || Array.isArray(input))
    throw new RuleInputError('rules must be an object mapping domains to lists of rules');
  const entries = Object.entries(input as Record<string, unknown>);
  if (entries.length > MAX_RULE_DOMAINS)
    throw new RuleInputError(`rules has ${entries.length} domains; at most ${MAX_RULE_DOMAINS} are allowed`);
  const out: NetworkRules = {};
  for (const [rawKey, list] of entries) {
    const where = `rules[${JSON.stringify(rawKey)}]`;
    const key = normalizeKey(rawKey);
    if (key === null)
      throw new RuleInputError(
        `${where}: the key must be a domain name or a leading wildcard like "*.example.com"`,
      );
    if (Object.hasOwn(out, key)) throw new RuleInputError(`${where}: domain ${key} is given twice`);
    if (!Array.isArray(list)) throw new RuleInputError(`${where} must be a list of rules`);
    if (list.length > MAX_RULES_PER_DOMAIN)
      throw new RuleInputError(
        `${where} has ${list.length} rules; at most ${MAX_RULES_PER_DOMAIN} are allowed`,
      );
    out[key] = list.map((rule, i) => parseRule(rule, `${where}[${i}]`));
  }
  return out;
}

function parseRule(rule: unknown, where: string): NetworkRules[string][number] {
  if (typeof rule !== 'object' || rule === null || Array.isArray(rule))
    throw new RuleInputError(`${where} must be an object`);
  for (const k of Object.keys(rule))
    if (k !== 'transform') throw new RuleInputError(`${where}.${k} is not a rule field (only transform)`);
  const transform = (rule as { transform?: unknown }).transform;
  if (transform === undefined || transform === null) return {};
  if (typeof transform !== 'object' || Array.isArray(transform))
    throw new RuleInputError(`${where}.transform must be an object`);
  for (const k of Object.keys(transform))
    if (k !== 'headers')
      throw new RuleInputError(`${where}.transform.${k} is not a transform field (only headers)`);
  const headers = (transform as { headers?: unknown }).headers;
  if (headers === undefined || headers === null) return { transform: {} };
  if (typeof headers !== 'object' || Array.isArray(headers))
    throw new RuleInputError(`${where}.transform.headers must be an object of header names to strings`);
  const pairs = Object.entries(headers as Record<string, unknown>);
  if (pairs.length > MAX_HEADERS_PER_TRANSFORM)
    throw new RuleInputError(
      `${where}.transform.headers has ${pairs.length} headers; at most ${MAX_HEADERS_PER_TRANSFORM} are allowed`,
    );
  const seen = new Set<string>();
  const out: Record<string, string> = {};
  for (const [name, value] of pairs) {
    const at = `${where}.transform.headers[${JSON.stringify(name)}]`;
    if (name.length > MAX_HEADER_NAME_BYTES || !TOKEN.test(name))
      throw new RuleInputError(`${at}: the header name is not an HTTP token`);
    const lower = name.toLowerCase();
    if (FORBIDDEN_HEADERS.has(lower))
      throw new RuleInputError(`${at}: ${name} frames the request or picks its upstream and cannot be set`);
    if (seen.has(lower)) throw new RuleInputError(`${at}: header ${name} is given twice`);
    seen.add(lower);
    // The value is never echoed: it is a credential.
    if (typeof value !== 'string') throw new RuleInputError(`${at} must be a string`);
    if (Buffer.byteLength(value, 'latin1') > MAX_HEADER_VALUE_BYTES || value.length > MAX_HEADER_VALUE_BYTES)
      throw new RuleInputError(`${at}: the value is longer than ${MAX_HEADER_VALUE_BYTES} bytes`);
    if (!FIELD_VALUE.test(value))
      throw new RuleInputError(`${at}: the value holds a control character or a character outside Latin-1`);
    const placeholders = parsePlaceholders(value);
    if (!Array.isArray(placeholders)) throw new RuleInputError(`${at}: ${placeholders.problem}`);
    out[name] = value;
  }
  return { transform: { headers: out } };
}

/** Compiles stored rules for `overridesFor`; null when there are none (the slot is never intercepted). */
export function compileRules(rules: NetworkRules | undefined): RuleMatcher | null {
  const keys = Object.keys(rules ?? {});
  if (!rules || keys.length === 0) return null;
  const exact = new Map<string, HeaderOverrides>();
  const wildcards: [string, HeaderOverrides][] = [];
  for (const key of keys) {
    const merged = new Map<string, readonly [string, string]>();
    for (const rule of rules[key] ?? [])
      for (const [name, value] of Object.entries(rule.transform?.headers ?? {}))
        merged.set(name.toLowerCase(), [name, value]);
    const overrides = [...merged.values()];
    if (key.startsWith('*.')) wildcards.push([key.slice(1), overrides]);
    else exact.set(key, overrides);
  }
  wildcards.sort((a, b) => b[0].length - a[0].length);
  return { exact, wildcards };
}

/** The overrides for requests to `name` (a normalized host name); null: no key matches, do not intercept. */
export function overridesFor(matcher: RuleMatcher | null, name: string): HeaderOverrides | null {
  if (!matcher) return null;
  const exact = matcher.exact.get(name);
  if (exact) return exact;
  for (const [suffix, overrides] of matcher.wildcards) if (name.endsWith(suffix)) return overrides;
  return null;
}

/**
 * The request's raw headers with the overrides applied: every header whose name an override sets is dropped
 * (all of its copies), then the overrides are appended. Returns the flat [name, value, ...] list node:http takes.
 */
export function applyOverrides(rawHeaders: readonly string[], overrides: HeaderOverrides): string[] {
  const replaced = new Set(overrides.map(([n]) => n.toLowerCase()));
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    if (!replaced.has(name.toLowerCase())) out.push(name, rawHeaders[i + 1] as string);
  }
  for (const [name, value] of overrides) out.push(name, value);
  return out;
}

/** Each `${e2b.secrets.<name>}` the (validated) rules name, with the entry that names it, as messages call it. */
export function secretReferences(rules: NetworkRules | undefined): { secret: string; where: string }[] {
  const out: { secret: string; where: string }[] = [];
  for (const [key, list] of Object.entries(rules ?? {}))
    list.forEach((rule, i) => {
      for (const [name, value] of Object.entries(rule.transform?.headers ?? {})) {
        const found = parsePlaceholders(value);
        if (!Array.isArray(found)) continue;
        const where = `rules[${JSON.stringify(key)}][${i}].transform.headers[${JSON.stringify(name)}]`;
        for (const p of found) out.push({ secret: p.secret, where });
      }
    });
  return out;
}

/** `rules` as GET /sandboxes/{id} shows it: the keys and header names, every value replaced by a mask. */
export function maskedRules(rules: NetworkRules): NetworkRules {
  const out: NetworkRules = {};
  for (const [key, list] of Object.entries(rules)) {
    out[key] = list.map((rule) =>
      rule.transform
        ? {
            transform: {
              ...(rule.transform.headers
                ? {
                    headers: Object.fromEntries(Object.keys(rule.transform.headers).map((n) => [n, MASK])),
                  }
                : {}),
            },
          }
        : {},
    );
  }
  return out;
}

/** What a header value shows as in API answers. */
export const MASK = '***';
