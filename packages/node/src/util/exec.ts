import { CONFIG_FIELDS } from '@aenv/config';
import { launch } from './launcher.js';

/**
 * Environment variables that hold credentials of aenv or of its callers: the API key, the token seed, the
 * e2b SDK's key (same value as the API key on a node whose operator also runs the SDK), and every config
 * secret that can come from the environment. No host command needs them (docs/security.md).
 */
const SECRET_ENV_VARS = new Set([
  'AENV_API_KEY',
  'E2B_API_KEY',
  'E2B_ACCESS_TOKEN',
  ...CONFIG_FIELDS.flatMap((f) => (f.field.secret && f.field.env ? [f.field.env] : [])),
]);
/** Names that say they hold a secret, whoever set them. */
const SECRET_NAME = /API_?KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL/i;

export function isSecretEnvVar(name: string): boolean {
  return SECRET_ENV_VARS.has(name) || SECRET_NAME.test(name);
}

/** `env` without the variables that hold secrets: what host commands run with unless told otherwise. */
export function hostToolEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) if (!isSecretEnvVar(k)) out[k] = v;
  return out;
}

/**
 * Removes aenv's own secrets from this process's environment once they were read, so that no child process
 * (whichever way it is started) inherits them.
 */
export function dropSecretsFromEnvironment(env: NodeJS.ProcessEnv = process.env): void {
  for (const k of SECRET_ENV_VARS) delete env[k];
}

export interface RunOptions {
  /** Written to the child's stdin, then stdin is closed. */
  input?: string | Buffer;
  /** Kill the child (SIGKILL) after this many milliseconds. */
  timeoutMs?: number;
  /** Default: this process's environment without secrets (`hostToolEnv`). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Resolve instead of throwing when the exit code is not 0. */
  allowFailure?: boolean;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  code: number;
}

/** A host command that failed; the message carries the command line and its stderr. */
export class CommandError extends Error {
  constructor(
    readonly command: string,
    readonly args: readonly string[],
    readonly code: number | null,
    readonly stderr: string,
    readonly stdout: string,
  ) {
    const detail = (stderr.trim() || stdout.trim()).split('\n').slice(-5).join('; ');
    super(`${[command, ...args].join(' ')} exited with ${code ?? 'signal'}${detail ? `: ${detail}` : ''}`);
    this.name = 'CommandError';
  }
}

/** Runs a host tool without a shell and collects its output (through the process launcher: launcher.ts). */
export async function run(
  command: string,
  args: readonly string[],
  opts: RunOptions = {},
): Promise<RunResult> {
  const outcome = await launch({
    command,
    args,
    env: opts.env ?? hostToolEnv(),
    cwd: opts.cwd,
    input: opts.input,
    timeoutMs: opts.timeoutMs,
    stdio: 'collect',
  });
  const result = { stdout: outcome.stdout, stderr: outcome.stderr, code: outcome.code ?? -1 };
  if (outcome.code === 0 || opts.allowFailure) return result;
  throw new CommandError(command, args, outcome.code, result.stderr, result.stdout);
}
