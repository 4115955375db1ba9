// Turns whatever a client command threw into one line on stderr and an exit code (docs/cli.md "Errors").
import { CommanderError } from 'commander';
import {
  AenvApiError,
  AenvApiUnreachableError,
  Code,
  ConnectError,
  EnvdCommandError,
  EnvdRestError,
} from '@aenv/protocol';
import { EXIT, kindOfStatus, type ExitKind } from './exit-codes.js';

/** A failure the CLI itself names: what failed, why, and (in `hint`) what to do. */
export class CliError extends Error {
  constructor(
    readonly kind: ExitKind,
    message: string,
    readonly hint?: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'CliError';
  }
}

/** Wrong flags or arguments. */
export const usageError = (message: string, hint?: string) => new CliError('usage', message, hint);

export interface DescribedError {
  exitCode: number;
  /** One line, without a trailing newline. */
  line: string;
}

const API_HINT: Partial<Record<ExitKind, string>> = {
  auth: 'check the API key (`aenv auth`, AENV_API_KEY or --api-key)',
  notFound: 'check the id or name (`aenv list`, `aenv template list`, `aenv snapshot list`)',
  conflict: 'check the sandbox state with `aenv list`',
  server: 'the server logs say more',
};

const CONNECT_KIND: Partial<Record<Code, ExitKind>> = {
  [Code.NotFound]: 'notFound',
  [Code.InvalidArgument]: 'usage',
  [Code.Unauthenticated]: 'auth',
  [Code.PermissionDenied]: 'auth',
  [Code.FailedPrecondition]: 'conflict',
  [Code.AlreadyExists]: 'conflict',
  [Code.DeadlineExceeded]: 'timedOut',
  [Code.Unavailable]: 'unreachable',
};

/** What kind of failure `e` is, in words and as an exit kind. */
export function classify(e: unknown): { kind: ExitKind; message: string; hint?: string } {
  if (e instanceof CliError) return { kind: e.kind, message: e.message, ...(e.hint ? { hint: e.hint } : {}) };
  if (e instanceof AenvApiUnreachableError) {
    return {
      kind: 'unreachable',
      message: e.message,
      hint: 'is the server running there? set its address with `aenv auth`, AENV_URL or --url',
    };
  }
  if (e instanceof AenvApiError) {
    if (e.status === 404 && e.message.startsWith('route not found')) {
      return {
        kind: 'failure',
        message: `${e.request}: this server does not serve it (${e.message})`,
        hint: 'check that --url points at an aenv node or gateway of this version',
      };
    }
    const kind = kindOfStatus(e.status, e.code);
    const hint = API_HINT[kind];
    return {
      kind,
      message: `${e.request} failed (HTTP ${e.status}): ${e.message}`,
      ...(hint ? { hint } : {}),
    };
  }
  if (e instanceof ConnectError) {
    return { kind: CONNECT_KIND[e.code] ?? 'server', message: `envd: ${Code[e.code]}: ${e.rawMessage}` };
  }
  if (e instanceof EnvdCommandError) {
    const kind = e.code !== undefined ? (CONNECT_KIND[e.code] ?? 'server') : 'server';
    return { kind, message: e.message };
  }
  if (e instanceof EnvdRestError) {
    return { kind: e.status !== undefined ? kindOfStatus(e.status) : 'unreachable', message: e.message };
  }
  const errno = (e as NodeJS.ErrnoException | undefined)?.code;
  if (errno === 'ENOENT' || errno === 'EACCES' || errno === 'EISDIR' || errno === 'ENOTDIR') {
    return { kind: errno === 'ENOENT' ? 'notFound' : 'usage', message: (e as Error).message };
  }
  return { kind: 'failure', message: e instanceof Error ? e.message : String(e) };
}

/** The line and exit code for `e`; with `debug`, the stack follows on further lines. */
export function describeError(e: unknown, debug = false): DescribedError {
  if (e instanceof CommanderError) {
    return { exitCode: e.exitCode === 0 ? EXIT.ok : EXIT.usage, line: '' };
  }
  const c = classify(e);
  const oneLine = (s: string) => s.replace(/\s*\n\s*/g, ' ').trim();
  let line = `error: ${oneLine(c.message)}${c.hint ? `; ${c.hint}` : ''}`;
  if (debug && e instanceof Error && e.stack) line += `\n${e.stack}`;
  return { exitCode: EXIT[c.kind], line };
}
