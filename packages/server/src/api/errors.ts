import type { ErrorBody } from '@aenv/protocol';
import { currentRequestId } from '../util/request-context.js';

/**
 * An error the API answers with `{"code": <code>, "message": <message>}` and HTTP status `status`.
 * `code` is normally the HTTP status; the reference puts a different body code in some 500 answers (§10.3),
 * which is why the two are separate.
 *
 * Internal failures (HTTP 500 with a 5xx body code, and every 5xx a subsystem raised) never show their message:
 * it may hold host paths, command lines or stderr of host tools. The client gets a generic message naming the
 * request id; the log line of that request has the details (docs/security.md, "Error answers").
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

/** What a client reads instead of the details of an internal failure. */
export function internalErrorMessage(requestId: string | undefined, status = 500): string {
  const what = status === 500 ? 'internal server error' : `server error ${status}`;
  return requestId ? `${what}; request id ${requestId} (details are in the server log)` : what;
}

export const badRequest = (message: string): ApiError => new ApiError(400, message);
export const notFound = (message: string): ApiError => new ApiError(404, message);
export const conflict = (message: string): ApiError => new ApiError(409, message);

/**
 * Errors thrown by subsystems may carry an HTTP-ish `status`: a 4xx one is the client's fault and its message is
 * meant for it; a 5xx one (or none: a 500) is an internal failure whose message stays in the log.
 */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  let status = 500;
  let message = String(err);
  if (err && typeof err === 'object') {
    const e = err as { status?: unknown; statusCode?: unknown; message?: unknown };
    const s = typeof e.status === 'number' ? e.status : typeof e.statusCode === 'number' ? e.statusCode : 500;
    if (Number.isInteger(s) && s >= 400 && s < 600) status = s;
    if (typeof e.message === 'string') message = e.message;
  }
  return new ApiError(status, message, undefined, { expose: status < 500, cause: err });
}
