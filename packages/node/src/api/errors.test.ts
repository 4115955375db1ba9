import { describe, expect, it } from 'vitest';
import { DomainError, ErrorKind, shuttingDown } from '@aenv/protocol';
import { runInRequest } from '../util/request-context.js';
import { RepositoryError } from '../snapshot/errors.js';
import { ImageError } from '../image/errors.js';
import { RuntimeError } from '../runtime/driver.js';
import { PausedQuotaError } from '../orchestrator/paused-quota.js';
import { ApiError, errorAnswer } from './errors.js';

const GENERIC = 'internal server error; request id req-7 (details are in the server log)';
const inRequest = <T>(fn: () => T): T => runInRequest('req-7', fn);

describe('errorAnswer: the one mapping of a thrown error to its answer', () => {
  it('answers the state machine as before: 409 while busy, 400 for a state that does not allow it', () => {
    const busy = new DomainError(ErrorKind.Conflict, 'sandbox cannot be paused from creating state');
    expect(errorAnswer(busy, { method: 'POST', path: '/sandboxes/:id/pause' })).toEqual({
      status: 409,
      body: { code: 409, message: 'sandbox cannot be paused from creating state' },
      exposed: true,
    });
    const paused = new DomainError(
      ErrorKind.InvalidState,
      'sandbox x timeout cannot be changed from paused state',
    );
    // The reference answers this one route with 500 and body code 400, the message shown.
    expect(errorAnswer(paused, { method: 'POST', path: '/sandboxes/:id/timeout' })).toEqual({
      status: 500,
      body: { code: 400, message: 'sandbox x timeout cannot be changed from paused state' },
      exposed: true,
    });
    expect(errorAnswer(paused, { method: 'POST', path: '/sandboxes/:id/snapshots' }).status).toBe(400);
    expect(errorAnswer(shuttingDown()).body).toEqual({ code: 503, message: 'the server is shutting down' });
    const full = new PausedQuotaError('x', 'no room under orchestrator.paused_quota_mb');
    expect(errorAnswer(full, { method: 'POST', path: '/sandboxes/:id/pause' })).toEqual({
      status: 507,
      body: { code: 507, message: 'no room under orchestrator.paused_quota_mb' },
      exposed: true,
    });
  });

  it('answers repository errors by their kind, with the publish and build routes answering a taken name with 400', () => {
    const taken = new RepositoryError('AliasConflict', "alias 'x' is taken");
    expect(errorAnswer(taken, { method: 'PATCH', path: '/templates/:templateID' }).body).toEqual({
      code: 409,
      message: "alias 'x' is taken",
    });
    expect(errorAnswer(taken, { method: 'POST', path: '/v3/templates' }).body.code).toBe(400);
    expect(errorAnswer(taken, { method: 'POST', path: '/sandboxes/:id/snapshots' }).body.code).toBe(400);
    const backend = new RepositoryError('Backend', 'reading /var/lib/aenv/snapshots/x: EIO');
    expect(inRequest(() => errorAnswer(backend, { method: 'POST', path: '/v3/templates' }))).toEqual({
      status: 500,
      body: { code: 500, message: GENERIC },
      exposed: false,
    });
  });

  it('keeps the message of an internal failure or a bad upstream in the log only', () => {
    const digest = new ImageError('DigestMismatch', 'blob sha256:… from registry r failed its digest');
    expect(inRequest(() => errorAnswer(digest))).toEqual({
      status: 502,
      body: { code: 502, message: GENERIC },
      exposed: false,
    });
    // A runtime failure is the node's own, whatever the driver calls it.
    const gone = new RuntimeError('NotFound', 'sandbox x has no cgroup under /sys/fs/cgroup/aenv');
    expect(inRequest(() => errorAnswer(gone))).toEqual({
      status: 500,
      body: { code: 500, message: GENERIC },
      exposed: false,
    });
    expect(inRequest(() => errorAnswer(new Error('runc failed: /run/aenv/x')))).toEqual({
      status: 500,
      body: { code: 500, message: GENERIC },
      exposed: false,
    });
    const told = new DomainError(ErrorKind.Internal, 'captured in another mode', { expose: true });
    expect(errorAnswer(told).body).toEqual({ code: 500, message: 'captured in another mode' });
  });

  it('answers the API layer’s own errors and the framework’s 4xx as they say', () => {
    expect(errorAnswer(new ApiError(404, 'sandbox x not found')).body).toEqual({
      code: 404,
      message: 'sandbox x not found',
    });
    const tooLarge = Object.assign(new Error('Request body is too large'), { statusCode: 413 });
    expect(errorAnswer(tooLarge)).toEqual({
      status: 413,
      body: { code: 413, message: 'Request body is too large' },
      exposed: true,
    });
    // A `status` field is no longer read: only domain kinds and the framework's `statusCode` choose an answer.
    const duck = Object.assign(new Error('/host/path'), { status: 400 });
    expect(inRequest(() => errorAnswer(duck)).body).toEqual({ code: 500, message: GENERIC });
  });
});
