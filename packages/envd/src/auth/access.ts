import { fileSignature, safeEqual, type SigningOperation } from '@aenv/protocol/envd';

export { safeEqual };

/** Requests that never need X-Access-Token: they authenticate otherwise (signatures) or must stay open. */
export function isTokenExempt(method: string, path: string): boolean {
  return (
    (method === 'GET' && path === '/health') ||
    (method === 'GET' && path === '/files') ||
    (method === 'POST' && path === '/files') ||
    (method === 'POST' && path === '/init')
  );
}

export interface SigningInput {
  token: string | undefined;
  headerToken: string | undefined;
  path: string;
  op: SigningOperation;
  username: string | undefined;
  signature: string | undefined;
  expiration: string | undefined;
  nowSeconds: number;
  /** Limits the node sets through /init (docs/security.md, "Signed file URLs"); absent = E2B's (none). */
  limits?: SignatureLimits;
}

export interface SignatureLimits {
  /** An expiration further than this many seconds in the future is refused. */
  maxLifetimeSecs?: number;
  /** A signature without expiration is refused after this unix time (the sandbox's creation + the cap). */
  unexpiringUntil?: number;
}

/** Returns undefined when a /files request is authorised, else the reason (sent as a 401). */
export function checkFileSigning(i: SigningInput): string | undefined {
  if (!i.token) return undefined;
  if (i.headerToken)
    return safeEqual(i.headerToken, i.token)
      ? undefined
      : 'access token present in header but does not match';
  if (i.signature === undefined) return 'missing signature query parameter';
  if (i.expiration !== undefined && !/^-?\d+$/.test(i.expiration)) return 'invalid signature expiration';
  const expected = fileSignature(i.path, i.op, i.username ?? '', i.token, i.expiration);
  if (!safeEqual(expected, i.signature)) return 'invalid signature';
  if (i.expiration !== undefined && Number(i.expiration) < i.nowSeconds)
    return 'signature is already expired';
  return signatureLimitViolation(i.expiration, i.nowSeconds, i.limits);
}

/** Why a valid signature is still refused by the node's limits, or undefined. */
export function signatureLimitViolation(
  expiration: string | undefined,
  nowSeconds: number,
  limits: SignatureLimits | undefined,
): string | undefined {
  if (!limits) return undefined;
  if (expiration === undefined) {
    if (limits.unexpiringUntil !== undefined && nowSeconds > limits.unexpiringUntil)
      return 'signature without expiration is no longer accepted for this sandbox; sign with an expiration';
    return undefined;
  }
  if (limits.maxLifetimeSecs !== undefined && Number(expiration) - nowSeconds > limits.maxLifetimeSecs)
    return `signature expiration is more than ${limits.maxLifetimeSecs} s away`;
  return undefined;
}

/** Decodes `Authorization: Basic base64("user:")`; undefined when absent (= default user). */
export function usernameFromBasicAuth(header: string | undefined | null): string | undefined {
  if (!header) return undefined;
  const m = /^Basic\s+(\S+)\s*$/i.exec(header);
  if (!m?.[1]) return undefined;
  const decoded = Buffer.from(m[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const name = colon === -1 ? decoded : decoded.slice(0, colon);
  return name || undefined;
}
