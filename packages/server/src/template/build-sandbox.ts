// Temporary sandboxes that template builds run their steps in. They are made from the same parts as the
// container backend's sandboxes (network slot, image layers, the runtime driver, envd from the tools
// mount), with what builds need on top: a start on a saved disk (the layer cache, a parent template's disk) and
// disk snapshots between steps. They are not orchestrator sandboxes: the API never lists
// them, and after a crash the backend's startup reconcile removes them with everything else it does not know.
import type { ImageService, PulledImage } from '../image/index.js';
import type { NetworkManager } from '../network/index.js';
import type { NetworkSlot } from '../network/types.js';
import type { RootfsSpec, RuntimeDriver, ToolsMount } from '../runtime/driver.js';
import type { IdRangeAllocator } from '../runtime/index.js';
import type { CommandContext } from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import { DEFAULT_PATH, EnvdRpcClient, initEnvd, waitForEnvd } from '@aenv/protocol';

export interface BuildSandboxesOptions {
  runtime: RuntimeDriver;
  network: NetworkManager;
  images: ImageService;
  tools: ToolsMount;
  envdPort: number;
  envdPollMs: number;
  envdInitTimeoutMs: number;
  pidsLimit: number;
  /** The node's credential for envd's /init of the container with this id (docs/security.md). */
  envdInitKey(id: string): string;
  /** Build sandboxes get their own uid ranges too (held as `build:<id>`). */
  idRanges: IdRangeAllocator;
  logger: Logger;
}

export interface BuildSandboxSpec {
  id: string;
  templateId: string;
  image: PulledImage;
  /** A saved disk (a cache entry, a parent template's disk) to start on instead of an empty disk. */
  diskSource?: string;
  /** `diskSizeMB` limits what the build writes, as for any sandbox. */
  resources: { cpuCount: number; memoryMB: number; diskSizeMB?: number };
  /** The init's environment (see `envdEnv`). */
  envdEnv: Record<string, string>;
}

export interface BuildSandbox {
  id: string;
  slot: NetworkSlot;
  envd: EnvdRpcClient;
  rootfs: RootfsSpec;
}

export const BUILD_LEASE_PREFIX = 'build:';

export class BuildSandboxes {
  constructor(private readonly opts: BuildSandboxesOptions) {}

  get toolsVersion(): string {
    return this.opts.tools.version;
  }

  /** The init's environment, as the container backend gives it (a capture records it for launches). */
  envdEnv(path: string | undefined): Record<string, string> {
    return {
      PATH: path ?? DEFAULT_PATH,
      ENVD_PORT: String(this.opts.envdPort),
      AENV_INIT_LOG: '/run/agentenv/envd.log',
    };
  }

  /** `/init` with the template's env, user and workdir (what launches from a memory capture start with). */
  async init(sb: BuildSandbox, ctx: CommandContext): Promise<void> {
    await initEnvd(
      sb.slot.hostInteractionIp,
      this.opts.envdPort,
      {
        envVars: ctx.envVars,
        defaultUser: ctx.user ?? 'root',
        ...(ctx.workdir && ctx.workdir !== '/' ? { defaultWorkdir: ctx.workdir } : {}),
        timestamp: new Date().toISOString(),
      },
      { initKey: this.opts.envdInitKey(sb.id) },
    );
  }

  /** Releases image leases of build sandboxes a crash left behind (the sandboxes themselves are gone). */
  reconcile(): void {
    for (const lease of this.opts.images.listLeases()) {
      if (lease.holder.startsWith(BUILD_LEASE_PREFIX)) this.opts.images.releaseLease(lease.holder);
    }
  }

