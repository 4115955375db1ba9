import { describe, expect, it } from 'vitest';
import {
  DomainError,
  ERROR_KINDS,
  ErrorKind,
  EXIT,
  EXIT_CODE_OF_KIND,
  exitCodeOf,
  GRPC_STATUS_OF_KIND,
  GrpcStatus,
  HTTP_ANSWER_OF_KIND,
  HTTP_ROUTE_QUIRKS,
  httpErrorAnswer,
  internalErrorMessage,
  isDomainError,
  isServerFault,
  publicMessage,
  shuttingDown,
} from './index.js';

describe('error kinds', () => {
  it('keep their codes: other processes and scripts branch on them', () => {
    expect(ErrorKind).toEqual({
      InvalidArgument: 'invalid_argument',
      InvalidState: 'invalid_state',
      NotFound: 'not_found',
      AlreadyExists: 'already_exists',
      Conflict: 'conflict',
      Corrupt: 'corrupt',
      PermissionDenied: 'permission_denied',
      Unauthenticated: 'unauthenticated',
      TooLarge: 'too_large',
      Unsupported: 'unsupported',
      ResourceExhausted: 'resource_exhausted',
      InsufficientStorage: 'insufficient_storage',
      Internal: 'internal',
      BadUpstream: 'bad_upstream',
      Unavailable: 'unavailable',
      Timeout: 'timeout',
      ShuttingDown: 'shutting_down',
    });
    expect(new Set(ERROR_KINDS).size).toBe(ERROR_KINDS.length);
  });

  it('hide the message of a server fault unless told to expose it', () => {
    const internal = new DomainError(ErrorKind.Internal, 'mount /var/lib/aenv/x failed');
    expect(internal.expose).toBe(false);
    expect(publicMessage(internal, 'req-1')).toBe(internalErrorMessage('req-1'));
    expect(publicMessage(internal, 'req-1')).not.toContain('/var/lib');
    const told = new DomainError(ErrorKind.Internal, 'captured in another mode', { expose: true });
    expect(publicMessage(told, 'req-1')).toBe('captured in another mode');
    const notFound = new DomainError(ErrorKind.NotFound, 'sandbox x not found');
    expect(notFound.expose).toBe(true);
    expect(publicMessage(notFound, undefined)).toBe('sandbox x not found');
    expect(shuttingDown()).toMatchObject({ kind: 'shutting_down', expose: true });
    for (const k of ERROR_KINDS) expect(new DomainError(k, 'm').expose).toBe(!isServerFault(k));
  });

  it('are recognised by kind', () => {
    const e = new DomainError(ErrorKind.Conflict, 'busy', { details: { sandboxId: 'a' }, reason: 'Locked' });
    expect(isDomainError(e)).toBe(true);
    expect(isDomainError(e, ErrorKind.Conflict)).toBe(true);
    expect(isDomainError(e, ErrorKind.NotFound)).toBe(false);
    expect(isDomainError(new Error('x'))).toBe(false);
    expect(e).toMatchObject({ reason: 'Locked', details: { sandboxId: 'a' } });
  });
});

