import { join } from 'node:path';
import { managedHexKey, SecretError } from './managed-secret.js';

export const SECRETS_KEY_ENV = 'AENV_SECRETS_ENCRYPTION_KEY';
const MANAGED_FILE = 'secrets-key';
const KEY_HEX = /^[0-9a-f]{64}$/;

export type SecretsKeySource = 'config' | 'managed-file' | 'generated';

export interface ResolveSecretsKeyOptions {
  /** Resolved `home_path`; the managed key lives in `<homePath>/secrets/secrets-key`. */
  homePath: string;
  /** `[sandbox].secrets_encryption_key` after env overrides (the config loader trimmed it). */
  explicitKey?: string;
  /** `cluster.scheduler_endpoint`: a node-local key in a cluster deserves a warning. */
  schedulerEndpoint?: string;
  /** Owner required for managed files; default the effective uid. */
  expectedUid?: number;
}

export interface ResolvedSecretsKey {
  key: Buffer;
  source: SecretsKeySource;
  path?: string;
  /** For the server to log once. */
  warnings: string[];
}

/**
 * The AES-256 key `/secrets` values are sealed with (docs/networking.md#secrets), kept like the access-token seed:
 * `[sandbox].secrets_encryption_key` / $AENV_SECRETS_ENCRYPTION_KEY (64 hex digits, the same on every node of a
 * cluster: nodes open each other's sealed values) when set, else a managed 0600 file created on the first start.
 */
export function resolveSecretsKey(opts: ResolveSecretsKeyOptions): ResolvedSecretsKey {
  if (opts.explicitKey !== undefined) {
    const hex = opts.explicitKey.trim().toLowerCase();
    if (!KEY_HEX.test(hex))
      throw new SecretError(
        `[sandbox].secrets_encryption_key (or ${SECRETS_KEY_ENV}) must be exactly 64 hexadecimal characters ` +
          `(a 32-byte AES-256 key, e.g. from \`openssl rand -hex 32\`)`,
      );
    return { key: Buffer.from(hex, 'hex'), source: 'config', warnings: [] };
  }
  const path = join(opts.homePath, 'secrets', MANAGED_FILE);
  const managedOpts = { expectedUid: opts.expectedUid };
  const warnings: string[] = [];
  if (opts.schedulerEndpoint !== undefined) {
    warnings.push(
      `sealing /secrets values with the node-local key ${path} while cluster.scheduler_endpoint is set; ` +
        `configure ${SECRETS_KEY_ENV} with the same value on every node, or secrets made on another node ` +
        `cannot be opened here and their rule headers are refused at egress`,
    );
  }
  const managed = managedHexKey(path, 'secrets key', managedOpts);
  return { key: Buffer.from(managed.hex, 'hex'), source: managed.source, path, warnings };
}
