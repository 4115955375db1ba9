// The exit codes of the client commands, in one place (docs/cli.md "Exit codes"). `exec` and the shell exit
// with the remote command's own code instead; these are for the CLI's own failures.

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

/** What each exit code means, for docs/cli.md. */
export const EXIT_MEANING: Record<ExitKind, string> = {
  ok: 'success',
  failure: 'a failure not classified below (a failed build, a route this server does not serve)',
  usage: 'bad flags or arguments, or a request the server refused as malformed (HTTP 400, 415, 422)',
  notFound: 'the sandbox, template, snapshot or file does not exist (HTTP 404)',
  conflict: 'the sandbox is in a state that does not allow it, e.g. paused (HTTP 409, 410)',
  server: 'the server failed (HTTP 5xx)',
  unreachable:
    'no answer from the server (refused, reset, timed out), or the connection to a sandbox was lost',
  auth: 'the API key was refused (HTTP 401, 403), none is configured, or the credentials file is not private',
  timedOut: "`exec --timeout` (or a build wait's `--timeout`) ran out",
};
