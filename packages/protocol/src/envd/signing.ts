// Signed envd `/files` URLs (docs/envd.md#what-is-implemented): the e2b SDK signs them, envd and the node's proxy
// verify them.
import type * as NodeCrypto from 'node:crypto';

// Loaded on first use: an envd of a sandbox without an access token never needs node:crypto.
const crypto = () => process.getBuiltinModule('node:crypto') as typeof NodeCrypto;

export type SigningOperation = 'read' | 'write';

/** The v1 signature: "v1_" + unpadded base64(sha256("path:op:user:token[:expiration]")). */
export function fileSignature(
  path: string,
  op: SigningOperation,
  username: string,
  token: string,
  expiration?: string,
): string {
  const parts = [path, op, username, token];
  if (expiration !== undefined) parts.push(expiration);
  return `v1_${crypto().createHash('sha256').update(parts.join(':')).digest('base64').replace(/=+$/, '')}`;
}

/** "v1_" + 43 characters of unpadded base64: the only shape a v1 signature can have. */
export const FILE_SIGNATURE_SHAPE = /^v1_[A-Za-z0-9+/]{43}$/;
