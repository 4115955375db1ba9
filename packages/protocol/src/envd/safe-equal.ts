import type * as NodeCrypto from 'node:crypto';

// Loaded on first use: an envd of a sandbox without an access token never needs node:crypto.
const crypto = () => process.getBuiltinModule('node:crypto') as typeof NodeCrypto;

/**
 * Constant-time string equality for secrets (API keys, access tokens): both sides are hashed first, so the time
 * taken depends neither on where they differ nor on the length of the presented value.
 */
export function safeEqual(a: string, b: string): boolean {
  const { createHash, timingSafeEqual } = crypto();
  const da = createHash('sha256').update(a).digest();
  const db = createHash('sha256').update(b).digest();
  return timingSafeEqual(da, db) && a.length === b.length;
}
