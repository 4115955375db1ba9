// Where the client commands find the server and the API key (docs/cli.md "Configuration"):
// flag > AENV_* > E2B_* > the credentials file > the default URL. The file is TOML (`url`, `api_key`), private
// to its owner: one readable by others is refused, as ssh refuses such a key.
import { chmodSync, lstatSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { parse, stringify } from 'smol-toml';
import { CliError, usageError } from './errors.js';

export const DEFAULT_URL = 'http://localhost:8000';

export interface Credentials {
  url?: string;
  apiKey?: string;
}

export interface Connection {
  url: string;
  apiKey: string;
}

type Env = Record<string, string | undefined>;

/** `$XDG_CONFIG_HOME/aenv/credentials`, else `~/.config/aenv/credentials`. */
export function credentialsPath(env: Env = process.env): string {
  const base = env.XDG_CONFIG_HOME?.trim() || join(env.HOME?.trim() || homedir(), '.config');
  return join(base, 'aenv', 'credentials');
}

/** The credentials file's contents; undefined when there is none. */
export function readCredentials(path: string): Credentials | undefined {
  let st;
  try {
    st = lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  if (!st.isFile()) throw new CliError('usage', `credentials file ${path} is not a regular file`);
  const uid = process.getuid?.();
  if (uid !== undefined && st.uid !== uid) {
    throw new CliError('auth', `credentials file ${path} belongs to uid ${st.uid}, not to you (uid ${uid})`);
  }
  if ((st.mode & 0o077) !== 0) {
    throw new CliError(
      'auth',
      `credentials file ${path} is readable by others (mode ${(st.mode & 0o777).toString(8)})`,
      `run \`chmod 600 ${path}\``,
    );
  }
  let doc: Record<string, unknown>;
  try {
    doc = parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new CliError('usage', `credentials file ${path} is not valid TOML: ${(e as Error).message}`);
  }
  const unknown = Object.keys(doc).filter((k) => k !== 'url' && k !== 'api_key');
  if (unknown.length) {
    throw new CliError('usage', `credentials file ${path} has unknown keys: ${unknown.join(', ')}`);
  }
  const str = (k: string) => {
    const v = doc[k];
    if (v === undefined) return undefined;
    if (typeof v !== 'string') throw new CliError('usage', `credentials file ${path}: ${k} must be a string`);
    return v;
  };
  const url = str('url');
  const apiKey = str('api_key');
  return { ...(url ? { url } : {}), ...(apiKey ? { apiKey } : {}) };
}

/** Writes the credentials file (0600) in its directory (0700), replacing it whole. */
export function writeCredentials(path: string, creds: Required<Credentials>): void {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${stringify({ url: creds.url, api_key: creds.apiKey }).trimEnd()}\n`, {
    mode: 0o600,
    flag: 'wx',
  });
  renameSync(tmp, path);
}

/** A server URL the client can call: http(s), with a host; a trailing slash is dropped. */
export function checkUrl(raw: string, from: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw usageError(`${from}: ${JSON.stringify(raw)} is not a URL`, 'give it as http://host:port');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw usageError(`${from}: ${JSON.stringify(raw)} is not an http(s) URL`, 'give it as http://host:port');
  }
  if (u.search || u.hash) throw usageError(`${from}: the server URL must not have a query or fragment`);
  return raw.replace(/\/+$/, '');
}

const nonEmpty = (v: string | undefined) => (v !== undefined && v.trim() !== '' ? v.trim() : undefined);

/** The first candidate with a value: `[value, where it came from]`. */
function first(candidates: [string | undefined, string][]): [string, string] | undefined {
  for (const [v, from] of candidates) if (nonEmpty(v)) return [nonEmpty(v)!, from];
  return undefined;
}

/**
 * Picks the URL and the key, each on its own: flag > AENV_* > E2B_* > the credentials file (read only when
 * needed, so a broken file does not stand in the way of flags or env) > the default URL.
 */
export function resolveConnection(
  flags: Credentials,
  env: Env,
  file: () => Credentials | undefined,
): Connection {
  let saved: Credentials | undefined | null = null;
  const fromFile = (): Credentials => (saved === null ? (saved = file()) : saved) ?? {};
  const url = first([
    [flags.url, '--url'],
    [env.AENV_URL, 'AENV_URL'],
    [env.E2B_API_URL, 'E2B_API_URL'],
  ]) ??
    first([[fromFile().url, 'the credentials file']]) ?? [DEFAULT_URL, 'the default'];
  const key =
    first([
      [flags.apiKey, '--api-key'],
      [env.AENV_API_KEY, 'AENV_API_KEY'],
      [env.E2B_API_KEY, 'E2B_API_KEY'],
    ]) ?? first([[fromFile().apiKey, 'the credentials file']]);
  if (!key) {
    throw new CliError(
      'auth',
      'no API key configured',
      'run `aenv auth`, or set AENV_API_KEY, or pass --api-key',
    );
  }
  return { url: checkUrl(url[0], `server URL from ${url[1]}`), apiKey: key[0] };
}
