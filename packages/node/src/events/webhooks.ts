// The webhook subsystem as the node composes it: the store and the delivery worker from [events.webhooks]
// (docs/events.md#webhooks); server.ts registers the routes over `store` and `policy`.
import type { AenvConfig } from '@aenv/config';
import type { SnapshotRepository } from '../snapshot/repository.js';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import { localDefinitions, SharedDefinitions } from './webhook-definitions.js';
import { WebhookDispatcher } from './webhook-dispatcher.js';
import { WebhookStore } from './webhook-store.js';
import type { TargetPolicy } from './webhook-target.js';

/** `shared`: the repository the cluster's nodes share, which then holds the definitions (docs/events.md#in-a-cluster). */
export function startWebhooks(db: StateDb, config: AenvConfig, logger: Logger, shared?: SnapshotRepository) {
  const c = config.events.webhooks;
  const policy: TargetPolicy = {
    allowLoopback: c.allow_loopback,
    apiPort: Number(config.api_addr.slice(config.api_addr.lastIndexOf(':') + 1)),
    internalCidrs: [config.network.internal.host_interaction_cidr, config.network.internal.veth_cidr],
  };
  const store = new WebhookStore(db, c.history_per_webhook);
  const dispatcher = new WebhookDispatcher(store, {
    maxAttempts: c.max_attempts,
    backoff: { initialMs: c.initial_backoff_ms, maxMs: c.max_backoff_ms },
    timeoutMs: c.timeout_ms,
    policy,
    logger,
  });
  const definitions = shared ? new SharedDefinitions(store, shared, logger) : localDefinitions(store);
  const pending = store.pendingCount();
  if (pending) logger.info({ pending }, 'webhook deliveries left from the last run are resumed');
  return {
    enqueue: dispatcher.enqueue,
    start: () => {
      definitions.start();
      dispatcher.start();
    },
    stop: () => {
      definitions.stop();
      return dispatcher.stop();
    },
    store,
    definitions,
    policy,
    maxWebhooks: c.max_webhooks,
  };
}
