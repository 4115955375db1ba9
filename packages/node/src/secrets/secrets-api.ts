// What the `/secrets` routes and the egress proxy use: the node's store alone, or (in a cluster) the shared
// repository with the store as its local copy (composition/shared-secrets.ts). Same answers either way.
import type { SecretCursor, SecretInfo, SecretStore } from './secret-store.js';

export interface Secrets {
  list(limit: number, after?: SecretCursor): Promise<{ items: SecretInfo[]; next?: SecretCursor }>;
  /** By id (`sec_…`) or name. */
  get(ref: string): Promise<SecretInfo | undefined>;
  /** 'exists' when the name is taken, 'full' when `max` secrets exist. */
  create(
    name: string,
    value: string,
    metadata: Record<string, string>,
    max: number,
  ): Promise<SecretInfo | 'exists' | 'full'>;
  /** Undefined when there is no such secret. */
  update(ref: string, value: string, metadata?: Record<string, string>): Promise<SecretInfo | undefined>;
  delete(ref: string): Promise<boolean>;
  /** The current value of the secret named `name`, for the egress proxy (synchronous: its local copy). */
  valueOf(name: string): string | undefined;
  start(): void;
  stop(): void;
}

/** A node alone: state.db is the only copy. */
export function localSecrets(store: SecretStore): Secrets {
  return {
    list: async (limit, after) => store.list(limit, after),
    get: async (ref) => store.get(ref),
    create: async (name, value, metadata, max) => {
      if (store.count() >= max) return 'full';
      return store.create(name, value, metadata) ?? 'exists';
    },
    update: async (ref, value, metadata) => store.update(ref, value, metadata),
    delete: async (ref) => store.delete(ref),
    valueOf: (name) => store.valueOf(name),
    start: () => {},
    stop: () => {},
  };
}

/** The names of every secret (a page at a time: at most 1,000 secrets, so a few pages). */
export async function secretNames(secrets: Pick<Secrets, 'list'>): Promise<Set<string>> {
  const names = new Set<string>();
  let after: SecretCursor | undefined;
  do {
    const page = await secrets.list(100, after);
    for (const s of page.items) names.add(s.name);
    after = page.next;
  } while (after !== undefined);
  return names;
}
