import { isIPv4, isIPv6 } from 'node:net';

/** `host:port` with an IPv4 address, a bracketed IPv6 address or a DNS name, and a port 0..65535. */
export function isListenAddr(value: string): boolean {
  const m = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(value);
  if (!m) return false;
  const host = m[1]!;
  const port = Number(m[2]);
  if (port > 65535) return false;
  if (host.startsWith('[')) return isIPv6(host.slice(1, -1));
  return isIPv4(host) || isDnsName(host.toLowerCase());
}

export const LISTEN_ADDR_RULE = 'must be "host:port" (IPv4, [IPv6] or DNS name; port 0-65535)';

/** A DNS name: at most 253 characters, labels of 1-63 `[a-z0-9-]` not starting or ending with '-'. */
export function isDnsName(name: string): boolean {
  if (name.length === 0 || name.length > 253) return false;
  return name.split('.').every((label) => /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(label));
}

/**
 * Normalises `[sandbox_proxy].domains` as the reference does: trim, strip one trailing '.', drop
 * empty entries, lower-case, validate as DNS names, de-duplicate keeping the first occurrence
 * (the first entry is the one advertised to clients). Throws on the first invalid entry.
 */
export function normalizeProxyDomains(domains: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of domains) {
    let d = raw.trim();
    if (d.endsWith('.')) d = d.slice(0, -1);
    d = d.toLowerCase();
    if (d === '') continue;
    if (!isDnsName(d))
      throw new Error(`sandbox_proxy.domains contains invalid domain ${JSON.stringify(raw)}`);
    if (!out.includes(d)) out.push(d);
  }
  return out;
}

/** An absolute http:// or https:// URL. */
export function isHttpUrl(value: string): boolean {
  try {
    const u = new URL(value);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
  } catch {
    return false;
  }
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const NIL_UUID = '00000000-0000-0000-0000-000000000000';

/** A UUID in its canonical hyphenated form (any version, any case). */
export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}
