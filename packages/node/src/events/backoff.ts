export interface BackoffPolicy {
  initialMs: number;
  maxMs: number;
}

/**
 * The wait after the `failures`-th failed attempt (1 = after the first): initial · 2^(failures-1), at most maxMs,
 * then "equal jitter" — a uniform pick between half and all of it — so receivers coming back are not hit by
 * every node at the same instant while the wait still grows.
 */
export function retryDelayMs(failures: number, p: BackoffPolicy, random: () => number = Math.random): number {
  const exp = Math.min(p.maxMs, p.initialMs * 2 ** Math.min(Math.max(failures - 1, 0), 40));
  return Math.round(exp / 2 + random() * (exp / 2));
}
