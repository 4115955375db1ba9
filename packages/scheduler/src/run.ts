// Assembles a scheduler process from its config: binding store, discovery, registry, strategy, the gRPC
// endpoint and the metrics endpoint (docs/cluster.md#the-scheduler).
import type { DescService } from '@bufbuild/protobuf';
import type { ConnectRouter, ServiceImpl } from '@connectrpc/connect';
import { Scheduler } from '@aenv/protocol';
import { ArtifactIndex } from './artifacts/artifact-index.js';
import type { BindingStore } from './bindings/binding-store.js';
import { MemoryBindingStore } from './bindings/memory-binding-store.js';
import { RedisBindingStore } from './bindings/redis-binding-store.js';
import { resolveStrategy, type ClusterConfig } from './config/cluster-config.js';
import { parseListenAddress } from './config/listen-address.js';
import { KubernetesDiscovery } from './discovery/kubernetes-discovery.js';
import { SandboxEventLog } from './events/sandbox-event-log.js';
import type { Logger } from './log.js';
import { createStrategy } from './placement/strategies.js';
import { NodeRegistry } from './registry/node-registry.js';
import { startGrpcServer } from './server/grpc-server.js';
import { SchedulerMetrics } from './server/metrics.js';
import { startMetricsServer } from './server/metrics-server.js';
import { createSchedulerService, lookupNode } from './service/scheduler-service.js';

/** Sandbox events kept per node, and nodes whose events are kept (docs/cluster.md#sandbox-events). */
const EVENTS_PER_NODE = 1000;
const EVENT_NODES = 10_000;

export interface RunningScheduler {
  readonly grpcPort: number;
  readonly metricsPort: number;
  readonly store: BindingStore;
  stop(): Promise<void>;
}

async function openStore(config: ClusterConfig, log: Logger): Promise<BindingStore> {
  const { redisAddr, bindingTtlMs } = config.scheduler;
  if (redisAddr.trim() === '') return new MemoryBindingStore(bindingTtlMs);
  let lastError = '';
  return RedisBindingStore.connect({ address: redisAddr.trim(), bindingTtlMs }, (e) => {
    // One line per distinct failure while Redis is away, not one per reconnect attempt.
    if (e.message !== lastError) log.warn({ err: e.message }, 'redis connection error');
    lastError = e.message;
  });
}

export async function startScheduler(
  config: ClusterConfig,
  opts: { queryOnly: boolean; log: Logger },
): Promise<RunningScheduler> {
  const { log, queryOnly } = opts;
  const s = config.scheduler;
  const grpcAddress = parseListenAddress(s.grpcListenAddr);
  const metricsAddress = parseListenAddress(s.metricsListenAddr);
  const store = await openStore(config, log);
  const cleanups: (() => Promise<void>)[] = [() => store.close()];
  try {
    let impl: Partial<ServiceImpl<typeof Scheduler>>;
    let metrics: SchedulerMetrics;
    if (queryOnly) {
      metrics = new SchedulerMetrics();
      impl = { lookupNode: (req) => lookupNode(store, log, req.sandboxId) };
    } else {
      const { strategy: strategyName, fellBack } = resolveStrategy(s.strategy);
      if (fellBack) log.warn({ strategy: s.strategy }, 'unknown scheduler strategy; using round_robin');
      const registry = new NodeRegistry(s.reportTtlMs);
      metrics = new SchedulerMetrics(() => registry.listObserved(''));
      if (s.discovery.mode.trim().toLowerCase() === 'kubernetes') {
        const discovery = new KubernetesDiscovery(
          s.discovery.kubernetes,
          (nodes) => registry.setDiscovered(nodes.active, nodes.lingering),
          log,
        );
        cleanups.push(() => discovery.stop());
        await discovery.start();
      } else {
        registry.setDiscovered(s.nodes, []);
      }
      impl = createSchedulerService({
        registry,
        store,
        strategy: createStrategy(strategyName),
        artifacts: new ArtifactIndex(s.artifactStoreCapacity),
        artifactLookupNodeLimit: s.artifactLookupNodeLimit,
        events: new SandboxEventLog(EVENTS_PER_NODE, EVENT_NODES),
        resourceLimit: s.nodeResourceLimit,
        metrics,
        log,
      });
    }
    const metricsServer = await startMetricsServer(metricsAddress, metrics, log);
    cleanups.unshift(() => metricsServer.close());
    const grpc = await startGrpcServer({
      address: grpcAddress,
      routes: (router: ConnectRouter) => router.service(Scheduler, impl),
      fast: { service: Scheduler, impl: impl as Partial<ServiceImpl<DescService>> },
      metrics,
      log,
    });
    cleanups.unshift(() => grpc.close());
    log.info(
      {
        grpcAddr: s.grpcListenAddr,
        grpcPort: grpc.port,
        metricsPort: metricsServer.port,
        strategy: queryOnly ? undefined : resolveStrategy(s.strategy).strategy,
        bindingStore: store.kind,
        discovery: queryOnly ? undefined : s.discovery.mode || 'static',
        queryOnly,
      },
      'scheduler listening',
    );
    return {
      grpcPort: grpc.port,
      metricsPort: metricsServer.port,
      store,
      stop: async () => {
        for (const cleanup of cleanups) await cleanup().catch(() => {});
      },
    };
  } catch (e) {
    for (const cleanup of cleanups) await cleanup().catch(() => {});
    throw e;
  }
}
