// How many pre-started sandboxes one template's warm pool aims to hold (docs/architecture.md, "Warm sandbox
// pool"): it starts at the low watermark, doubles toward the high watermark while creates drain the pool, and
// halves back toward the low watermark after each quiet period without a create.

export interface PoolTargetOptions {
  /** Where the target starts and what it decays back to. */
  low: number;
  /** The target never exceeds it. */
  high: number;
  /** A target above `low` halves after this long without a create of the template. */
  quietMs: number;
}

export class PoolTarget {
  private target: number;
  /** Creates seen since the target last changed. */
  private demand = 0;
  /** When the target was last confirmed (a create) or lowered: the quiet period counts from here. */
  private since: number;

  constructor(
    private readonly o: PoolTargetOptions,
    now: number,
  ) {
    if (!(o.low >= 0 && o.high >= o.low))
      throw new Error(`pool target needs 0 <= low (${o.low}) <= high (${o.high})`);
    this.target = o.low;
    this.since = now;
  }

  get value(): number {
    return this.target;
  }

  /**
   * Records one create of the template: `hit` when the pool had a sandbox for it, `readyAfter` what is left.
   * The target doubles when the pool ran dry (a miss, or the last one taken) after at least `target` creates
   * since it last changed: a burst of n creates from a target of `low` ends at a target below 2n.
   */
  onCreate(hit: boolean, readyAfter: number, now: number): void {
    this.since = now;
    this.demand++;
    const drained = !hit || readyAfter === 0;
    if (drained && this.demand >= this.target && this.target < this.o.high) {
      this.target = Math.min(this.o.high, Math.max(1, this.target * 2));
      this.demand = 0;
    }
  }

  /** Halves a target above `low` after a quiet period; true when it went down. */
  decay(now: number): boolean {
    if (this.target <= this.o.low || now - this.since < this.o.quietMs) return false;
    this.target = Math.max(this.o.low, Math.floor(this.target / 2));
    this.since = now;
    this.demand = 0;
    return true;
  }
}
