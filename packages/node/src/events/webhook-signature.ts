import { createHash } from 'node:crypto';

/**
 * E2B's `e2b-signature` (signature version v1): SHA-256 of the secret followed by the raw body, base64url without
 * padding. This is what E2B's receiver example verifies (docs/events.md#verifying-a-delivery).
 */
export function webhookSignature(secret: string, rawBody: string): string {
  return createHash('sha256')
    .update(secret + rawBody, 'utf8')
    .digest('base64')
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');
}
