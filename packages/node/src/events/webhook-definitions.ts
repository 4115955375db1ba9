// Where the node's webhook definitions live (docs/events.md#in-a-cluster): only in state.db on a node alone, or in
// the snapshot repository the cluster shares, copied into state.db so that the outbox and the dispatcher work the
// same either way and each node delivers its own events.
import { randomUUID } from 'node:crypto';
import type { SnapshotRepository } from '../snapshot/repository.js';
import type { SharedWebhook } from '../snapshot/shared-webhook.js';
import type { Logger } from '../util/log.js';
import type { Webhook, WebhookStore } from './webhook-store.js';

export type WebhookFields = Omit<Webhook, 'id' | 'createdAt'>;

export interface WebhookDefinitions {
  list(): Promise<Webhook[]>;
  get(id: string): Promise<Webhook | undefined>;
  /** undefined when `max` webhooks exist already. */
  create(w: WebhookFields, max: number): Promise<Webhook | undefined>;
  update(id: string, patch: Partial<WebhookFields>): Promise<Webhook | undefined>;
  delete(id: string): Promise<boolean>;
  start(): void;
  stop(): void;
}

/** A node alone: state.db is the only copy. */
export function localDefinitions(store: WebhookStore): WebhookDefinitions {
  return {
    list: async () => store.list(),
    get: async (id) => store.get(id),
    create: async (w, max) => store.create(w, max),
    update: async (id, patch) => store.update(id, patch),
    delete: async (id) => store.delete(id),
    start: () => {},
    stop: () => {},
  };
}

/** How often a node copies the repository's definitions when nothing asked it to (a write through a gateway does). */
export const SYNC_INTERVAL_MS = 2_000;

/**
 * The repository holds the definitions; every CRUD call and a timer copy them into state.db (`sync`). Calls run one
 * at a time, so a copy never undoes a write made through this node.
 */
export class SharedDefinitions implements WebhookDefinitions {
  private chain: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: WebhookStore,
    private readonly repository: SnapshotRepository,
    private readonly log: Logger,
    private readonly intervalMs = SYNC_INTERVAL_MS,
  ) {}

  start(): void {
    const tick = () => {
      void this.serial(() => this.sync()).catch((err: unknown) =>
        this.log.warn({ err: (err as Error).message }, 'webhook definitions not copied from the repository'),
      );
    };
    tick();
    this.timer = setInterval(tick, this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Reads serve the last copy when the repository cannot be read (the failure is logged). */
  list(): Promise<Webhook[]> {
    return this.serial(async () => {
      await this.syncOrWarn();
      return this.store.list();
    });
  }

  get(id: string): Promise<Webhook | undefined> {
    return this.serial(async () => {
      await this.syncOrWarn();
      return this.store.get(id);
    });
  }

  create(w: WebhookFields, max: number): Promise<Webhook | undefined> {
    return this.serial(async () => {
      await this.sync();
      const def: SharedWebhook = { ...w, id: randomUUID(), createdAt: new Date().toISOString() };
      if (!(await this.repository.createWebhook(def, max))) return undefined;
      this.store.upsertShared(def as Webhook);
      return def as Webhook;
    });
  }

  update(id: string, patch: Partial<WebhookFields>): Promise<Webhook | undefined> {
    return this.serial(async () => {
      await this.sync();
      const next = await this.repository.updateWebhook(id, (cur) => ({ ...cur, ...patch }));
      if (!next) return undefined;
      this.store.upsertShared(next as Webhook);
      return next as Webhook;
    });
  }

  delete(id: string): Promise<boolean> {
    return this.serial(async () => {
      await this.sync();
      const deleted = await this.repository.deleteWebhook(id);
      this.store.delete(id);
      return deleted;
    });
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => {});
    return run;
  }

  private async syncOrWarn(): Promise<void> {
    try {
      await this.sync();
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'webhook definitions served from the last copy');
    }
  }

  /** Makes state.db match the repository; a document that does not verify leaves its local copy alone. */
  private async sync(): Promise<void> {
    for (const w of this.store.unshared()) {
      // Made before this node shared a repository: published once (over any limit), then a shared copy.
      await this.repository.createWebhook(w, Number.MAX_SAFE_INTEGER);
      this.log.info({ webhook: w.id }, 'webhook definition published to the repository');
    }
    const { webhooks, unreadable } = await this.repository.readWebhooks();
    const present = new Set([...webhooks.map((w) => w.id), ...unreadable]);
    for (const w of webhooks) this.store.upsertShared(w as Webhook);
    for (const id of this.store.sharedIds()) if (!present.has(id)) this.store.delete(id);
  }
}
