/**
 * Repository error kinds. HTTP statuses follow the reference's repository mapping (§2.1):
 * InvalidRequest 400, NotFound 404, AliasConflict and IntegrityMismatch 409, Unsupported and Backend 500.
 * Build and publish routes answer AliasConflict/IntegrityMismatch with 400 instead (see `publishPathStatus`).
 */
export type RepositoryErrorKind =
  'InvalidRequest' | 'NotFound' | 'AliasConflict' | 'IntegrityMismatch' | 'Unsupported' | 'Backend';

/** What was not found, for NotFound errors (the reference has one error per case). */
export type NotFoundSubject = 'snapshot' | 'alias' | 'artifact' | 'layer';

const STATUS: Record<RepositoryErrorKind, number> = {
  InvalidRequest: 400,
  NotFound: 404,
  AliasConflict: 409,
  IntegrityMismatch: 409,
  Unsupported: 500,
  Backend: 500,
};

export class RepositoryError extends Error {
  readonly status: number;
  readonly subject: NotFoundSubject | undefined;

  constructor(
    readonly kind: RepositoryErrorKind,
    message: string,
    opts: { cause?: unknown; subject?: NotFoundSubject } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'RepositoryError';
    this.status = STATUS[kind];
    this.subject = opts.subject;
  }

  /** The status build/publish routes use: conflicts and integrity errors are client errors (400) there. */
  get publishPathStatus(): number {
    return this.kind === 'AliasConflict' || this.kind === 'IntegrityMismatch' ? 400 : this.status;
  }
}

export const invalidRequest = (message: string): RepositoryError =>
  new RepositoryError('InvalidRequest', message);

export const notFound = (subject: NotFoundSubject, message: string): RepositoryError =>
  new RepositoryError('NotFound', message, { subject });

export function isRepositoryError(err: unknown, kind?: RepositoryErrorKind): err is RepositoryError {
  return err instanceof RepositoryError && (kind === undefined || err.kind === kind);
}

/** Wraps an unexpected failure of the storage layer, keeping repository errors as they are. */
export function backendError(what: string, err: unknown): RepositoryError {
  if (err instanceof RepositoryError) return err;
  const detail = err instanceof Error ? err.message : String(err);
  return new RepositoryError('Backend', `${what}: ${detail}`, { cause: err });
}
