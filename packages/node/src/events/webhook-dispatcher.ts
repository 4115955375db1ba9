// Delivers the outbox (docs/events.md#delivery-guarantees): every stored event is put in the outbox of each
// subscribed webhook in state.db, and this worker sends due rows in the background, retrying with backoff. A
// lifecycle operation only ever pays for the local insert. A row leaves the outbox only once its attempt is
// recorded, so a restart or a crash re-sends what was in flight: at least once, with the event id to de-duplicate.
import { randomUUID } from 'node:crypto';
import type { Logger } from '../util/log.js';
import { retryDelayMs, type BackoffPolicy } from './backoff.js';
import type { SandboxEvent } from './sandbox-events.js';
import { sendDelivery } from './webhook-sender.js';
import type { TargetPolicy } from './webhook-target.js';
import type { DeliveryAttempt, PendingDelivery, WebhookStore } from './webhook-store.js';

export interface DispatcherOptions {
  maxAttempts: number;
  backoff: BackoffPolicy;
  timeoutMs: number;
  policy: TargetPolicy;
  logger: Logger;
  /** Attempts in flight at once, over all webhooks. */
  concurrency?: number;
  random?: () => number;
}

/** Longest sleep of the worker between two looks at the outbox. */
const MAX_IDLE_MS = 60_000;

export class WebhookDispatcher {
  private readonly inFlight = new Map<number, Promise<void>>();
  private readonly abort = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private started = false;

  constructor(
    private readonly store: WebhookStore,
    private readonly o: DispatcherOptions,
  ) {}

  /** Starts delivering, the outbox left by an earlier run first. */
  start(): void {
    this.started = true;
    this.kick();
  }

  /** The event store's `onEvent`: puts the event in the outbox (synchronously, in the caller's transaction). */
  readonly enqueue = (e: SandboxEvent): void => {
    let n = 0;
    try {
      n = this.store.enqueue(e, JSON.stringify(e), Date.now());
    } catch (err) {
      // The event itself stays stored (and served by the events API); only its deliveries are lost.
      this.o.logger.error({ err, event: e.id }, 'webhook deliveries of an event could not be queued');
    }
    if (n) this.kick();
  };

  /** Stops: attempts in flight are cut and stay in the outbox for the next start. */
  async stop(): Promise<void> {
    this.started = false;
    clearTimeout(this.timer);
    this.abort.abort();
    await Promise.all(this.inFlight.values());
  }

  private kick(): void {
    if (!this.started) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.tick(), 0);
    this.timer.unref();
  }

  private tick(): void {
    if (!this.started) return;
    const busy = new Set(this.inFlight.keys());
    const room = (this.o.concurrency ?? 8) - busy.size;
    const now = Date.now();
    if (room > 0) {
      for (const p of this.store.due(now, room, busy)) {
        const run = this.attempt(p)
          .catch((e: unknown) =>
            this.o.logger.error({ err: e, webhook: p.webhookId }, 'webhook delivery failed'),
          )
          .finally(() => {
            this.inFlight.delete(p.seq);
            this.kick();
          });
        this.inFlight.set(p.seq, run);
      }
    }
    const next = this.store.nextDueAt(new Set(this.inFlight.keys()));
    if (next === undefined) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.tick(), Math.min(Math.max(next - Date.now(), 0), MAX_IDLE_MS));
    this.timer.unref();
  }

  private async attempt(p: PendingDelivery): Promise<void> {
    const w = this.store.get(p.webhookId);
    if (!w) return; // deleted: its outbox rows went with it
    if (!w.enabled || !(w.events as string[]).includes(p.eventType)) {
      this.store.settle(p, this.canceled(p, w.url, w.enabled ? 'unsubscribed' : 'disabled'), undefined);
      return;
    }
    const a = await sendDelivery(w, p, {
      timeoutMs: this.o.timeoutMs,
      policy: this.o.policy,
      signal: this.abort.signal,
    });
    if (!a) return; // shutting down: the row stays for the next start
    const made = p.attempts + 1;
    const retryAt =
      a.status === 'success' || made >= this.o.maxAttempts
        ? undefined
        : Date.now() + retryDelayMs(made, this.o.backoff, this.o.random);
    this.store.settle(p, a, retryAt);
    if (a.status === 'failed')
      // The URL may carry a token in its path or query: the log names the webhook, never the URL or secret.
      this.o.logger.warn(
        {
          webhook: w.id,
          event: p.eventId,
          attempt: made,
          errorClass: a.errorClass,
          status: a.responseHttpStatusCode,
          retryInMs: retryAt === undefined ? undefined : retryAt - Date.now(),
        },
        retryAt === undefined ? 'webhook delivery given up' : 'webhook delivery failed; will retry',
      );
  }

  private canceled(p: PendingDelivery, url: string, why: string): DeliveryAttempt {
    return {
      id: randomUUID(),
      webhookId: p.webhookId,
      eventId: p.eventId,
      sandboxId: p.sandboxId,
      eventType: p.eventType,
      status: 'failed',
      durationMs: 0,
      requestBody: p.body,
      requestHeaders: '{}',
      requestUrl: url,
      responseBody: null,
      responseHeaders: null,
      responseHttpStatusCode: null,
      errorClass: 'canceled',
      errorMessage: `not sent: the webhook was ${why} before this delivery`,
      timestamp: new Date().toISOString(),
    };
  }
}
