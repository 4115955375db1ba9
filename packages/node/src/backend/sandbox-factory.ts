// The one place a sandbox is put together on this node. User sandboxes, pre-started (warm) ones, cold starts,
// launches of snapshots and templates, fork children, resumes from saved state and template build sandboxes all
// come out of `SandboxFactory.assemble`: a network slot, a rootfs on image layers (and a saved disk), the runtime
// spec, the start hook, envd healthy and `/init`'ed. The steps run in the order of ASSEMBLY_STEPS; each one
// registers how to undo itself, and when a later one fails the undo actions run in reverse, so a failed assembly
// leaves nothing behind (no slot, netns, mount, cgroup, uid range or image lease). See docs/runtime.md.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  DEFAULT_PATH,
  EnvdRestError,
  initEnvd,
  waitForEnvd,
  type EnvdInitCredentials,
  type InitBody,
} from '@aenv/protocol';
import type { ImageService, PulledImage } from '../image/index.js';
import type { NetworkManager } from '../network/index.js';
import type { EgressPolicy, NetworkSlot } from '../network/types.js';
import type { IdRange, RuntimeDriver, SandboxSpec, ToolsMount, VolumeMountSpec } from '../runtime/driver.js';
import type { IdRangeAllocator } from '../runtime/index.js';
import type { BeforeInstanceStart } from '../orchestrator/backend.js';
import { failurePoint } from '../util/crash-point.js';
import type { Logger } from '../util/log.js';
import type { BackendState } from './record-state.js';
import { phase } from '../util/phases.js';
import { leaseDrives, releaseDriveLeases } from './drives.js';
import { restoreTurns, type RestoreTurns } from './restore-turns.js';

export interface SandboxFactoryOptions {
  runtime: RuntimeDriver;
  network: NetworkManager;
  images: ImageService;
  /** Each sandbox's own uid range (docs/security.md, "uid isolation"). */
  idRanges: IdRangeAllocator;
  /** The tools mount new sandboxes get. */
  tools: ToolsMount;
  /** Where tools dirs of every version live (`<deps>/tools/<version>`): a checkpoint restores with its own. */
  toolsRoot: string;
  envdPort: number;
  envdPollMs: number;
  envdInitTimeoutMs: number;
  pidsLimit: number;
  /** `[limits].max_concurrent_restores`: memory restores run at once (the rest wait their turn). */
  maxConcurrentRestores: number;
  /** The node's credential for envd's /init of the container with this id (docs/security.md). */
  envdInitKey(id: string): string;
  logger: Logger;
}

export type SandboxResources = { cpuCount: number; memoryMB: number; diskSizeMB?: number };

/** What to assemble. */
export interface AssemblyPlan {
  /** The runtime's id of the container: a sandbox id, `warm-…` for a pre-started one, `tb-…` for a build. */
  containerId: string;
  /** Who holds the uid range (default: the container id). A resume finds its range still held and keeps it. */
  rangeOwner?: string;
  /** The sandbox's hostname (default: the container id; a sandbox resumed as `<id>-rN` keeps its id). */
  hostname?: string;
  templateId: string;
  resources: SandboxResources;
  /** The sandbox's backend state when it is known (saved state), or the image to pull while the slot is set up. */
  state: BackendState | { pull: string; derive(image: PulledImage): BackendState };
  /** Installed in the slot before the first process starts; null: none yet (the slot denies everything). */
  policy: EgressPolicy | null;
  /** The start hook, told where the instance runs before its first process starts. */
  placement?: { kind: 'fresh' | 'resume'; hook: BeforeInstanceStart };
  /** Holds the image's layers for the sandbox's life (none: already held, or taken when it is handed out). */
  leaseHolder?: string;
  /** Persistent volumes bind-mounted into the sandbox (docs/volumes.md). */
  volumes?: VolumeMountSpec[];
  /** A saved disk to start on, and a memory checkpoint to restore (falling back to a boot on the disk). */
  from?: { disk?: string; memory?: string };
  /** envd's `/init` once it answers (none: a pre-started sandbox is /init'ed when it is handed out). */
  init?: (done: { restored: boolean; extraEnv?: Record<string, string> }) => {
    body: InitBody;
    credentials: EnvdInitCredentials;
  };
}

