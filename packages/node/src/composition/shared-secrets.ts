// `/secrets` in a cluster (docs/networking.md#secrets-in-a-cluster): the shared repository holds every secret,
// sealed under the cluster's secrets key; state.db keeps a copy that every call and a timer refresh, so the egress
// proxy reads values synchronously on any node and a sandbox that moves finds its secrets on the new node. Here
// because it joins secrets/ (the store) and snapshot/ (the repository), which do not import each other.
import type { Secrets } from '../secrets/secrets-api.js';
import {
  secretInfoOf,
  type SealedSecret,
  type SecretCursor,
  type SecretInfo,
  type SecretStore,
} from '../secrets/secret-store.js';
import type { SnapshotRepository } from '../snapshot/repository.js';
import type { Logger } from '../util/log.js';

/** How often a node copies the repository's secrets when nothing asked it to (a write through a gateway does). */
export const SECRETS_SYNC_INTERVAL_MS = 2_000;

export class SharedSecrets implements Secrets {
  private chain: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: SecretStore,
    private readonly repository: SnapshotRepository,
    private readonly log: Logger,
    private readonly intervalMs = SECRETS_SYNC_INTERVAL_MS,
  ) {}

  start(): void {
    const tick = () => {
      void this.serial(() => this.sync()).catch((err: unknown) =>
        this.log.warn({ err: (err as Error).message }, 'secrets not copied from the repository'),
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
  list(limit: number, after?: SecretCursor): Promise<{ items: SecretInfo[]; next?: SecretCursor }> {
    return this.read(() => this.store.list(limit, after));
  }

  get(ref: string): Promise<SecretInfo | undefined> {
    return this.read(() => this.store.get(ref));
  }

  create(
    name: string,
    value: string,
    metadata: Record<string, string>,
    max: number,
  ): Promise<SecretInfo | 'exists' | 'full'> {
    return this.serial(async () => {
      await this.sync();
      const record = this.store.newRecord(name, value, metadata);
      const made = await this.repository.createSecret(record, max);
      if (made === 'name-taken') return 'exists';
      if (made === 'full') return 'full';
      this.store.upsertShared(record);
      return secretInfoOf(record);
    });
  }

  update(ref: string, value: string, metadata?: Record<string, string>): Promise<SecretInfo | undefined> {
    return this.serial(async () => {
      await this.sync();
      const id = this.store.sealedOf(ref)?.id;
      if (!id) return undefined;
      // Sealed again under the repository lock from the version found there, so two nodes never seal one version.
      const next = await this.repository.updateSecret(id, (cur) =>
        this.store.nextVersion(cur, value, metadata),
      );
      if (!next) {
        this.store.remove(id);
        return undefined;
      }
      this.store.upsertShared(next);
      return secretInfoOf(next);
    });
  }

  delete(ref: string): Promise<boolean> {
    return this.serial(async () => {
      await this.sync();
      const id = this.store.sealedOf(ref)?.id;
      if (!id) return false;
      const deleted = await this.repository.deleteSecret(id);
      this.store.remove(id);
      return deleted;
    });
  }

  valueOf(name: string): string | undefined {
    return this.store.valueOf(name);
  }

  private read<T>(fn: () => T): Promise<T> {
    return this.serial(async () => {
      try {
        await this.sync();
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'secrets served from the last copy');
      }
      return fn();
    });
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => {});
    return run;
  }

  /** Makes state.db match the repository; a document that does not verify leaves its local copy alone. */
  private async sync(): Promise<void> {
    for (const s of this.store.unshared()) await this.publish(s);
    const { secrets, unreadable } = await this.repository.readSecrets();
    const present = new Set([...secrets.map((s) => s.id), ...unreadable]);
    for (const s of secrets) this.store.upsertShared(s);
    for (const id of this.store.sharedIds()) if (!present.has(id)) this.store.remove(id);
  }

  /** A secret made before this node shared a repository: published once (over any limit), unless its name is taken. */
  private async publish(s: SealedSecret): Promise<void> {
    const made = await this.repository.createSecret(s, Number.MAX_SAFE_INTEGER);
    if (made === 'created') {
      this.store.upsertShared(s);
      this.log.info({ secret: s.name }, 'secret published to the repository');
    } else {
      this.store.remove(s.id);
      this.log.warn(
        { secret: s.name },
        "a node-local secret's name is taken in the repository: the repository's secret replaces it",
      );
    }
  }
}
