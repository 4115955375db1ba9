import { DomainError, ErrorKind } from '@aenv/protocol';

/**
 * Repository error reasons, each a domain error kind (docs/errors.md). The API answers them as the reference's
 * repository mapping does (docs/snapshots.md#api): InvalidRequest 400, NotFound 404, AliasConflict and
 * IntegrityMismatch 409, Unsupported and Backend 500; build and publish routes answer AliasConflict/IntegrityMismatch
 * with 400 (the API's `HTTP_ROUTE_QUIRKS`).
 */
export type RepositoryErrorKind =
  'InvalidRequest' | 'NotFound' | 'AliasConflict' | 'IntegrityMismatch' | 'Unsupported' | 'Backend';

/** What was not found, for NotFound errors (the reference has one error per case). */
export type NotFoundSubject = 'snapshot' | 'alias' | 'artifact' | 'layer';

const KIND: Record<RepositoryErrorKind, ErrorKind> = {
  InvalidRequest: ErrorKind.InvalidArgument,
  NotFound: ErrorKind.NotFound,
  AliasConflict: ErrorKind.AlreadyExists,
  IntegrityMismatch: ErrorKind.Corrupt,
  // A stored record this node cannot read: the server's problem, not the caller's.
  Unsupported: ErrorKind.Internal,
  Backend: ErrorKind.Internal,
};

export class RepositoryError extends DomainError {
  /** The repository's own name for the failure. */
  declare readonly reason: RepositoryErrorKind;
  readonly subject: NotFoundSubject | undefined;

  constructor(
    reason: RepositoryErrorKind,
    message: string,
    opts: { cause?: unknown; subject?: NotFoundSubject } = {},
  ) {
    super(KIND[reason], message, { reason, ...(opts.cause === undefined ? {} : { cause: opts.cause }) });
    this.name = 'RepositoryError';
    this.subject = opts.subject;
  }
}

export const invalidRequest = (message: string): RepositoryError =>
  new RepositoryError('InvalidRequest', message);

export const notFound = (subject: NotFoundSubject, message: string): RepositoryError =>
  new RepositoryError('NotFound', message, { subject });

export function isRepositoryError(err: unknown, kind?: RepositoryErrorKind): err is RepositoryError {
  return err instanceof RepositoryError && (kind === undefined || err.reason === kind);
}

/** Wraps an unexpected failure of the storage layer, keeping repository errors as they are. */
export function backendError(what: string, err: unknown): RepositoryError {
  if (err instanceof RepositoryError) return err;
  const detail = err instanceof Error ? err.message : String(err);
  return new RepositoryError('Backend', `${what}: ${detail}`, { cause: err });
}
