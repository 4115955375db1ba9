import { randomUUID } from 'node:crypto';
import type { Logger } from '../util/log.js';
import type { ImageService } from '../image/index.js';
import type { NetworkManager } from '../network/index.js';
import type { EgressPolicy, NetworkSlot } from '../network/types.js';
import type { RuntimeDriver, ToolsMount } from '../runtime/driver.js';
import type { LaunchSource, RecoveryOutcome, SandboxBackend, StartResult } from '../orchestrator/backend.js';
import type { PausedState, SandboxRecord } from '../orchestrator/types.js';
import type { SnapshotRecord } from '../snapshot/index.js';
import { initEnvd, waitForEnvd } from '../envd/client.js';

export interface ContainerBackendOptions {
  runtime: RuntimeDriver;
  network: NetworkManager;
  images: ImageService;
  tools: ToolsMount;
  envdPort: number;
  envdPollMs: number;
  envdInitTimeoutMs: number;
  pidsLimit: number;
  /** envd access token for a secure sandbox. */
  envdToken(sandboxId: string): string;
  logger: Logger;
}

/** What this backend keeps in `SandboxRecord.backend`. */
interface BackendState {
  imageRef: string;
  manifestDigest: string;
  lowerDirs: string[];
  toolsVersion: string;
  envdEnv: Record<string, string>;
}

const leaseHolder = (id: string) => `sandbox:${id}`;

/**
 * The container backend: a sandbox = a netns slot + an overlay over cached image layers + a runc container whose
 * init runs envd from the tools mount. Each step is undone in reverse when a later one fails.
 */
export class ContainerBackend implements SandboxBackend {
  constructor(private readonly opts: ContainerBackendOptions) {}

  private get log(): Logger {
    return this.opts.logger;
  }

  async start(record: SandboxRecord, source: LaunchSource, policy: EgressPolicy): Promise<StartResult> {
    const snapshot = source.record as SnapshotRecord;
    const committed = snapshot.committed;
    if (!committed?.baseImage) {
      throw new Error(`template ${source.templateId} has no base image to start from`);
    }
    const undo: (() => Promise<void>)[] = [];
    try {
      const [pulled, acquired] = await Promise.allSettled([
        this.opts.images.pull(committed.baseImage.reference),
        this.opts.network.acquire(),
      ]);
      if (acquired.status === 'fulfilled') undo.push(() => this.opts.network.release(acquired.value));
      if (pulled.status === 'rejected') throw pulled.reason;
      if (acquired.status === 'rejected') throw acquired.reason;
      const image = pulled.value;
      const slot = acquired.value;
      this.opts.images.acquireLease(leaseHolder(record.id), image.manifestDigest);
      undo.push(async () => this.opts.images.releaseLease(leaseHolder(record.id)));
      const policyApplied = this.opts.network.applyPolicy(slot, policy);

      const envdEnv = {
        PATH: committed.context.envVars.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        ENVD_PORT: String(this.opts.envdPort),
        E2B_SANDBOX_ID: record.id,
        E2B_TEMPLATE_ID: record.templateId,
      };
      const lowerDirs = image.layers.map((l) => l.dir);
      await this.opts.runtime.create(
        {
          id: record.id,
          hostname: record.id,
          lowerDirs,
          resources: {
            cpuCount: record.resources.cpuCount,
            memoryMB: record.resources.memoryMB,
            pidsLimit: this.opts.pidsLimit,
          },
          netnsPath: slot.netnsPath,
          nameservers: slot.dnsServer ? [slot.dnsServer] : [],
          initEnv: envdEnv,
        },
        { tools: this.opts.tools },
      );
      undo.push(() => this.opts.runtime.destroy(record.id));
      await policyApplied;
      await this.envdReady(record, slot);
      const state: BackendState = {
        imageRef: committed.baseImage.reference,
        manifestDigest: image.manifestDigest,
        lowerDirs,
        toolsVersion: this.opts.tools.version,
        envdEnv,
      };
      return {
        binding: { slotIndex: slot.index, hostInteractionIp: slot.hostInteractionIp, instanceId: randomUUID() },
        backend: state as unknown as Record<string, unknown>,
      };
    } catch (e) {
      for (const step of undo.reverse()) {
        await step().catch((err: unknown) => this.log.error({ err, sandboxId: record.id }, 'rollback step failed'));
      }
      throw e;
    }
  }

