import { createSchedulerClient, type SchedulerClient } from '@aenv/protocol';
import type { NodeIdentity } from '../identity/index.js';
import type { HostMetrics } from '../observability/host-metrics.js';
import type { LifecycleEvent, SandboxCountersView } from '../orchestrator/orchestrator.js';
import type { Logger } from '../util/log.js';
import { Backoff } from '../util/backoff.js';
import { nodeSnapshot, type HeartbeatInit } from './node-figures.js';
import type { ReporterSettings } from './reporter-settings.js';
import { schedulerEvent, SandboxEventQueue, type SandboxResources } from './sandbox-events.js';

/** Events kept while the scheduler is unreachable; older ones are dropped (the roster corrects them). */
const EVENT_QUEUE_CAPACITY = 10_000;
const EVENT_BATCH = 500;
/** The longest wait between two attempts while the scheduler is down, whatever the interval. */
const MAX_BACKOFF_MS = 15_000;
const CALL_TIMEOUT_MS = 5_000;

export type ReporterClient = Pick<SchedulerClient, 'heartbeat' | 'reportSandboxEvent' | 'unregisterNode'>;

export interface HeartbeatReporterDeps {
  identity: NodeIdentity;
  counters: () => SandboxCountersView;
  host: { sample(): Promise<HostMetrics> };
  /** Every sandbox the node holds (running, starting, paused): the heartbeat roster. */
  sandboxes: () => { id: string; resources: SandboxResources }[];
  /**
   * Sandboxes the node is taking over from the shared repository: in the roster too, since the scheduler drops
   * a node's bindings its roster does not name, and the gateway bound the sandbox here before asking.
   */
  takingOver?: () => readonly string[];
  /** The resources of one sandbox the node holds now. */
  resourcesOf: (sandboxId: string) => SandboxResources | undefined;
  logger: Logger;
  /** Default: a gRPC client of `settings.endpoint`. */
  client?: ReporterClient;
  now?: () => number;
  /** For the backoff's spread; default Math.random. */
  jitter?: () => number;
}

export interface HeartbeatReporter {
  /** Queues the scheduler event of a lifecycle event; never waits and never throws. */
  onLifecycle(e: LifecycleEvent): void;
  /**
   * The node is leaving (shutting down, or draining): from now on every heartbeat says LINGERING, and one is sent
   * at once, so it is seen leaving while it pauses.
   */
  drain(): Promise<void>;
  /**
   * Sends a heartbeat built from now on (after the one in flight, whose roster and status may be older) and
   * resolves once the scheduler took it or could not be reached; never throws. A drain waits for it after
   * handing a sandbox over, so the scheduler no longer binds that sandbox here (docs/cluster.md#draining).
   */
  report(): Promise<void>;
  /** Stops beating, sends what events are queued, then UnregisterNode (best effort). */
  close(): Promise<void>;
}

/**
 * The node's side of scheduler.v1 (docs/cluster.md#node-heartbeats): a Heartbeat at once (that registers
 * the node) and every interval after, ReportSandboxEvent batches after each heartbeat the scheduler took
 * and as events come while it is reachable. While it is not, attempts back off (interval doubling up to
 * 15 s) and the outage is logged once, when it starts and when it ends.
 */