/** A sandbox the factory put together: running, envd answering (and /init'ed when the plan said so). */
export interface AssembledSandbox {
  containerId: string;
  rangeOwner: string;
  slot: NetworkSlot;
  state: BackendState;
  /** Fresh per assembly; the start hook was told the same id. */
  instanceId: string;
  /** Memory came back from the checkpoint (false: booted). */
  restored: boolean;
  /** Extra environment the start hook asked for. */
  extraEnv?: Record<string, string>;
  leaseHolder?: string;
}

/** An assembly in progress: what the steps so far made, and how to undo it. */
export interface Assembly {
  readonly plan: AssemblyPlan;
  readonly instanceId: string;
  slot?: NetworkSlot;
  state?: BackendState;
  /** The slot's egress policy being installed (the first process starts once it is in place). */
  policyApplied?: Promise<void>;
  extraEnv?: Record<string, string>;
  idRange?: IdRange;
  /** The runtime spec; steps between `spec` and `runtime` may add to it (e.g. mounts). */
  spec?: SandboxSpec;
  restored: boolean;
  /** The container's limits (user namespace, disk) being set beside envd's `/init`; awaited by `limits`. */
  limitsSet?: Promise<void>;
  undo(fn: () => Promise<void>): void;
}

export interface AssemblyStep {
  /** Names the step in logs and in fault injection (`AENV_FAULT_FAIL_AFTER=factory:<name>`). */
  name: string;
  run(f: SandboxFactory, a: Assembly): Promise<void>;
}

/** The init's environment every sandbox gets (a capture records it; launches of the capture reuse it). */
export function envdEnv(envdPort: number, path: string | undefined): Record<string, string> {
  return {
    PATH: path ?? DEFAULT_PATH,
    ENVD_PORT: String(envdPort),
    AENV_INIT_LOG: '/run/agentenv/envd.log',
  };
}

const need = <T>(v: T | undefined, what: string): T => {
  if (v === undefined) throw new Error(`sandbox assembly: ${what} is not there yet (steps out of order)`);
  return v;
};

/**
 * The steps, in order. A new part of every sandbox is one more entry here, with its undo registered through
 * `a.undo`: an egress proxy started with the slot goes after `slot`, volume mounts between `spec` and `runtime`.
 */
