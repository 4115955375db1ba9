/**
 * Delays between attempts while the scheduler cannot be reached: `baseMs` after the first failure,
 * doubling up to `maxMs`; a success starts over. `jitter` (0..1, default Math.random) spreads the nodes of
 * a cluster so they do not all come back in the same instant: the delay is scaled into [50 %, 100 %].
 */
export class Backoff {
  private failures = 0;

  constructor(
    private readonly baseMs: number,
    private readonly maxMs: number,
    private readonly jitter: () => number = Math.random,
  ) {}

  /** Records a failure; the delay before the next attempt. */
  fail(): number {
    const exp = Math.min(this.maxMs, this.baseMs * 2 ** Math.min(this.failures, 30));
    this.failures++;
    const j = Math.max(0, Math.min(1, this.jitter()));
    return Math.max(1, Math.round(exp * (0.5 + j / 2)));
  }

  succeed(): void {
    this.failures = 0;
  }

  /** Failures since the last success. */
  get failing(): number {
    return this.failures;
  }
}