  /** Waits for envd and hands it the sandbox's env, user, workdir and token (every start and resume). */
  private async envdReady(record: SandboxRecord, slot: NetworkSlot): Promise<void> {
    await waitForEnvd(slot.hostInteractionIp, this.opts.envdPort, {
      pollMs: this.opts.envdPollMs,
      timeoutMs: this.opts.envdInitTimeoutMs,
      isAlive: async () => {
        const listed = await this.opts.runtime.list();
        return listed.some((s) => s.id === record.id && s.status === 'running');
      },
    });
    await initEnvd(slot.hostInteractionIp, this.opts.envdPort, {
      envVars: record.envVars,
      ...(record.secure ? { accessToken: this.opts.envdToken(record.id) } : {}),
      defaultUser: record.defaultUser,
      ...(record.defaultWorkdir ? { defaultWorkdir: record.defaultWorkdir } : {}),
      timestamp: new Date().toISOString(),
    });
  }

  async destroy(record: SandboxRecord): Promise<void> {
    await this.opts.runtime.destroy(record.id);
    if (record.runtime) {
      await this.opts.network.release(this.opts.network.attach(record.runtime.slotIndex));
    }
    this.opts.images.releaseLease(leaseHolder(record.id));
  }

  async pause(_record: SandboxRecord): Promise<PausedState> {
    throw Object.assign(new Error('pause is not implemented by this backend yet'), { status: 501 });
  }

  async resume(_record: SandboxRecord): Promise<StartResult> {
    throw Object.assign(new Error('resume is not implemented by this backend yet'), { status: 501 });
  }

  async applyPolicy(record: SandboxRecord, policy: EgressPolicy): Promise<void> {
    if (!record.runtime) throw new Error(`sandbox ${record.id} has no network slot`);
    await this.opts.network.applyPolicy(this.opts.network.attach(record.runtime.slotIndex), policy);
  }

  async recover(records: readonly SandboxRecord[]): Promise<Map<string, RecoveryOutcome>> {
    const outcomes = new Map<string, RecoveryOutcome>();
    const listed = new Map((await this.opts.runtime.list()).map((s) => [s.id, s]));
    const keepSlots: number[] = [];
    const keepIds: string[] = [];
    for (const r of records) {
      if (r.state === 'paused' && r.paused) {
        outcomes.set(r.id, { kind: 'paused' });
        continue;
      }
      const live = listed.get(r.id);
      if (r.runtime && live && live.status === 'running') {
        keepSlots.push(r.runtime.slotIndex);
        keepIds.push(r.id);
        outcomes.set(r.id, {
          kind: 'running',
          binding: { ...r.runtime, instanceId: randomUUID() },
        });
      } else {
        outcomes.set(r.id, { kind: 'gone' });
      }
    }
    const runtimeReport = await this.opts.runtime.reconcile(keepIds);
    const networkReport = await this.opts.network.init(keepSlots);
    for (const [id, outcome] of outcomes) {
      if (outcome.kind === 'gone') this.opts.images.releaseLease(leaseHolder(id));
    }
    for (const lease of this.opts.images.listLeases()) {
      const id = lease.holder.startsWith('sandbox:') ? lease.holder.slice('sandbox:'.length) : undefined;
      if (id && !outcomes.has(id)) this.opts.images.releaseLease(lease.holder);
    }
    this.log.info({ runtime: runtimeReport, network: networkReport, adopted: keepIds.length }, 'host reconciled');
    // Re-adopted sandboxes must still answer; a container that runs but whose envd is gone is not usable.
    for (const r of records) {
      const o = outcomes.get(r.id);
      if (o?.kind !== 'running') continue;
      try {
        await waitForEnvd(o.binding.hostInteractionIp, this.opts.envdPort, { pollMs: 20, timeoutMs: 2000 });
      } catch (err) {
        this.log.warn({ err, sandboxId: r.id }, 'adopted sandbox does not answer; removing it');
        await this.destroy({ ...r, runtime: o.binding }).catch(() => {});
        outcomes.set(r.id, { kind: 'gone' });
      }
    }
    return outcomes;
  }
}
