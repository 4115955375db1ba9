import { asErrorBody, type ErrorBody } from '../../api/errors.js';

/**
 * An answer of the aenv API that is not a success: the HTTP `status` and the body's `code` and `message`
 * (`{"code": N, "message": "..."}`; for an answer without such a body, `code` is the status and `message` says
 * what came instead).
 */
export class AenvApiError extends Error {
  readonly code: number;
  constructor(
    readonly status: number,
    body: ErrorBody,
    /** `GET /v2/sandboxes` etc.: which call failed. */
    readonly request: string,
  ) {
    super(body.message);
    this.name = 'AenvApiError';
    this.code = body.code;
  }

  /** Reads the error out of an answer's status and text. */
  static fromAnswer(status: number, text: string, request: string): AenvApiError {
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    const body = asErrorBody(json) ?? {
      code: status,
      message: text.trim() ? `HTTP ${status}: ${text.trim().slice(0, 200)}` : `HTTP ${status}`,
    };
    return new AenvApiError(status, body, request);
  }
}

/** The call never got an answer (connection refused, reset, timed out). */
export class AenvApiUnreachableError extends Error {
  constructor(
    readonly request: string,
    options: ErrorOptions,
  ) {
    super(`${request}: no answer from the aenv API (${describe(options.cause)})`, options);
    this.name = 'AenvApiUnreachableError';
  }
}

function describe(cause: unknown): string {
  if (!(cause instanceof Error)) return String(cause);
  const inner = cause.cause instanceof Error ? `: ${cause.cause.message}` : '';
  return `${cause.message}${inner}`;
}
