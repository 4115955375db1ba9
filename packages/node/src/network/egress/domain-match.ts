// Whether a name the sandbox asked for (TLS SNI, HTTP Host, a DNS question) is one of its allowed domains.
// Patterns come normalized from parseNetworkPolicy: `example.com` matches itself only, `*.example.com` matches
// names below example.com at any depth but not example.com itself (as E2B documents for allowOut and rules).

/** A name as the sandbox sent it, lowercased without a trailing dot; null when it is not a DNS name. */
export function normalizeHostName(raw: string): string | null {
  const name = raw.trim().replace(/\.$/, '').toLowerCase();
  if (name.length === 0 || name.length > 253) return null;
  const label = /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/;
  return name.split('.').every((l) => label.test(l)) ? name : null;
}

export function matchesDomain(patterns: readonly string[], name: string): boolean {
  for (const p of patterns) {
    if (p.startsWith('*.')) {
      if (name.endsWith(p.slice(1))) return true;
    } else if (name === p) {
      return true;
    }
  }
  return false;
}
