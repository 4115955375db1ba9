/**
 * An error the API answers with `{"code": <code>, "message": <message>}` and HTTP status `status`.
 * `code` is normally the HTTP status; the reference puts a different body code in some 500 answers (§10.3),
 * which is why the two are separate.
 */
export class ApiError extends Error {
  readonly code: number;
  constructor(
    readonly status: number,
    message: string,
    code?: number,
  ) {
    super(message);
    this.name = 'ApiError';
    this.code = code ?? status;
  }

  toJSON(): { code: number; message: string } {
    return { code: this.code, message: this.message };
  }
}

export const badRequest = (message: string): ApiError => new ApiError(400, message);
export const notFound = (message: string): ApiError => new ApiError(404, message);
export const conflict = (message: string): ApiError => new ApiError(409, message);

/** Errors thrown by subsystems may carry an HTTP-ish `status`; anything else is a 500. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err && typeof err === 'object') {
    const e = err as { status?: unknown; statusCode?: unknown; message?: unknown };
    const status =
      typeof e.status === 'number' ? e.status : typeof e.statusCode === 'number' ? e.statusCode : 500;
    const message = typeof e.message === 'string' ? e.message : String(err);
    if (status >= 400 && status < 600) return new ApiError(status, message);
  }
  return new ApiError(500, err instanceof Error ? err.message : String(err));
}
