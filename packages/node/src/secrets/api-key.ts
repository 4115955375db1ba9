import { randomBytes } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { createManagedSecret, readBounded, readManagedSecret, SecretError } from './managed-secret.js';

export const API_KEY_ENV = 'AENV_API_KEY';
/** Where orchestrators (compose, Kubernetes) mount the shared key. */
export const EXTERNAL_API_KEY_PATH = '/run/secrets/api-key';
export const API_KEY_MIN_LENGTH = 32;
export const API_KEY_MAX_LENGTH = 256;
/** The key plus one trailing "\r\n". */
const API_KEY_FILE_MAX_BYTES = API_KEY_MAX_LENGTH + 2;
const API_KEY_CHARS = /^[A-Za-z0-9._~-]*$/;

export type ApiKeySource = 'env' | 'external-file' | 'managed-file' | 'generated';

export interface ResolveApiKeyOptions {
  /** Resolved `home_path`; the managed key lives in `<homePath>/secrets/api-key`. */
  homePath: string;
  /** Default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** Default `/run/secrets/api-key` (injectable for tests). */
  externalPath?: string;
  /** Owner required for managed files; default the effective uid. */
  expectedUid?: number;
}

export interface ResolvedApiKey {
  key: string;
  source: ApiKeySource;
  /** The file the key came from or was written to. */
  path?: string;
}

/**
 * Resolves the control-plane API key (docs/security.md): `AENV_API_KEY` → `/run/secrets/api-key`
 * → managed `$AENV_HOME/secrets/api-key` → a generated `e2b_<64 hex>` stored as the managed file.
 * A present but invalid source is an error naming it; it never falls through to the next one.
 */
export function resolveApiKey(opts: ResolveApiKeyOptions): ResolvedApiKey {
  const env = opts.env ?? process.env;
  const fromEnv = env[API_KEY_ENV];
  if (fromEnv !== undefined) return { key: validateApiKey(fromEnv, API_KEY_ENV), source: 'env' };

  const externalPath = opts.externalPath ?? EXTERNAL_API_KEY_PATH;
  const external = readExternalKeyFile(externalPath);
  if (external !== undefined) {
    return {
      key: validateApiKey(stripOneNewline(external), externalPath),
      source: 'external-file',
      path: externalPath,
    };
  }

  const managedPath = join(opts.homePath, 'secrets', 'api-key');
  const managedOpts = { expectedUid: opts.expectedUid };
  const stored = readManagedSecret(managedPath, API_KEY_FILE_MAX_BYTES, managedOpts);
  if (stored !== undefined) {
    return {
      key: validateApiKey(stripOneNewline(stored), managedPath),
      source: 'managed-file',
      path: managedPath,
    };
  }
  const generated = generateApiKey();
  const written = createManagedSecret(managedPath, `${generated}\n`, API_KEY_FILE_MAX_BYTES, managedOpts);
  const key = validateApiKey(stripOneNewline(written.contents), managedPath);
  return { key, source: written.created ? 'generated' : 'managed-file', path: managedPath };
}

/** `e2b_` + 32 random bytes in hex (68 characters). */
export function generateApiKey(): string {
  return `e2b_${randomBytes(32).toString('hex')}`;
}

/** 32-256 characters of `[A-Za-z0-9._~-]`; the error names where the key came from, never the key. */
export function validateApiKey(key: string, source: string): string {
  if (key.length < API_KEY_MIN_LENGTH || key.length > API_KEY_MAX_LENGTH) {
    throw new SecretError(
      `invalid API key from ${source}: must be ${API_KEY_MIN_LENGTH}-${API_KEY_MAX_LENGTH} characters of [A-Za-z0-9._~-], got ${key.length} characters`,
    );
  }
  if (!API_KEY_CHARS.test(key)) {
    const at = [...key].findIndex((ch) => !API_KEY_CHARS.test(ch));
    throw new SecretError(
      `invalid API key from ${source}: must contain only [A-Za-z0-9._~-], found another character at position ${at + 1}`,
    );
  }
  return key;
}

/**
 * The external key file: a regular file (symlinks are followed, as mounted secrets are usually
 * symlinks), opened non-blocking so a FIFO cannot hang startup, at most 258 bytes.
 * Returns undefined when it does not exist.
 */
function readExternalKeyFile(path: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    throw new SecretError(`cannot read API key file ${path}: ${(e as Error).message}`);
  }
  try {
    if (!fstatSync(fd).isFile()) throw new SecretError(`API key file ${path} must be a regular file`);
    return readBounded(fd, path, API_KEY_FILE_MAX_BYTES);
  } finally {
    closeSync(fd);
  }
}

function stripOneNewline(text: string): string {
  return text.replace(/\r?\n$/, '');
}
