import type { IncomingMessage } from 'node:http';
import { timingSafeEqual, createHash } from 'node:crypto';

/** Every value of header `name` as sent (Node joins duplicates in `req.headers`; rawHeaders keeps them apart). */
export function headerValues(req: IncomingMessage, name: string): string[] {
  const lower = name.toLowerCase();
  const out: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === lower) out.push(raw[i + 1]!);
  }
  return out;
}

/**
 * Control-plane auth (docs/security.md): exactly one `X-API-Key` header equal to the key, compared in constant time.
 * Hashing both sides first makes the comparison independent of the length of the presented value.
 */
export function hasValidApiKey(req: IncomingMessage, apiKey: string): boolean {
  const values = headerValues(req, 'x-api-key');
  if (values.length !== 1) return false;
  const presented = createHash('sha256').update(values[0]!).digest();
  const expected = createHash('sha256').update(apiKey).digest();
  return timingSafeEqual(presented, expected) && values[0]!.length === apiKey.length;
}
