import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { createManagedSecret, readManagedSecret, SecretError } from './managed-secret.js';

export const SEED_ENV = 'AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED';
const MANAGED_SEED_FILE = 'sandbox-access-token-hash-seed';
const SEED_HEX = /^[0-9a-f]{64}$/;
const SEED_FILE_MAX_BYTES = 65;

export type SeedSource = 'config' | 'managed-file' | 'generated';

export interface ResolveSeedOptions {
  /** Resolved `home_path`; the managed seed lives in `<homePath>/secrets/sandbox-access-token-hash-seed`. */
  homePath: string;
  /** `[sandbox].access_token_hash_seed` after env overrides (the config loader already trimmed it). */
  explicitSeed?: string;
  /**
   * Whether any persisted (paused) sandbox is `secure` or has private ingress. A missing managed
   * seed is then fatal: a new one would silently invalidate their tokens.
   */
  hasTokenProtectedPersistedSandboxes: boolean;
  /** `cluster.scheduler_endpoint`: a node-local seed in a cluster deserves a warning. */
  schedulerEndpoint?: string;
  /** Owner required for managed files; default the effective uid. */
  expectedUid?: number;
}

export interface ResolvedSeed {
  seed: string;
  source: SeedSource;
  path?: string;
  /** For the server to log once. */
  warnings: string[];
}

/**
 * Resolves the secret sandbox access tokens are derived from (docs/security.md): an explicit seed
 * wins; else the managed file (exactly 64 lowercase hex + optional "\n"); else, unless
 * token-protected paused sandboxes exist, 32 random bytes are created as the managed file.
 */
export function resolveAccessTokenSeed(opts: ResolveSeedOptions): ResolvedSeed {
  if (opts.explicitSeed !== undefined) {
    const seed = opts.explicitSeed.trim();
    if (seed === '') {
      throw new SecretError(
        `[sandbox].access_token_hash_seed (or ${SEED_ENV}) must be non-empty when configured`,
      );
    }
    return { seed, source: 'config', warnings: [] };
  }

  const path = join(opts.homePath, 'secrets', MANAGED_SEED_FILE);
  const managedOpts = { expectedUid: opts.expectedUid };
  const warnings: string[] = [];
  if (opts.schedulerEndpoint !== undefined) {
    warnings.push(
      `using the node-local sandbox access-token seed ${path} while cluster.scheduler_endpoint is set; ` +
        `configure ${SEED_ENV} with the same value on every node so tokens validate across the cluster`,
    );
  }

  const stored = readManagedSecret(path, SEED_FILE_MAX_BYTES, managedOpts);
  if (stored !== undefined)
    return { seed: validateManagedSeed(stored, path), source: 'managed-file', path, warnings };

  if (opts.hasTokenProtectedPersistedSandboxes) {
    throw new SecretError(
      `managed sandbox access-token seed ${path} is missing while token-protected persisted sandboxes exist; ` +
        `restore the file or configure ${SEED_ENV}`,
    );
  }
  const created = createManagedSecret(
    path,
    `${randomBytes(32).toString('hex')}\n`,
    SEED_FILE_MAX_BYTES,
    managedOpts,
  );
  const seed = validateManagedSeed(created.contents, path);
  return { seed, source: created.created ? 'generated' : 'managed-file', path, warnings };
}

function validateManagedSeed(contents: string, path: string): string {
  const seed = contents.endsWith('\n') ? contents.slice(0, -1) : contents;
  if (!SEED_HEX.test(seed)) {
    throw new SecretError(
      `managed sandbox access-token seed ${path} must contain exactly 64 lowercase hexadecimal characters, optionally followed by a newline`,
    );
  }
  return seed;
}