export function startHeartbeatReporter(
  settings: ReporterSettings,
  deps: HeartbeatReporterDeps,
): HeartbeatReporter {
  const client = deps.client ?? createSchedulerClient(settings.endpoint, { timeoutMs: CALL_TIMEOUT_MS });
  const now = deps.now ?? Date.now;
  const log = deps.logger;
  const id = deps.identity;
  const backoff = new Backoff(
    settings.intervalMs,
    Math.max(settings.intervalMs, MAX_BACKOFF_MS),
    deps.jitter,
  );
  const queue = new SandboxEventQueue(EVENT_QUEUE_CAPACITY);
  // Resources of sandboxes seen, so a DELETE (sent after the record is gone) still carries them.
  const resources = new Map<string, SandboxResources>();
  const abort = new AbortController();
  let reachable: boolean | undefined;
  let lingering = false;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let beating: Promise<boolean> | undefined;
  let fresh: Promise<boolean> | undefined;
  let flushing: Promise<void> | undefined;

  const down = (err: unknown, what: string) => {
    if (reachable !== false) {
      log.warn(
        { err: (err as Error).message, endpoint: settings.endpoint, call: what },
        'scheduler unreachable; heartbeats and events are retried with backoff until it answers',
      );
    }
    reachable = false;
  };
  const up = () => {
    if (reachable === false)
      log.info({ endpoint: settings.endpoint }, 'scheduler reachable again; node re-registered');
    else if (reachable === undefined)
      log.info({ endpoint: settings.endpoint, node: id.nodeId }, 'registered with the scheduler');
    reachable = true;
  };

  const request = async (): Promise<HeartbeatInit> => {
    const roster = deps.sandboxes();
    // Kept to the roster, so a sandbox that went without an event (a failed create) is not remembered forever.
    resources.clear();
    for (const s of roster) resources.set(s.id, s.resources);
    const host = await deps.host.sample();
    return {
      nodeId: id.nodeId,
      clusterId: id.clusterId,
      serviceInstanceId: id.serviceInstanceId,
      version: id.version,
      commit: id.commit,
      machineInfo: { ...id.machineInfo, cpuConfigJson: '' },
      snapshot: nodeSnapshot(deps.counters(), host, { lingering, nowMs: now() }),
      sandboxIds: [
        ...roster.map((s) => s.id),
        ...(deps.takingOver?.() ?? []).filter((sandboxId) => !resources.has(sandboxId)),
      ],
    };
  };

  const beatOnce = async (): Promise<boolean> => {
    try {
      await client.heartbeat(await request(), { signal: abort.signal });
    } catch (err) {
      if (!stopped) down(err, 'Heartbeat');
      return false;
    }
    backoff.succeed();
    up();
    return true;
  };

  const sendEvents = async (): Promise<void> => {
    while (queue.size > 0 && reachable && !abort.signal.aborted) {
      const dropped = queue.takeDropped();
      if (dropped)
        log.warn({ dropped }, 'sandbox events dropped while the scheduler was unreachable (queue full)');
      const batch = queue.take(EVENT_BATCH);
      try {
        await client.reportSandboxEvent(
          {
            nodeId: id.nodeId,
            clusterId: id.clusterId,
            serviceInstanceId: id.serviceInstanceId,
            events: batch,
          },
          { signal: abort.signal },
        );
      } catch (err) {
        queue.putBack(batch);
        if (!stopped) down(err, 'ReportSandboxEvent');
        return;
      }
    }
  };
  const flush = (): Promise<void> => {
    flushing ??= sendEvents().finally(() => (flushing = undefined));
    return flushing;
  };

  const beat = async (): Promise<boolean> => {
    beating ??= beatOnce().finally(() => (beating = undefined));
    const ok = await beating;
    if (ok) await flush();
    return ok;
  };

  /**
   * A heartbeat whose request is built after this call. Joining the one in flight is not enough: its request
   * was read before whatever the caller just changed (a drain's LINGERING, a roster without a handed-over
   * sandbox). Callers that come while it waits share it.
   */
  const beatFresh = (): Promise<boolean> => {
    fresh ??= (async () => {
      await beating;
      fresh = undefined;
      return beat();
    })();
    return fresh;
  };

  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      void beat().then((ok) => {
        if (ok) return schedule(settings.intervalMs);
        const delayMs = backoff.fail();
        log.debug({ failures: backoff.failing, delayMs }, 'heartbeat failed; retrying');
        schedule(delayMs);
      });
    }, delayMs);
    timer.unref();
  };
  schedule(0);

  return {
    onLifecycle(e) {
      try {
        const known = deps.resourcesOf(e.sandboxId) ?? resources.get(e.sandboxId);
        if (e.event === 'killed' || e.event === 'lost') resources.delete(e.sandboxId);
        else if (known) resources.set(e.sandboxId, known);
        const event = schedulerEvent(e, known);
        if (!event || stopped) return;
        queue.push(event);
        if (reachable) void flush();
      } catch (err) {
        log.warn({ err, sandboxId: e.sandboxId }, 'could not queue a sandbox event for the scheduler');
      }
    },
    async drain() {
      lingering = true;
      // An unreachable scheduler would only make the shutdown (or the drain) wait for the call's timeout.
      if (stopped || reachable === false) return;
      await beatFresh();
    },
    async report() {
      if (stopped || reachable === false) return;
      await beatFresh();
    },
    async close() {
      if (stopped) return;
      stopped = true;
      clearTimeout(timer);
      await beating;
      await flushing;
      if (reachable) await flush();
      abort.abort();
      if (queue.size > 0)
        log.warn({ events: queue.size }, 'sandbox events not sent to the scheduler at shutdown');
      try {
        await client.unregisterNode({ nodeId: id.nodeId, serviceInstanceId: id.serviceInstanceId });
        log.info({ node: id.nodeId }, 'unregistered from the scheduler');
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'could not unregister from the scheduler');
      }
    },
  };
}