  async start(spec: BuildSandboxSpec): Promise<BuildSandbox> {
    const undo: (() => Promise<void>)[] = [];
    try {
      const slot = await this.opts.network.acquire();
      undo.push(() => this.opts.network.release(slot));
      this.opts.images.acquireLease(BUILD_LEASE_PREFIX + spec.id, spec.image.manifestDigest);
      undo.push(async () => this.opts.images.releaseLease(BUILD_LEASE_PREFIX + spec.id));
      // Installed while the container is prepared; its first process starts once it is in place.
      const policyApplied = this.opts.network.applyPolicy(slot, {
        allowOut: [],
        denyOut: [],
        allowInternetAccess: null,
      });
      policyApplied.catch(() => {});
      const rootfs = { layers: spec.image.layers.map((l) => l.dir) };
      const rangeOwner = BUILD_LEASE_PREFIX + spec.id;
      const idRange = this.opts.idRanges.acquire(rangeOwner);
      undo.push(async () => this.opts.idRanges.release(rangeOwner));
      await this.opts.runtime.create(
        {
          id: spec.id,
          hostname: spec.id,
          idRange,
          rootfs,
          resources: {
            cpuCount: spec.resources.cpuCount,
            memoryMB: spec.resources.memoryMB,
            pidsLimit: this.opts.pidsLimit,
            ...(spec.resources.diskSizeMB !== undefined ? { diskMB: spec.resources.diskSizeMB } : {}),
          },
          netnsPath: slot.netnsPath,
          nameservers: slot.dnsServer ? [slot.dnsServer] : [],
          initEnv: {
            ...spec.envdEnv,
            E2B_SANDBOX_ID: spec.id,
            E2B_TEMPLATE_ID: spec.templateId,
            AENV_ENVD_INIT_KEY: this.opts.envdInitKey(spec.id),
          },
        },
        {
          tools: this.opts.tools,
          startAfter: policyApplied,
          ...(spec.diskSource ? { disk: spec.diskSource } : {}),
        },
      );
      undo.push(() => this.opts.runtime.destroy(spec.id));
      await policyApplied;
      await Promise.all([
        waitForEnvd(slot.hostInteractionIp, this.opts.envdPort, {
          pollMs: this.opts.envdPollMs,
          timeoutMs: this.opts.envdInitTimeoutMs,
          isAlive: async () =>
            (await this.opts.runtime.list()).some((s) => s.id === spec.id && s.status === 'running'),
        }),
        this.opts.runtime.diskLimitSet(spec.id),
      ]);
      await initEnvd(
        slot.hostInteractionIp,
        this.opts.envdPort,
        { envVars: {}, defaultUser: 'root', timestamp: new Date().toISOString() },
        { initKey: this.opts.envdInitKey(spec.id) },
      );
      return {
        id: spec.id,
        slot,
        envd: new EnvdRpcClient({ baseUrl: `http://${slot.hostInteractionIp}:${this.opts.envdPort}` }),
        rootfs,
      };
    } catch (e) {
      for (const step of undo.reverse()) {
        await step().catch((err: unknown) =>
          this.opts.logger.error({ err, buildSandbox: spec.id }, 'build sandbox rollback step failed'),
        );
      }
      throw e;
    }
  }

  /** Saves the sandbox's disk into `dest`, with its processes frozen for a consistent copy. */
  async snapshotDisk(sb: BuildSandbox, dest: string): Promise<void> {
    await this.opts.runtime.freeze(sb.id);
    try {
      await this.opts.runtime.captureDisk(sb.id, dest);
    } finally {
      await this.opts.runtime.thaw(sb.id);
    }
  }

  removeDisk(path: string): Promise<void> {
    return this.opts.runtime.removeDisk(path);
  }

  /** Where the files of a saved disk are (what a disk archive holds). */
  diskFilesDir(disk: string): string {
    return this.opts.runtime.diskFilesDir(disk);
  }

  async destroy(sb: BuildSandbox): Promise<void> {
    await this.opts.runtime.destroy(sb.id);
    this.opts.idRanges.release(BUILD_LEASE_PREFIX + sb.id);
    await this.opts.network.release(sb.slot);
    this.opts.images.releaseLease(BUILD_LEASE_PREFIX + sb.id);
  }
}