export const ASSEMBLY_STEPS: readonly AssemblyStep[] = [
  {
    // The network slot, and the image pulled meanwhile; the egress policy starts installing at once.
    name: 'slot',
    async run(f, a) {
      const plan = a.plan;
      const image = 'pull' in plan.state ? f.o.images.pull(plan.state.pull) : undefined;
      const [pulled, acquired] = await Promise.allSettled([
        image,
        f.o.network.acquire().then((slot) => {
          if (plan.policy) a.policyApplied = f.installPolicy(slot, plan.policy);
          return slot;
        }),
      ]);
      if (acquired.status === 'fulfilled') {
        const slot = acquired.value;
        a.undo(() => f.o.network.release(slot));
      }
      if (pulled.status === 'rejected') throw pulled.reason;
      if (acquired.status === 'rejected') throw acquired.reason;
      a.slot = acquired.value;
      a.state = 'pull' in plan.state ? plan.state.derive(pulled.value!) : plan.state;
    },
  },
  {
    name: 'placement',
    async run(_f, a) {
      const p = a.plan.placement;
      if (!p) return;
      const slot = need(a.slot, 'the slot');
      const { extraEnv } = await p.hook({
        kind: p.kind,
        instanceId: a.instanceId,
        netnsPath: slot.netnsPath,
        hostInteractionIp: slot.hostInteractionIp,
      });
      if (extraEnv) a.extraEnv = extraEnv;
    },
  },
  {
    name: 'image-lease',
    async run(f, a) {
      const holder = a.plan.leaseHolder;
      if (!holder) return;
      const state = need(a.state, 'the state');
      f.o.images.acquireLease(holder, state.manifestDigest);
      a.undo(async () => f.o.images.releaseLease(holder));
      leaseDrives(f.o.images, holder, state.rootfs.drives ?? []);
      a.undo(async () => releaseDriveLeases(f.o.images, holder));
    },
  },
  {
    name: 'uid-range',
    async run(f, a) {
      const owner = rangeOwnerOf(a.plan);
      const held = f.o.idRanges.get(owner);
      a.idRange = held ?? f.o.idRanges.acquire(owner);
      if (!held) a.undo(async () => f.o.idRanges.release(owner));
    },
  },
  {
    name: 'spec',
    async run(f, a) {
      a.spec = f.spec(
        a.plan,
        need(a.slot, 'the slot'),
        need(a.state, 'the state'),
        need(a.idRange, 'the uid range'),
      );
    },
  },
  {
    // Persistent volumes: bind mounts of the spec, nothing of their own to undo (the volume outlives the sandbox).
    name: 'volumes',
    async run(_f, a) {
      const volumes = a.plan.volumes;
      if (volumes?.length) need(a.spec, 'the spec').volumes = volumes;
    },
  },
  {
    // The container: a restore of the memory checkpoint, or a boot on the image layers (and the saved disk).
    name: 'runtime',
    async run(f, a) {
      const plan = a.plan;
      const state = need(a.state, 'the state');
      const spec = need(a.spec, 'the spec');
      const startAfter = a.policyApplied ? { startAfter: a.policyApplied } : {};
      const disk = plan.from?.disk;
      if (plan.from?.memory && disk) {
        try {
          const memory = plan.from.memory;
          await f.restoreTurns(() =>
            f.o.runtime.restore(spec, memory, { tools: f.toolsFor(state.toolsVersion), disk, ...startAfter }),
          );
          a.restored = true;
        } catch (err) {
          // Without its policy the sandbox cannot run at all: no fallback to its disk.
          await a.policyApplied;
          f.o.logger.warn(
            { err, sandboxId: plan.containerId },
            'memory restore failed; booting the saved disk instead',
          );
        }
      }
      if (!a.restored) {
        state.toolsVersion = f.o.tools.version;
        await f.o.runtime.create(spec, { tools: f.o.tools, ...(disk ? { disk } : {}), ...startAfter });
      }
      a.undo(() => f.o.runtime.destroy(plan.containerId));
    },
  },
  {
    name: 'policy',
    async run(_f, a) {
      await a.policyApplied;
    },
  },
  {
    name: 'envd-healthy',
    async run(f, a) {
      const slot = need(a.slot, 'the slot');
      // The limits need nothing of envd: they are set while envd answers and takes /init, and awaited after.
      const limitsSet = f.o.runtime.diskLimitSet(a.plan.containerId);
      limitsSet.catch(() => {});
      a.limitsSet = limitsSet;
      // A restored envd was dumped listening, so its socket listens again: its /init (the next step) is the
      // first request, which saves a round trip per restore; the wait runs only if that /init cannot connect.
      if (a.restored && a.plan.init) return;
      await f.envdHealthy(a.plan.containerId, slot.hostInteractionIp);
    },
  },
  {
    name: 'envd-init',
    async run(f, a) {
      const init = a.plan.init;
      if (!init) return;
      const { body, credentials } = init({
        restored: a.restored,
        ...(a.extraEnv ? { extraEnv: a.extraEnv } : {}),
      });
      const host = need(a.slot, 'the slot').hostInteractionIp;
      const send = () => initEnvd(host, f.o.envdPort, body, credentials);
      if (!a.restored) return send();
      try {
        await send();
      } catch (err) {
        // An answer is envd's verdict; only a request that never reached envd is worth the wait and a retry.
        if (err instanceof EnvdRestError) throw err;
        await f.envdHealthy(a.plan.containerId, host);
        await send();
      }
    },
  },
  {
    // Nothing is answered before the sandbox's limits are in place; a failure to set them fails the start.
    name: 'limits',
    async run(_f, a) {
      await a.limitsSet;
    },
  },
];

const rangeOwnerOf = (plan: AssemblyPlan) => plan.rangeOwner ?? plan.containerId;

export class SandboxFactory {
  readonly restoreTurns: RestoreTurns;

  constructor(
    readonly o: SandboxFactoryOptions,
    private readonly steps: readonly AssemblyStep[] = ASSEMBLY_STEPS,
  ) {
    this.restoreTurns = restoreTurns(o.maxConcurrentRestores ?? 1);
  }

