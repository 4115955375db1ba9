// Retry with exponential backoff for transient failures (network errors, 5xx, 429).

import { setTimeout as sleep } from 'node:timers/promises';
import { ImageError } from './errors.js';

export interface RetryPolicy {
  /** Attempts after the first one. */
  retries: number;
  /** Delay before the first retry; doubles each time, with up to 50% random jitter. */
  baseDelayMs: number;
  maxDelayMs?: number;
}

export const DEFAULT_RETRY: RetryPolicy = { retries: 3, baseDelayMs: 250, maxDelayMs: 4000 };

export function isTransient(e: unknown): boolean {
  return e instanceof ImageError && e.transient;
}

/** Runs `fn` until it succeeds, fails with a non-transient error, or the retries are used up. */
export async function withRetry<T>(
  fn: (attempt: number) => Promise<T>,
  policy: RetryPolicy,
  opts: { signal?: AbortSignal; onRetry?: (e: unknown, attempt: number, delayMs: number) => void } = {},
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (e) {
      if (!isTransient(e) || attempt >= policy.retries || opts.signal?.aborted) throw e;
      const base = Math.min(policy.baseDelayMs * 2 ** attempt, policy.maxDelayMs ?? Number.POSITIVE_INFINITY);
      const delay = Math.round(base * (1 + Math.random() * 0.5));
      opts.onRetry?.(e, attempt + 1, delay);
      await sleep(delay, undefined, opts.signal ? { signal: opts.signal } : undefined);
    }
  }
}
