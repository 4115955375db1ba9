// Errors of the image subsystem. Every failure a caller can see is an ImageError: a domain error kind (which the
// API answers, docs/errors.md) with the image subsystem's finer reason.
import { DomainError, ErrorKind, isServerFault } from '@aenv/protocol';

export type ImageErrorKind =
  | 'InvalidReference'
  | 'NotFound'
  | 'Unauthorized'
  | 'UnsupportedImage'
  | 'TooLarge'
  | 'DigestMismatch'
  | 'Unreachable'
  | 'Internal';

const KIND: Record<ImageErrorKind, ErrorKind> = {
  InvalidReference: ErrorKind.InvalidArgument,
  NotFound: ErrorKind.NotFound,
  Unauthorized: ErrorKind.Unauthenticated,
  UnsupportedImage: ErrorKind.Unsupported,
  TooLarge: ErrorKind.TooLarge,
  // The registry served content that fails its digest: its fault, not the caller's (docs/images.md).
  DigestMismatch: ErrorKind.BadUpstream,
  Unreachable: ErrorKind.Unavailable,
  Internal: ErrorKind.Internal,
};

export class ImageError extends DomainError {
  /** The image subsystem's own name for the failure. */
  declare readonly reason: ImageErrorKind;
  /** True when the caller's input is at fault (invalid, unknown or inaccessible image). */
  readonly userError: boolean;
  /** Transient failures (network, 5xx, 429) may succeed when retried. */
  readonly transient: boolean;

  constructor(reason: ImageErrorKind, message: string, opts: { cause?: unknown; transient?: boolean } = {}) {
    super(KIND[reason], message, { reason, ...(opts.cause === undefined ? {} : { cause: opts.cause }) });
    this.name = 'ImageError';
    this.userError = !isServerFault(this.kind);
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
