import { ConnectError } from '@connectrpc/connect';

export const KEEPALIVE = Symbol('keepalive');

/**
 * A single-consumer queue feeding one server stream. Tracks buffered bytes so producers can apply
 * backpressure, and lets the consumer wait with a keepalive timeout and an abort signal.
 */
export class EventQueue<T> {
  private items: { item: T; bytes: number }[] = [];
  private wake: (() => void) | undefined;
  private closed = false;
  bufferedBytes = 0;
  /** Called when the consumer took items and the buffer fell below lowWaterBytes. */
  onDrain: (() => void) | undefined;

  constructor(readonly lowWaterBytes = 256 * 1024) {}

  push(item: T, bytes = 0): void {
    if (this.closed) return;
    this.items.push({ item, bytes });
    this.bufferedBytes += bytes;
    this.notify();
  }

  /** No more items will come; the consumer still receives what is buffered. */
  close(): void {
    this.closed = true;
    this.notify();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /**
   * Yields items until the queue is closed and empty. Yields KEEPALIVE whenever nothing arrived for
   * keepaliveMs. Throws the signal's reason (as a ConnectError) when the call is aborted.
   */
  async *drain(signal: AbortSignal, keepaliveMs: number): AsyncGenerator<T | typeof KEEPALIVE> {
    for (;;) {
      if (signal.aborted) throw ConnectError.from(signal.reason);
      const next = this.items.shift();
      if (next) {
        this.bufferedBytes -= next.bytes;
        if (this.bufferedBytes < this.lowWaterBytes) this.onDrain?.();
        yield next.item;
        continue;
      }
      if (this.closed) return;
      const timedOut = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => finish(true), keepaliveMs);
        const onAbort = () => finish(false);
        const finish = (timeout: boolean) => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          this.wake = undefined;
          resolve(timeout);
        };
        this.wake = () => finish(false);
        signal.addEventListener('abort', onAbort, { once: true });
      });
      if (timedOut) yield KEEPALIVE;
    }
  }
}

/** Keepalive interval from the `Keepalive-Ping-Interval` header (seconds), default 90 s like E2B. */
export function keepaliveIntervalMs(header: string | null | undefined): number {
  const seconds = Number(header);
  if (!header || !Number.isFinite(seconds) || seconds <= 0) return 90_000;
  return Math.min(Math.max(seconds, 1), 3600) * 1000;
}
