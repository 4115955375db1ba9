import { join } from 'node:path';
import { managedHexKey, SecretError } from './managed-secret.js';

export const RECORD_SIGNING_ENV = 'AENV_SNAPSHOT_RECORD_SIGNING_SECRET';
const MANAGED_FILE = 'snapshot-record-signing-key';

export type RecordSigningKeySource = 'config' | 'managed-file' | 'generated';

export interface ResolveRecordSigningKeyOptions {
  /** Resolved `home_path`; the managed key lives in `<homePath>/secrets/snapshot-record-signing-key`. */
  homePath: string;
  /** `[snapshot].record_signing_secret` after env overrides (the config loader trimmed it). */
  explicitSecret?: string;
  /** The repository is shared with other nodes (oss): a node-local key deserves a warning. */
  sharedRepository: boolean;
  /** Owner required for managed files; default the effective uid. */
  expectedUid?: number;
}

export interface ResolvedRecordSigningKey {
  secret: string;
  source: RecordSigningKeySource;
  path?: string;
  /** For the server to log once. */
  warnings: string[];
}

/**
 * The secret snapshot records are signed with (docs/snapshots.md#record-signing), kept like the access-token
 * seed: `[snapshot].record_signing_secret` / $AENV_SNAPSHOT_RECORD_SIGNING_SECRET when set (the same value on
 * every node sharing a repository), else a managed 0600 file under `$AENV_HOME/secrets/`, created on first start.
 */
export function resolveRecordSigningKey(opts: ResolveRecordSigningKeyOptions): ResolvedRecordSigningKey {
  if (opts.explicitSecret !== undefined) {
    const secret = opts.explicitSecret.trim();
    if (secret === '') {
      throw new SecretError(
        `[snapshot].record_signing_secret (or ${RECORD_SIGNING_ENV}) must be non-empty when configured`,
      );
    }
    return { secret, source: 'config', warnings: [] };
  }
  const path = join(opts.homePath, 'secrets', MANAGED_FILE);
  const managedOpts = { expectedUid: opts.expectedUid };
  const warnings: string[] = [];
  if (opts.sharedRepository) {
    warnings.push(
      `signing snapshot records with the node-local key ${path} while the repository is shared (oss); ` +
        `configure ${RECORD_SIGNING_ENV} with the same value on every node, or records written by other nodes are refused`,
    );
  }
  const managed = managedHexKey(path, 'snapshot record signing key', managedOpts);
  return { secret: managed.hex, source: managed.source, path, warnings };
}
