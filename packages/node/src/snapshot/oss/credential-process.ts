import { z } from 'zod';
import { CommandError, run } from '../../util/exec.js';
import { invalidRequest, RepositoryError } from '../errors.js';

export interface ResolvedCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  expiration?: Date;
}

/**
 * What the credential process may see of the server's environment: the basics a program needs to run, the AWS
 * tools' own settings (profile, config and credential files, region), TLS trust and proxies. Nothing else: in
 * particular not the API key, the token seed or any other secret the server was started with.
 */
const PASSED_ENV =
  /^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_[A-Z_]+|TZ|TMPDIR|AWS_[A-Z0-9_]+|SSL_CERT_FILE|SSL_CERT_DIR|(HTTPS?|NO|ALL)_PROXY|(https?|no|all)_proxy)$/;

/** The environment credential_process runs with (see PASSED_ENV). */
export function credentialProcessEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) if (PASSED_ENV.test(k)) out[k] = v;
  return out;
}

/** Refresh credentials this long before they expire. */
const REFRESH_MARGIN_MS = 5 * 60 * 1000;
const PROCESS_TIMEOUT_MS = 30_000;

/**
 * Splits a credential_process command line into argv the way AWS tools do — whitespace separates words,
 * single/double quotes group, backslash escapes — without ever invoking a shell.
 */
export function splitCommandLine(line: string): string[] {
  const out: string[] = [];
  let word = '';
  let inWord = false;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === '\\' && quote === '"' && i + 1 < line.length) word += line[++i];
      else word += c;
    } else if (c === '"' || c === "'") {
      quote = c;
      inWord = true;
    } else if (c === '\\' && i + 1 < line.length) {
      word += line[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) out.push(word);
      word = '';
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (quote) throw invalidRequest(`backend.oss.credential_process has an unterminated ${quote} quote`);
  if (inWord) out.push(word);
  return out;
}

/** The AWS credential_process output format (Version 1). */
const outputSchema = z.object({
  Version: z.literal(1),
  AccessKeyId: z.string().min(1),
  SecretAccessKey: z.string().min(1),
  SessionToken: z.string().optional(),
  Expiration: z.string().optional(),
});

export function parseCredentialProcessOutput(stdout: string): ResolvedCredentials {
  let json: unknown;
  try {
    json = JSON.parse(stdout);
  } catch {
    throw new RepositoryError('Backend', 'credential_process did not print JSON');
  }
  const r = outputSchema.safeParse(json);
  if (!r.success) {
    const fields = r.error.issues.map((i) => i.path.join('.') || '(root)').join(', ');
    throw new RepositoryError(
      'Backend',
      `credential_process output is not the AWS format (Version 1; check: ${fields})`,
    );
  }
  const creds: ResolvedCredentials = {
    accessKeyId: r.data.AccessKeyId,
    secretAccessKey: r.data.SecretAccessKey,
  };
  if (r.data.SessionToken) creds.sessionToken = r.data.SessionToken;
  if (r.data.Expiration) {
    const exp = new Date(r.data.Expiration);
    if (Number.isNaN(exp.getTime()))
      throw new RepositoryError('Backend', 'credential_process Expiration is not a timestamp');
    creds.expiration = exp;
  }
  return creds;
}

/**
 * A credentials provider that runs `argv` (no shell) and caches the result until shortly before it expires.
 * Concurrent callers share one run. Errors never include the process's stdout (it may hold secrets).
 */
export function credentialProcessProvider(argv: readonly string[]): () => Promise<ResolvedCredentials> {
  if (argv.length === 0 || !argv[0]) throw invalidRequest('backend.oss.credential_process is empty');
  let cached: ResolvedCredentials | undefined;
  let inflight: Promise<ResolvedCredentials> | undefined;
  const fresh = (c: ResolvedCredentials) =>
    !c.expiration || c.expiration.getTime() - Date.now() > REFRESH_MARGIN_MS;
  return async () => {
    if (cached && fresh(cached)) return cached;
    inflight ??= (async () => {
      try {
        const out = await run(argv[0]!, argv.slice(1), {
          timeoutMs: PROCESS_TIMEOUT_MS,
          env: credentialProcessEnv(),
        });
        cached = parseCredentialProcessOutput(out.stdout);
        return cached;
      } catch (err) {
        if (err instanceof RepositoryError) throw err;
        const detail =
          err instanceof CommandError
            ? `exited with ${err.code ?? 'a signal'}: ${err.stderr.trim().split('\n').slice(-3).join('; ')}`
            : (err as Error).message;
        throw new RepositoryError('Backend', `credential_process ${argv[0]} failed: ${detail}`, {
          cause: err,
        });
      } finally {
        inflight = undefined;
      }
    })();
    return inflight;
  };
}
