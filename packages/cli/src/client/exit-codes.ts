// The exit codes of the client commands (docs/cli.md "Exit codes"): one map with the error kinds' codes, in
// @aenv/protocol (errors/exit-codes.ts). `exec` and the shell exit with the remote command's own code instead.
import type { ExitKind } from '@aenv/protocol';

export { EXIT, kindOfStatus, type ExitKind } from '@aenv/protocol';

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
