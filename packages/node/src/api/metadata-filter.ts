import { ApiError } from './errors.js';

function unescape(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    throw new ApiError(400, `invalid metadata filter: bad escape in "${s}"`);
  }
}

/**
 * `metadata` query filter as the e2b SDK encodes it: the query-decoded value is unescaped once
 * more, split on `&`, each pair on `=` (exactly two parts), then key and value unescaped. Empty keys/values are dropped.
 */
export function parseMetadataFilter(raw: unknown): Record<string, string> | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string') throw new ApiError(400, 'invalid metadata filter: give it once');
  const decoded = unescape(raw);
  const out: Record<string, string> = {};
  for (const pair of decoded.split('&')) {
    if (pair === '') continue;
    const parts = pair.split('=');
    if (parts.length !== 2) throw new ApiError(400, `invalid metadata filter: "${pair}" is not key=value`);
    const key = unescape(parts[0]!);
    const value = unescape(parts[1]!);
    if (key && value) out[key] = value;
  }
  return out;
}

export function matchesMetadata(
  meta: Record<string, string>,
  filter: Record<string, string> | undefined,
): boolean {
  if (!filter) return true;
  for (const [k, v] of Object.entries(filter)) if (meta[k] !== v) return false;
  return true;
}
