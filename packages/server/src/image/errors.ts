// Errors of the image subsystem. Every failure a caller can see is an ImageError with a kind; the API layer
// maps `userError` to 400 (reference §5.7) and everything else to 500.

export type ImageErrorKind =
  | 'InvalidReference'
  | 'NotFound'
  | 'Unauthorized'
  | 'UnsupportedImage'
  | 'TooLarge'
  | 'DigestMismatch'
  | 'Unreachable'
  | 'Internal';

const STATUS: Record<ImageErrorKind, number> = {
  InvalidReference: 400,
  NotFound: 404,
  Unauthorized: 401,
  UnsupportedImage: 415,
  TooLarge: 413,
  DigestMismatch: 502,
  Unreachable: 503,
  Internal: 500,
};

const USER_ERROR: Record<ImageErrorKind, boolean> = {
  InvalidReference: true,
  NotFound: true,
  Unauthorized: true,
  UnsupportedImage: true,
  TooLarge: true,
  DigestMismatch: false,
  Unreachable: false,
  Internal: false,
};

export class ImageError extends Error {
  readonly kind: ImageErrorKind;
  /** HTTP-like status class of the failure (4xx: the request is wrong, 5xx: the registry or the host is). */
  readonly status: number;
  /** True when the caller's input is at fault (invalid, unknown or inaccessible image). */
  readonly userError: boolean;
  /** Transient failures (network, 5xx, 429) may succeed when retried. */
  readonly transient: boolean;

  constructor(kind: ImageErrorKind, message: string, opts: { cause?: unknown; transient?: boolean } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ImageError';
    this.kind = kind;
    this.status = STATUS[kind];
    this.userError = USER_ERROR[kind];
    this.transient = opts.transient ?? false;
  }
}

export function isImageError(e: unknown): e is ImageError {
  return e instanceof ImageError;
}

/** Wraps anything that is not already an ImageError as Internal, keeping the original as cause. */
export function asImageError(e: unknown, context: string): ImageError {
  if (e instanceof ImageError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return new ImageError('Internal', `${context}: ${msg}`, { cause: e });
}

/**
 * A value taken from a document or a reference, for an error message: quoted (JSON escapes control characters)
 * and cut short, since documents may be anything, including host files.
 */
export function shownValue(v: string, max = 80): string {
  return JSON.stringify(v.length > max ? `${v.slice(0, max)}…` : v);
}
