// The request a piece of code runs for, carried through every await and callback of that request, so that log
// lines and error answers written far from the HTTP layer (an unhandled rejection, a subsystem's warning) can
// still name it. docs/security.md: "Hostile API callers".
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';

export interface RequestContext {
  /** 16 hex characters; also sent back as the `x-request-id` response header. */
  readonly requestId: string;
}

const storage = new AsyncLocalStorage<RequestContext>();

/** A fresh request id. The client's own `x-request-id` is never used: it would let a caller forge log lines. */
export function newRequestId(): string {
  return randomBytes(8).toString('hex');
}

/** Runs `fn` (and everything it starts) as part of request `requestId`. */
export function runInRequest<T>(requestId: string, fn: () => T): T {
  return storage.run({ requestId }, fn);
}

/** The id of the request the caller runs for, if any. */
export function currentRequestId(): string | undefined {
  return storage.getStore()?.requestId;
}
