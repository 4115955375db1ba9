// The kinds of failure every aenv process speaks (docs/errors.md). A node's subsystems throw them; each transport
// maps them once: HTTP answers (./http.ts), gRPC statuses (./grpc.ts), CLI exit codes (./exit-codes.ts).

/** Every kind, by name, with its stable code: what travels between processes and what callers may branch on. */
export const ErrorKind = {
  /** The request itself is wrong (a malformed or contradictory field, a name that cannot exist). */
  InvalidArgument: 'invalid_argument',
  /** The request is well-formed but its target's state does not allow it (a template that is not built yet). */
  InvalidState: 'invalid_state',
  NotFound: 'not_found',
  /** The name or id to create is taken. */
  AlreadyExists: 'already_exists',
  /** Another operation holds or moved the target (a transition in progress); retrying later may succeed. */
  Conflict: 'conflict',
  /** Stored data does not match its digest or signature (damaged or tampered with). */
  Corrupt: 'corrupt',
  /** The caller is known but may not do this. */
  PermissionDenied: 'permission_denied',
  /** The caller's (or, for a registry, aenv's) credentials were missing or refused. */
  Unauthenticated: 'unauthenticated',
  /** The input is larger than a limit allows. */
  TooLarge: 'too_large',
  /** The input is of a kind or format this node does not handle (an image for another platform). */
  Unsupported: 'unsupported',
  /** A quota or rate limit of the node is used up; retrying later may succeed. */
  ResourceExhausted: 'resource_exhausted',
  /** A storage quota of the node has no room for what the operation would write; retrying later may succeed. */
  InsufficientStorage: 'insufficient_storage',
  /** A failure of the server itself; the message is for its log. */
  Internal: 'internal',
  /** A system aenv depends on (a registry) answered with something wrong (content that fails its digest). */
  BadUpstream: 'bad_upstream',
  /** A system aenv depends on cannot be reached now. */
  Unavailable: 'unavailable',
  /** The operation did not finish within its deadline. */
  Timeout: 'timeout',
  /** The process is stopping and takes no new work. */
  ShuttingDown: 'shutting_down',
} as const;

export type ErrorKind = (typeof ErrorKind)[keyof typeof ErrorKind];

export const ERROR_KINDS: readonly ErrorKind[] = Object.values(ErrorKind);

/**
 * Kinds that describe the server's own failure: their messages may hold host paths, command lines or the stderr
 * of host tools, so a client reads a generic message instead unless the error is marked `expose`
 * (docs/security.md, "Error answers").
 */
const SERVER_FAULTS: ReadonlySet<ErrorKind> = new Set<ErrorKind>([
  ErrorKind.Internal,
  ErrorKind.BadUpstream,
  ErrorKind.Unavailable,
  ErrorKind.Timeout,
  ErrorKind.ShuttingDown,
]);

export function isServerFault(kind: ErrorKind): boolean {
  return SERVER_FAULTS.has(kind);
}

export interface DomainErrorOptions {
  cause?: unknown;
  /** The subsystem's finer cause (e.g. an image error's `DigestMismatch`), for logs and relays. */
  reason?: string;
  /** Facts a relay or a log may carry alongside the message (e.g. `{ sandboxId }`); never sent as the body. */
  details?: Readonly<Record<string, string>>;
  /** Whether the message may reach a client; by default only for kinds that are not server faults. */
  expose?: boolean;
}

/** A failure of one of the kinds above. Subsystems throw it (or a subclass); only transports turn it into a status. */
export class DomainError extends Error {
  readonly kind: ErrorKind;
  readonly reason: string | undefined;
  readonly details: Readonly<Record<string, string>> | undefined;
  /** Whether `message` may be shown to a client. */
  readonly expose: boolean;

  constructor(kind: ErrorKind, message: string, opts: DomainErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'DomainError';
    this.kind = kind;
    this.reason = opts.reason;
    this.details = opts.details;
    this.expose = opts.expose ?? !isServerFault(kind);
  }
}

export function isDomainError(err: unknown, kind?: ErrorKind): err is DomainError {
  return err instanceof DomainError && (kind === undefined || err.kind === kind);
}

/** The fixed answer of a process that is stopping; its message is always shown. */
export function shuttingDown(): DomainError {
  return new DomainError(ErrorKind.ShuttingDown, 'the server is shutting down', { expose: true });
}

/** What a client reads instead of the details of an internal failure. */
export function internalErrorMessage(requestId: string | undefined, status = 500): string {
  const what = status === 500 ? 'internal server error' : `server error ${status}`;
  return requestId ? `${what}; request id ${requestId} (details are in the server log)` : what;
}

/** The message a client may read for `err`: its own when exposed, else the generic one naming the request. */
export function publicMessage(err: DomainError, requestId: string | undefined): string {
  return err.expose ? err.message : internalErrorMessage(requestId);
}
