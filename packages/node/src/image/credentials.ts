// Registry credentials: `docker login`'s config.json ("auths" entries with a base64 "auth" or
// username/password) and per-pull credentials (E2B's fromImageRegistry {type: "registry", username, password}).

import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { ImageError } from './errors.js';

export interface BasicCredentials {
  username: string;
  password: string;
}

/** `$DOCKER_CONFIG` or `~/.docker`, as the docker CLI resolves it. */
export function defaultDockerConfigDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.DOCKER_CONFIG?.trim() || join(homedir(), '.docker');
}

function hostOfAuthKey(key: string): string {
  // Keys are "registry.example", "registry.example:5000" or URLs such as "https://registry.example/v1/".
  let k = key.trim().toLowerCase();
  k = k.replace(/^[a-z]+:\/\//, '');
  const slash = k.indexOf('/');
  return slash >= 0 ? k.slice(0, slash) : k;
}

function decodeAuth(entry: Record<string, unknown>, key: string, file: string): BasicCredentials | undefined {
  if (typeof entry.auth === 'string' && entry.auth.length > 0) {
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon <= 0)
      throw new ImageError('Internal', `${file}: auths["${key}"].auth is not base64("user:password")`);
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  if (typeof entry.username === 'string' && typeof entry.password === 'string') {
    return { username: entry.username, password: entry.password };
  }
  return undefined;
}

/**
 * Looks up credentials for `registry` (host[:port], also tried against `aliases` such as the API endpoint's
 * host). Reads the file on every call so that a `docker login` while the server runs takes effect.
 * credsStore/credHelpers are not supported (they need external helper programs).
 */
export async function lookupDockerCredentials(
  dockerConfigDir: string,
  registry: string,
  aliases: readonly string[] = [],
): Promise<BasicCredentials | undefined> {
  const file = join(dockerConfigDir, 'config.json');
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new ImageError('Internal', `reading ${file}: ${(e as Error).message}`, { cause: e });
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new ImageError('Internal', `${file} is not valid JSON: ${(e as Error).message}`, { cause: e });
  }
  const auths = (doc as { auths?: unknown } | null)?.auths;
  if (typeof auths !== 'object' || auths === null) return undefined;
  const wanted = [registry, ...aliases].map((h) => h.toLowerCase());
  for (const host of wanted) {
    for (const [key, entry] of Object.entries(auths as Record<string, unknown>)) {
      if (hostOfAuthKey(key) !== host || typeof entry !== 'object' || entry === null) continue;
      const creds = decodeAuth(entry as Record<string, unknown>, key, file);
      if (creds) return creds;
    }
  }
  return undefined;
}
