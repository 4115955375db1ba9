import {
  DomainError,
  httpErrorAnswer,
  internalErrorMessage,
  publicMessage,
  type ErrorBody,
} from '@aenv/protocol';
import { currentRequestId } from '../util/request-context.js';

export { internalErrorMessage };

/**
 * An answer the API layer decides itself (route and query validation, admission), with HTTP status `status` and
 * the body `{"code": <code>, "message": <message>}`. `code` is normally the HTTP status; the reference puts a
 * different body code in some 500 answers, which is why the two are separate. Subsystems throw
 * `DomainError`s instead; `errorAnswer` maps both.
 *
 * Internal failures (HTTP 500 with a 5xx body code, and every server-fault kind a subsystem raised) never show
 * their message: it may hold host paths, command lines or stderr of host tools. The client gets a generic message
 * naming the request id; the log line of that request has the details (docs/security.md, "Error answers").
 */
export class ApiError extends Error {
  readonly code: number;
  /** Whether `message` may be sent to the client. */
  readonly expose: boolean;
  constructor(
    readonly status: number,
    message: string,
    code?: number,
    opts: { expose?: boolean; cause?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ApiError';
    this.code = code ?? status;
    this.expose = opts.expose ?? !(status === 500 && this.code >= 500);
  }

  /** The answer body; an unexposed message is replaced by one naming the request being served. */
  toJSON(): ErrorBody {
    return {
      code: this.code,
      message: this.expose ? this.message : internalErrorMessage(currentRequestId()),
    };
  }
}

/** How the API answers a failure. */
export interface ErrorAnswer {
  status: number;
  body: ErrorBody;
  /** Whether the body carries the error's own message (else the generic one). */
  exposed: boolean;
}

/** A route as its answers are looked up: the method and the path template the router matched. */
export interface RouteKey {
  method: string;
  path: string;
}

/**
 * The one mapping of anything a request handler threw to its answer (docs/errors.md): an `ApiError` as it says,
 * a `DomainError` by its kind (and the route's wire quirks, `HTTP_ROUTE_QUIRKS`), a framework error by the 4xx
 * status it carries, and everything else as an internal failure.
 */
export function errorAnswer(err: unknown, route?: RouteKey): ErrorAnswer {
  if (err instanceof ApiError) return { status: err.status, body: err.toJSON(), exposed: err.expose };
  if (err instanceof DomainError) {
    const { status, code } = httpErrorAnswer(err.kind, route);
    return { status, body: { code, message: publicMessage(err, currentRequestId()) }, exposed: err.expose };
  }
  const status = frameworkStatus(err);
  const exposed = status < 500;
  const message = exposed ? (err as Error).message : internalErrorMessage(currentRequestId());
  return { status, body: { code: status, message }, exposed };
}

/** Fastify's own errors (body too large, bad content type or length) carry their HTTP status as `statusCode`. */
function frameworkStatus(err: unknown): number {
  const s = err instanceof Error ? (err as { statusCode?: unknown }).statusCode : undefined;
  return typeof s === 'number' && Number.isInteger(s) && s >= 400 && s < 600 ? s : 500;
}
