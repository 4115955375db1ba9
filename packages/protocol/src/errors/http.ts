// Error kinds on the HTTP wire: the status and the `{"code": N}` of the body (docs/errors.md).
import { ErrorKind } from './kinds.js';

/** What an error answer carries besides its message: the HTTP status and the body's `code`. */
export interface HttpErrorAnswer {
  status: number;
  code: number;
}

const answer = (status: number): HttpErrorAnswer => ({ status, code: status });

/** The answer of each kind on every route that does not answer it otherwise (below). */
export const HTTP_ANSWER_OF_KIND: Readonly<Record<ErrorKind, HttpErrorAnswer>> = {
  [ErrorKind.InvalidArgument]: answer(400),
  [ErrorKind.InvalidState]: answer(400),
  [ErrorKind.NotFound]: answer(404),
  [ErrorKind.AlreadyExists]: answer(409),
  [ErrorKind.Conflict]: answer(409),
  // The reference's repository mapping: an integrity mismatch is a 409.
  [ErrorKind.Corrupt]: answer(409),
  [ErrorKind.PermissionDenied]: answer(403),
  [ErrorKind.Unauthenticated]: answer(401),
  [ErrorKind.TooLarge]: answer(413),
  [ErrorKind.Unsupported]: answer(415),
  [ErrorKind.ResourceExhausted]: answer(429),
  // WebDAV's "insufficient storage": a 5xx whose message is meant for the caller (docs/security.md).
  [ErrorKind.InsufficientStorage]: answer(507),
  [ErrorKind.Internal]: answer(500),
  [ErrorKind.BadUpstream]: answer(502),
  [ErrorKind.Unavailable]: answer(503),
  [ErrorKind.ShuttingDown]: answer(503),
  [ErrorKind.Timeout]: answer(504),
};

/** A route of the E2B API that answers one kind otherwise than the table above. */
export interface HttpRouteQuirk {
  method: string;
  /** The route's path template; parameters as `{name}` (or `:name`, the router's spelling). */
  path: string;
  kind: ErrorKind;
  answer: HttpErrorAnswer;
  why: string;
}

export const HTTP_ROUTE_QUIRKS: readonly HttpRouteQuirk[] = [
  {
    method: 'POST',
    path: '/sandboxes/{sandboxID}/timeout',
    kind: ErrorKind.InvalidState,
    answer: { status: 500, code: 400 },
    why: 'a sandbox that is not running: 500 with body code 400, as the reference answers (docs/differences.md)',
  },
  {
    method: 'POST',
    path: '/sandboxes/{sandboxID}/refreshes',
    kind: ErrorKind.InvalidState,
    answer: { status: 500, code: 400 },
    why: 'a sandbox that is not running: 500 with body code 400, as the reference answers (docs/differences.md)',
  },
  {
    method: 'POST',
    path: '/v3/templates',
    kind: ErrorKind.AlreadyExists,
    answer: answer(400),
    why: "a name held by another record is the caller's 400 on the build path (docs/snapshots.md)",
  },
  {
    method: 'POST',
    path: '/v3/templates',
    kind: ErrorKind.Corrupt,
    answer: answer(400),
    why: 'an integrity mismatch is a 400 on the build path (docs/snapshots.md)',
  },
  {
    method: 'POST',
    path: '/sandboxes/{sandboxID}/snapshots',
    kind: ErrorKind.AlreadyExists,
    answer: answer(400),
    why: "a snapshot name held by another record is the caller's 400 on the publish path (docs/snapshots.md)",
  },
];

/** `/a/{x}/b` and `/a/:y/b` alike become `/a/{}/b`. */
function pathShape(path: string): string {
  return path.replace(/\{[^}/]*\}|:[^/]+/g, '{}');
}

const QUIRKS = new Map(
  HTTP_ROUTE_QUIRKS.map((q) => [`${q.kind} ${q.method} ${pathShape(q.path)}`, q.answer] as const),
);

/** The status and body code of `kind` on the route `method path` (its template), or on any route. */
export function httpErrorAnswer(kind: ErrorKind, route?: { method: string; path: string }): HttpErrorAnswer {
  const quirk = route && QUIRKS.get(`${kind} ${route.method.toUpperCase()} ${pathShape(route.path)}`);
  return quirk ?? HTTP_ANSWER_OF_KIND[kind];
}
