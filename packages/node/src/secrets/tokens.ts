import { createHmac, timingSafeEqual } from 'node:crypto';
import { inspect } from 'node:util';
export { safeEqual } from '@aenv/protocol';

export type TokenKind = 'envd' | 'traffic';

const TRAFFIC_PREFIX = 'sandbox-traffic-';
const ENVD_INIT_PREFIX = 'envd-init-';
const TOKEN_HEX = /^[0-9a-fA-F]{64}$/;

/** Lowercase hex HMAC-SHA256(key = seed bytes, message = sandbox id) (docs/security.md). */
export function envdAccessToken(seed: string, sandboxId: string): string {
  return mac(seed, sandboxId).toString('hex');
}

/** Lowercase hex HMAC-SHA256(key = seed bytes, message = "sandbox-traffic-" + sandbox id). */
export function trafficAccessToken(seed: string, sandboxId: string): string {
  return mac(seed, TRAFFIC_PREFIX + sandboxId).toString('hex');
}

/**
 * Lowercase hex HMAC-SHA256(key = seed bytes, message = "envd-init-" + sandbox id): the node's credential for
 * envd's `/init` (docs/security.md, "envd /init"). Never leaves the node except to the sandbox's own envd.
 */
export function envdInitKey(seed: string, sandboxId: string): string {
  return mac(seed, ENVD_INIT_PREFIX + sandboxId).toString('hex');
}

/**
 * Whether `candidate` is the `kind` token of `sandboxId`. The candidate is decoded from 64 hex
 * digits and compared in constant time; malformed candidates take the same path and fail.
 */
export function verifyToken(seed: string, kind: TokenKind, sandboxId: string, candidate: string): boolean {
  const expected = mac(seed, kind === 'envd' ? sandboxId : TRAFFIC_PREFIX + sandboxId);
  const wellFormed = TOKEN_HEX.test(candidate);
  const presented = wellFormed ? Buffer.from(candidate, 'hex') : Buffer.alloc(expected.length);
  return timingSafeEqual(expected, presented) && wellFormed;
}

/** Holds the seed so callers need not pass it around; never prints it. */
export class SandboxTokenIssuer {
  readonly #seed: string;

  constructor(seed: string) {
    if (seed.trim() === '') throw new Error('sandbox access-token seed must not be empty');
    this.#seed = seed;
  }

  envd(sandboxId: string): string {
    return envdAccessToken(this.#seed, sandboxId);
  }

  traffic(sandboxId: string): string {
    return trafficAccessToken(this.#seed, sandboxId);
  }

  envdInit(sandboxId: string): string {
    return envdInitKey(this.#seed, sandboxId);
  }

  verify(kind: TokenKind, sandboxId: string, candidate: string): boolean {
    return verifyToken(this.#seed, kind, sandboxId, candidate);
  }

  toJSON(): string {
    return 'SandboxTokenIssuer(<redacted>)';
  }

  [inspect.custom](): string {
    return 'SandboxTokenIssuer(<redacted>)';
  }
}

function mac(seed: string, message: string): Buffer {
  return createHmac('sha256', Buffer.from(seed, 'utf8')).update(message, 'utf8').digest();
}
