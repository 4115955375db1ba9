// Refill target of a warm pool (docs/architecture.md): it starts at the low watermark and
// doubles, up to the high watermark, each time an acquisition leaves fewer than `low` ready.

export interface Watermarks {
  lowWatermark: number;
  highWatermark: number;
}

export function validateWatermarks(w: Watermarks): void {
  for (const [key, v] of [
    ['pool.low_watermark', w.lowWatermark],
    ['pool.high_watermark', w.highWatermark],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 0) throw new Error(`${key} must be a non-negative integer, got ${v}`);
  }
  if (w.lowWatermark > w.highWatermark) {
    throw new Error(
      `pool.low_watermark (${w.lowWatermark}) must be <= pool.high_watermark (${w.highWatermark})`,
    );
  }
}

export class RefillTarget {
  private target: number;

  constructor(private readonly w: Watermarks) {
    validateWatermarks(w);
    this.target = w.lowWatermark;
  }

  get value(): number {
    return this.target;
  }

  /** Records an acquisition that left `readyAfter` slots in the pool. */
  onAcquire(readyAfter: number): void {
    if (readyAfter >= this.w.lowWatermark || this.w.highWatermark === 0) return;
    this.target = Math.min(this.w.highWatermark, Math.max(this.target, this.w.lowWatermark, 1) * 2);
  }

  /** How many slots to create so that `ready + inFlight` reaches the target. */
  deficit(ready: number, inFlight: number): number {
    return Math.max(0, this.target - ready - inFlight);
  }
}
