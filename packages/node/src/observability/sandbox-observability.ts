// Wires per-sandbox metrics and logs to the orchestrator and the runtime (what the routes read; see server.ts).
import { join } from 'node:path';
import type { Registry } from 'prom-client';
import type { Logger } from '../util/log.js';
import type { StateDb } from '../state/db.js';
import type { LifecycleEvent, Orchestrator } from '../orchestrator/orchestrator.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import { Cgroups, detectCgroupLayout, readCgroupUsage } from '../runtime/drivers/container/cgroups.js';
import { readMounts } from '../runtime/drivers/container/mountinfo.js';
import type { SandboxLogsView, SandboxMetricsView } from './views.js';
import { SandboxLogStore } from './sandbox-log-store.js';
import { SandboxMetricsSampler } from './sandbox-metrics.js';
import { QgroupDiskReader } from './sandbox-disk.js';
import { fetchEnvdLog, parseEnvdLog } from './envd-log.js';

/** Lifecycle lines kept per sandbox. */
const MAX_LIFECYCLE_LINES = 1000;
/** Tail of envd's log read per logs request. */
const ENVD_LOG_TAIL_BYTES = 1024 * 1024;
const ENVD_LOG_TIMEOUT_MS = 2000;

export interface SandboxObservabilityOptions {
  db: StateDb;
  /** The runtime's cgroup parent and sandbox dir (`ContainerDriver.cgroupParent`, `.sandboxesDir`). */
  cgroupParent: string;
  sandboxesDir: string;
  containerIdOf: (record: SandboxRecord) => string;
  envdPort: number;
  envdToken: (sandboxId: string) => string;
  intervalMs: number;
  maxSamples: number;
  logRetentionMs: number;
  registry: Registry;
  logger: Logger;
}

export class SandboxObservability {
  readonly logs: SandboxLogStore;
  private sampler: SandboxMetricsSampler | undefined;
  private orchestrator: Orchestrator | undefined;

  constructor(private readonly opts: SandboxObservabilityOptions) {
    this.logs = new SandboxLogStore(opts.db, {
      maxPerSandbox: MAX_LIFECYCLE_LINES,
      retentionMs: opts.logRetentionMs,
    });
  }

  /** The orchestrator's `onLifecycle`: records the event; a sandbox that is gone loses its samples. */
  readonly onLifecycle = (e: LifecycleEvent): void => {
    this.logs.append(e.sandboxId, {
      level: e.level,
      logger: 'lifecycle',
      message: e.message,
      fields: { event: e.event, ...e.fields },
    });
    if (e.event === 'killed' || e.event === 'lost') {
      this.logs.ended(e.sandboxId);
      this.sampler?.forget(e.sandboxId);
      this.logs.prune();
    }
  };

  /** After `orchestrator.init()`: expires the logs of sandboxes gone while the node was down, starts sampling. */
  async start(orchestrator: Orchestrator): Promise<void> {
    this.orchestrator = orchestrator;
    this.logs.endAllExcept(new Set(orchestrator.all().map((r) => r.id)));
    this.logs.prune();
    const cgroups = new Cgroups(detectCgroupLayout(await readMounts()), this.opts.cgroupParent);
    const disk = await QgroupDiskReader.open(this.opts.sandboxesDir);
    if (!disk.available) {
      this.opts.logger.info(
        'sandbox disk metrics unavailable (no btrfs quota groups): diskUsed is reported as 0',
      );
    }
    this.sampler = new SandboxMetricsSampler({
      intervalMs: this.opts.intervalMs,
      maxSamples: this.opts.maxSamples,
      targets: () =>
        orchestrator
          .all()
          .filter((r) => r.state === 'running' && r.runtime)
          .map((r) => {
            const containerId = this.opts.containerIdOf(r);
            return {
              sandboxId: r.id,
              containerId,
              diskDir: join(this.opts.sandboxesDir, containerId),
              cpuCount: r.resources.cpuCount,
              memoryMB: r.resources.memoryMB,
              diskSizeMB: r.resources.diskSizeMB,
              startedAtMs: Date.parse(r.createdAt),
            };
          }),
      known: () => new Set(orchestrator.all().map((r) => r.id)),
      readUsage: (id) => readCgroupUsage(cgroups, id),
      readDisk: (dir) => disk.usage(dir),
      forgetDisk: (dir) => disk.forget(dir),
      registry: this.opts.registry,
      onError: (sandboxId, err) => this.opts.logger.warn({ err, sandboxId }, 'sandbox metrics sample failed'),
    });
    this.sampler.start();
  }

  async stop(): Promise<void> {
    await this.sampler?.stop();
  }

  metricsRoutes(): SandboxMetricsView {
    return {
      samples: (id, startMs, endMs) => this.sampler?.samples(id, startMs, endMs),
      latest: (id) => this.sampler?.latest(id),
      knows: (id) => this.orchestrator?.find(id) !== undefined,
    };
  }

  logRoutes(): SandboxLogsView {
    return {
      find: (id) => this.orchestrator?.find(id),
      lifecycle: (id) => this.logs.list(id),
      hasLifecycle: (id) => this.logs.has(id),
      envdLog: async (r) => {
        try {
          const { text, truncated } = await fetchEnvdLog({
            host: r.runtime!.hostInteractionIp,
            port: this.opts.envdPort,
            ...(r.secure ? { accessToken: this.opts.envdToken(r.id) } : {}),
            maxBytes: ENVD_LOG_TAIL_BYTES,
            timeoutMs: ENVD_LOG_TIMEOUT_MS,
          });
          return parseEnvdLog(text, Date.parse(r.createdAt), truncated);
        } catch (err) {
          this.opts.logger.debug({ err, sandboxId: r.id }, 'envd log not readable');
          return [];
        }
      },
    };
  }
}