describe('HTTP answers of the kinds', () => {
  it('are the status as body code, 5xx for the server-fault kinds and 507 the one other 5xx', () => {
    for (const k of ERROR_KINDS) {
      const a = HTTP_ANSWER_OF_KIND[k];
      expect(a.code, k).toBe(a.status);
      expect(a.status >= 500, k).toBe(isServerFault(k) || k === ErrorKind.InsufficientStorage);
    }
    expect(httpErrorAnswer(ErrorKind.InsufficientStorage)).toEqual({ status: 507, code: 507 });
    expect(new DomainError(ErrorKind.InsufficientStorage, 'm').expose).toBe(true);
    expect(httpErrorAnswer(ErrorKind.InvalidState)).toEqual({ status: 400, code: 400 });
    expect(httpErrorAnswer(ErrorKind.Conflict)).toEqual({ status: 409, code: 409 });
    expect(httpErrorAnswer(ErrorKind.ShuttingDown)).toEqual({ status: 503, code: 503 });
  });

  it('follow the per-route quirks of the reference, in either path spelling, and only on their route', () => {
    const timeout = { method: 'post', path: '/sandboxes/:id/timeout' };
    expect(httpErrorAnswer(ErrorKind.InvalidState, timeout)).toEqual({ status: 500, code: 400 });
    expect(
      httpErrorAnswer(ErrorKind.InvalidState, { method: 'POST', path: '/sandboxes/{x}/refreshes' }),
    ).toEqual({
      status: 500,
      code: 400,
    });
    // Another kind on the same route, or the same kind on another route or method, is not a quirk.
    expect(httpErrorAnswer(ErrorKind.Conflict, timeout)).toEqual({ status: 409, code: 409 });
    expect(httpErrorAnswer(ErrorKind.InvalidState, { method: 'POST', path: '/sandboxes/:id/pause' })).toEqual(
      {
        status: 400,
        code: 400,
      },
    );
    expect(
      httpErrorAnswer(ErrorKind.InvalidState, { method: 'GET', path: '/sandboxes/:id/timeout' }),
    ).toEqual({
      status: 400,
      code: 400,
    });
    const v3 = { method: 'POST', path: '/v3/templates' };
    expect(httpErrorAnswer(ErrorKind.AlreadyExists, v3)).toEqual({ status: 400, code: 400 });
    expect(httpErrorAnswer(ErrorKind.Corrupt, v3)).toEqual({ status: 400, code: 400 });
    expect(
      httpErrorAnswer(ErrorKind.AlreadyExists, { method: 'PATCH', path: '/templates/:templateID' }),
    ).toEqual({
      status: 409,
      code: 409,
    });
    const publish = { method: 'POST', path: '/sandboxes/:id/snapshots' };
    expect(httpErrorAnswer(ErrorKind.AlreadyExists, publish)).toEqual({ status: 400, code: 400 });
    expect(httpErrorAnswer(ErrorKind.Corrupt, publish)).toEqual({ status: 409, code: 409 });
    const keys = HTTP_ROUTE_QUIRKS.map((q) => `${q.kind} ${q.method} ${q.path}`);
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe('gRPC statuses and CLI exit codes of the kinds', () => {
  it('map every kind', () => {
    const grpc = new Set<number>(Object.values(GrpcStatus));
    for (const k of ERROR_KINDS) {
      expect(grpc.has(GRPC_STATUS_OF_KIND[k]), k).toBe(true);
      expect(EXIT_CODE_OF_KIND[k], k).toBeGreaterThan(0);
    }
    expect(GRPC_STATUS_OF_KIND[ErrorKind.NotFound]).toBe(5);
    expect(GRPC_STATUS_OF_KIND[ErrorKind.InvalidState]).toBe(GrpcStatus.FailedPrecondition);
    expect(GRPC_STATUS_OF_KIND[ErrorKind.Timeout]).toBe(GrpcStatus.DeadlineExceeded);
  });

  it('give each kind the CLI exit code of its HTTP answer (a state that forbids the operation: conflict)', () => {
    const codes = new Set<number>(Object.values(EXIT));
    for (const k of ERROR_KINDS) {
      expect(codes.has(EXIT_CODE_OF_KIND[k]), k).toBe(true);
      expect(EXIT_CODE_OF_KIND[k], k).not.toBe(EXIT.ok);
    }
    expect(EXIT_CODE_OF_KIND[ErrorKind.NotFound]).toBe(EXIT.notFound);
    expect(EXIT_CODE_OF_KIND[ErrorKind.Unauthenticated]).toBe(EXIT.auth);
    expect(EXIT_CODE_OF_KIND[ErrorKind.Conflict]).toBe(EXIT.conflict);
    expect(EXIT_CODE_OF_KIND[ErrorKind.InvalidState]).toBe(EXIT.conflict);
    expect(EXIT_CODE_OF_KIND[ErrorKind.InvalidArgument]).toBe(EXIT.usage);
    expect(EXIT_CODE_OF_KIND[ErrorKind.Unavailable]).toBe(EXIT.server);
    expect(exitCodeOf(new DomainError(ErrorKind.NotFound, 'x'))).toBe(3);
    expect(exitCodeOf(new Error('x'))).toBe(1);
  });
});
