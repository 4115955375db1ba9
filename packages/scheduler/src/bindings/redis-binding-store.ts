import { Redis, type RedisOptions } from 'ioredis';
import type { NodeRef } from '../registry/node-registry.js';
import { normalizeSandboxIds, type BindingStore } from './binding-store.js';
import { RECONCILE_NODE_LUA, RECORD_BINDING_LUA } from './redis-scripts.js';

/** The reference's key namespace; a scheduler or gateway of the reference reads the same keys. */
export const DEFAULT_KEY_PREFIX = 'agentenv:scheduler:bindings';
/** Every Redis call gives up after this (the reference's operation timeout). */
export const REDIS_OPERATION_TIMEOUT_MS = 2000;
/** The per-node index set outlives its bindings; it is refreshed on every write for that node. */
const NODE_INDEX_TTL_MS = 60 * 60 * 1000;

interface ScriptCommands {
  aenvRecordBinding(...args: (string | number)[]): Promise<unknown>;
  aenvReconcileNode(...args: (string | number)[]): Promise<unknown>;
}

export interface RedisBindingStoreOptions {
  /** `host:port` or a redis:// / rediss:// URL (a path selects the database). */
  address: string;
  bindingTtlMs: number;
  keyPrefix?: string;
  operationTimeoutMs?: number;
}

function clientOptions(address: string, timeoutMs: number): [string | undefined, RedisOptions] {
  const common: RedisOptions = {
    lazyConnect: true,
    commandTimeout: timeoutMs,
    connectTimeout: timeoutMs,
    // A failed call is answered Unavailable at once; the connection keeps reconnecting in the background.
    maxRetriesPerRequest: 1,
    enableReadyCheck: true,
  };
  if (address.includes('://')) return [address, common];
  const i = address.lastIndexOf(':');
  const host = address.slice(0, i).replace(/^\[(.*)\]$/, '$1');
  return [undefined, { ...common, host, port: Number(address.slice(i + 1)) }];
}

/** Parses a stored value; anything but a node with an id and an endpoint counts as no binding. */
export function parseBindingValue(raw: string | null): NodeRef | undefined {
  if (raw === null) return undefined;
  try {
    const v = JSON.parse(raw) as { node?: { node_id?: unknown; endpoint?: unknown } };
    const id = typeof v.node?.node_id === 'string' ? v.node.node_id.trim() : '';
    const endpoint = typeof v.node?.endpoint === 'string' ? v.node.endpoint.trim() : '';
    return id !== '' && endpoint !== '' ? { id, endpoint } : undefined;
  } catch {
    return undefined;
  }
}

export function bindingValue(node: NodeRef): string {
  return JSON.stringify({ node: { node_id: node.id, endpoint: node.endpoint } });
}

/** Bindings in Redis (docs/cluster.md#redis-layout): they survive a scheduler restart. */
export class RedisBindingStore implements BindingStore {
  readonly kind = 'redis';
  readonly keyPrefix: string;
  readonly #redis: Redis & ScriptCommands;
  readonly #ttlMs: number;

  private constructor(redis: Redis, opts: RedisBindingStoreOptions) {
    this.#redis = redis as Redis & ScriptCommands;
    this.#ttlMs = opts.bindingTtlMs;
    this.keyPrefix = opts.keyPrefix ?? DEFAULT_KEY_PREFIX;
    redis.defineCommand('aenvRecordBinding', { numberOfKeys: 2, lua: RECORD_BINDING_LUA });
    redis.defineCommand('aenvReconcileNode', { numberOfKeys: 1, lua: RECONCILE_NODE_LUA });
  }

  /** Connects and pings; throws when Redis cannot be reached within the operation timeout. */
  static async connect(
    opts: RedisBindingStoreOptions,
    onError?: (e: Error) => void,
  ): Promise<RedisBindingStore> {
    const timeoutMs = opts.operationTimeoutMs ?? REDIS_OPERATION_TIMEOUT_MS;
    const [url, options] = clientOptions(opts.address, timeoutMs);
    const redis = url ? new Redis(url, options) : new Redis(options);
    // Without a listener ioredis prints every reconnect failure itself.
    redis.on('error', (e: Error) => onError?.(e));
    try {
      await redis.connect();
      await redis.ping();
    } catch (e) {
      redis.disconnect();
      throw new Error(`cannot reach Redis at ${opts.address}: ${(e as Error).message}`);
    }
    return new RedisBindingStore(redis, opts);
  }

  async get(sandboxId: string): Promise<NodeRef | undefined> {
    const id = sandboxId.trim();
    if (id === '') return undefined;
    return parseBindingValue(await this.#redis.get(this.#bindingKey(id)));
  }

  async record(sandboxId: string, node: NodeRef): Promise<void> {
    const id = sandboxId.trim();
    if (id === '' || node.id.trim() === '' || node.endpoint.trim() === '') return;
    await this.#redis.aenvRecordBinding(
      this.#bindingKey(id),
      this.#nodeKey(node.id),
      bindingValue(node),
      node.id,
      id,
      this.#ttlMs,
      this.keyPrefix,
      NODE_INDEX_TTL_MS,
    );
  }

  async reconcileNode(node: NodeRef, sandboxIds: readonly string[]): Promise<void> {
    if (node.id.trim() === '') return;
    const roster = normalizeSandboxIds(sandboxIds);
    const value = roster.length > 0 ? bindingValue(node) : '';
    await this.#redis.aenvReconcileNode(
      this.#nodeKey(node.id),
      node.id,
      value,
      this.#ttlMs,
      this.keyPrefix,
      NODE_INDEX_TTL_MS,
      ...roster,
    );
  }

  async close(): Promise<void> {
    try {
      await this.#redis.quit();
    } catch {
      this.#redis.disconnect();
    }
  }

  #bindingKey(sandboxId: string): string {
    return `${this.keyPrefix}:sandbox:${sandboxId}`;
  }

  #nodeKey(nodeId: string): string {
    return `${this.keyPrefix}:node:${nodeId}`;
  }
}