  /** Runs every step of ASSEMBLY_STEPS for `plan`; when one fails, undoes the ones before it and rethrows. */
  async assemble(plan: AssemblyPlan): Promise<AssembledSandbox> {
    const undo: (() => Promise<void>)[] = [];
    const a: Assembly = {
      plan,
      instanceId: randomUUID(),
      restored: false,
      undo: (fn) => undo.push(fn),
    };
    try {
      for (const step of this.steps) {
        await phase(step.name, () => step.run(this, a));
        failurePoint(`factory:${step.name}`);
      }
    } catch (e) {
      for (const fn of undo.reverse()) {
        await fn().catch((err: unknown) =>
          this.o.logger.error({ err, sandboxId: plan.containerId }, 'rollback step failed'),
        );
      }
      throw e;
    }
    return {
      containerId: plan.containerId,
      rangeOwner: rangeOwnerOf(plan),
      slot: a.slot!,
      state: a.state!,
      instanceId: a.instanceId,
      restored: a.restored,
      ...(a.extraEnv ? { extraEnv: a.extraEnv } : {}),
      ...(plan.leaseHolder ? { leaseHolder: plan.leaseHolder } : {}),
    };
  }

  /** Takes apart a sandbox `assemble` made (pre-started or build sandboxes, not handed to a record). */
  async disassemble(s: AssembledSandbox): Promise<void> {
    await this.o.runtime.destroy(s.containerId).catch(() => {});
    this.o.idRanges.release(s.rangeOwner);
    await this.o.network.release(s.slot).catch(() => {});
    if (s.leaseHolder) {
      this.o.images.releaseLease(s.leaseHolder);
      releaseDriveLeases(this.o.images, s.leaseHolder);
    }
  }

  /** The backend state of a fresh boot on `image` (its layers, the current tools, the init's env). */
  imageState(image: PulledImage, path: string | undefined, startCmd?: string): BackendState {
    return {
      imageRef: image.reference,
      manifestDigest: image.manifestDigest,
      rootfs: { layers: image.layers.map((l) => l.dir) },
      toolsVersion: this.o.tools.version,
      envdEnv: envdEnv(this.o.envdPort, path),
      ...(startCmd ? { startCmd } : {}),
    };
  }

  /** The runtime spec of the container (its identity, resources, slot, rootfs and the init's environment). */
  spec(plan: AssemblyPlan, slot: NetworkSlot, state: BackendState, idRange: IdRange): SandboxSpec {
    const id = plan.containerId;
    const r = plan.resources;
    // What writable drives may hold is written on the sandbox's disk too: one limit covers both.
    const drivesMB = (state.rootfs.drives ?? []).reduce(
      (sum, d) => sum + (d.readOnly ? 0 : (d.sizeMB ?? 0)),
      0,
    );
    return {
      id,
      hostname: plan.hostname ?? id,
      idRange,
      rootfs: state.rootfs,
      resources: {
        cpuCount: r.cpuCount,
        memoryMB: r.memoryMB,
        pidsLimit: this.o.pidsLimit,
        ...(r.diskSizeMB !== undefined ? { diskMB: r.diskSizeMB + drivesMB } : {}),
      },
      netnsPath: slot.netnsPath,
      nameservers: slot.dnsServer ? [slot.dnsServer] : [],
      initEnv: {
        ...state.envdEnv,
        E2B_SANDBOX_ID: id,
        E2B_TEMPLATE_ID: plan.templateId,
        // Not in envdEnv: captures record that, and the key is per container.
        AENV_ENVD_INIT_KEY: this.o.envdInitKey(id),
      },
    };
  }

  /**
   * Starts installing `policy` in `slot` (while the container is being prepared); the runtime starts the sandbox's
   * first process only once it is in place (`startAfter`). A failure is handled where the promise is awaited.
   */
  installPolicy(slot: NetworkSlot, policy: EgressPolicy): Promise<void> {
    const applied = this.o.network.applyPolicy(slot, policy);
    applied.catch(() => {});
    return applied;
  }

  /** Waits until envd in `containerId` answers `/health`; gives up early once the container has stopped. */
  envdHealthy(containerId: string, host: string): Promise<void> {
    return waitForEnvd(host, this.o.envdPort, {
      pollMs: this.o.envdPollMs,
      timeoutMs: this.o.envdInitTimeoutMs,
      // One container's state: listing every sandbox on the host (runc list, mounts, cgroups) here made each
      // boot's wait grow with the number of sandboxes (1,000 on the node: seconds per create).
      isAlive: () => this.o.runtime.isRunning(containerId),
    });
  }

  toolsFor(version: string): ToolsMount {
    if (version === this.o.tools.version) return this.o.tools;
    const dir = join(this.o.toolsRoot, version);
    if (!existsSync(join(dir, 'VERSION'))) {
      throw new Error(`tools ${version} (needed to restore this checkpoint) are no longer on this node`);
    }
    return { dir, version };
  }
}
