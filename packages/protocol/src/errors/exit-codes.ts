// Error kinds as exit codes of the aenv CLI (docs/errors.md): one code per kind, so scripts can branch on it.
import { ErrorKind, isDomainError } from './kinds.js';

/** 0 is success; 2 is left to the CLI's own usage errors. */
export const EXIT_CODE_OF_KIND: Readonly<Record<ErrorKind, number>> = {
  [ErrorKind.Internal]: 1,
  [ErrorKind.InvalidArgument]: 3,
  [ErrorKind.InvalidState]: 4,
  [ErrorKind.NotFound]: 5,
  [ErrorKind.AlreadyExists]: 6,
  [ErrorKind.Conflict]: 7,
  [ErrorKind.Corrupt]: 8,
  [ErrorKind.PermissionDenied]: 9,
  [ErrorKind.Unauthenticated]: 10,
  [ErrorKind.TooLarge]: 11,
  [ErrorKind.Unsupported]: 12,
  [ErrorKind.ResourceExhausted]: 13,
  [ErrorKind.BadUpstream]: 14,
  [ErrorKind.Unavailable]: 15,
  [ErrorKind.Timeout]: 16,
  [ErrorKind.ShuttingDown]: 17,
  [ErrorKind.InsufficientStorage]: 18,
};

/** The exit code for a failure: its kind's, or 1 (internal) for anything that is not a domain error. */
export function exitCodeOf(err: unknown): number {
  return isDomainError(err) ? EXIT_CODE_OF_KIND[err.kind] : EXIT_CODE_OF_KIND[ErrorKind.Internal];
}
