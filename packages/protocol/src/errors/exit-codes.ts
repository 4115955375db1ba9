// The exit codes of the aenv CLI, in one place (docs/cli.md "Exit codes"): by exit kind, by the HTTP status of
// an API answer (what the CLI sees), and by error kind (what a process that throws domain errors exits with).
// `exec` and the shell exit with the remote command's own code instead; these are for aenv's own failures.
import { HTTP_ANSWER_OF_KIND } from './http.js';
import { ErrorKind, isDomainError } from './kinds.js';

export const EXIT = {
  ok: 0,
  /** Anything not classified below. */
  failure: 1,
  /** Bad flags or arguments, or a request the server refused as malformed (400, 415, 422). */
  usage: 2,
  /** The sandbox, template, snapshot or file does not exist (404). */
  notFound: 3,
  /** The target is in a state that does not allow it (409; 410 for a sandbox that cannot be reached now). */
  conflict: 4,
  /** The server failed (5xx). */
  server: 5,
  /** No answer from the server (refused, reset, timed out). */
  unreachable: 6,
  /** The API key was refused (401, 403), or none is configured. */
  auth: 7,
  /** `exec --timeout` ran out (as timeout(1)). */
  timedOut: 124,
} as const;

export type ExitKind = keyof typeof EXIT;

/** The exit kind of an HTTP answer's status (or of a 500 whose body carries a 4xx code: docs/differences.md). */
export function kindOfStatus(status: number, bodyCode?: number): ExitKind {
  const s = status >= 500 && bodyCode !== undefined && bodyCode >= 400 && bodyCode < 500 ? bodyCode : status;
  if (s === 401 || s === 403) return 'auth';
  if (s === 404) return 'notFound';
  if (s === 409 || s === 410) return 'conflict';
  if (s >= 400 && s < 500) return 'usage';
  if (s >= 500) return 'server';
  return 'failure';
}

/**
 * The exit code of each error kind: the one its HTTP answer gets from `kindOfStatus`, except a state that
 * does not allow the operation, which is a conflict (the E2B wire answers it 400, or 500 with code 400).
 */
export const EXIT_CODE_OF_KIND: Readonly<Record<ErrorKind, number>> = Object.fromEntries(
  Object.values(ErrorKind).map((k) => [
    k,
    k === ErrorKind.InvalidState ? EXIT.conflict : EXIT[kindOfStatus(HTTP_ANSWER_OF_KIND[k].status)],
  ]),
) as Record<ErrorKind, number>;

/** The exit code for a failure: its kind's, or `failure` (1) for anything that is not a domain error. */
export function exitCodeOf(err: unknown): number {
  return isDomainError(err) ? EXIT_CODE_OF_KIND[err.kind] : EXIT.failure;
}
