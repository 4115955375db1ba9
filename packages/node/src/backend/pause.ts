// Pause (freeze + memory checkpoint + disk capture into `paused/<id>`), resume (a thaw while the frozen container
// is still resident, else a launch from the artifacts) and the release of resident memory (maintain).
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { EgressPolicy } from '../network/types.js';
import type { BeforeInstanceStart, StartResult } from '../orchestrator/backend.js';
import type { PausedState, SandboxRecord } from '../orchestrator/types.js';
import { crashPoint } from '../util/crash-point.js';
import { treeBytes } from '../util/disk-usage.js';
import { COMPLETE } from './capture-dirs.js';
import { bindingOf, containerIdOf, setState, stateOf, type BackendContext } from './context.js';
import { syncFilesystem, writeDurably } from './disk-archive.js';
import { launchSaved } from './launch.js';
import { availableMemoryRatio } from './memory-pressure.js';
import type { PausedSharing } from './paused-sharing.js';
import { detached, phase } from '../util/phases.js';
import { ResidentReleases } from './resident-releases.js';

export class SandboxPausing {
  private readonly releases: ResidentReleases;

  constructor(
    private readonly ctx: BackendContext,
    private readonly sharing: PausedSharing | undefined,
  ) {
    this.releases = new ResidentReleases(ctx.log);
  }

  async pause(
    record: SandboxRecord,
    opts: { memory: boolean; admit?: (bytes: number) => void },
  ): Promise<PausedState> {
    const { o, dirs, log } = this.ctx;
    const id = record.id;
    const dir = dirs.pausedDir(id);
    await phase('prepare', async () => {
      await dirs.discardSettled(id);
      await dirs.removePauseArtifacts(id);
      await mkdir(dir, { recursive: true, mode: 0o711 });
    });
    const cid = containerIdOf(this.ctx, record);
    await phase('freeze', () => o.runtime.freeze(cid));
    crashPoint('pause:frozen');
    let kind: PausedState['kind'] = 'memory';
    let reason: string | undefined;
    let bytes = 0;
    let pausedAt = '';
    // The images made durable by the driver on their own, and the disk by its snapshot (a btrfs commit):
    // then only the commit marker needs a sync. Otherwise the whole filesystem is synced.
    let committed = false;
    try {
      try {
        if (!opts.memory) throw new Error('a filesystem-only pause was asked for (memory: false)');
        const result = await phase('checkpoint', () =>
          o.runtime.checkpoint(cid, join(dir, 'memory'), {
            leaveRunning: true,
            diskDest: join(dir, 'disk'),
            writeBack: true,
            durable: true,
          }),
        );
        committed = result.durable === true;
      } catch (err) {
        // The driver could not checkpoint this workload: keep the disk, and say the processes will restart on resume.
        kind = 'filesystem';
        reason = err instanceof Error ? err.message : String(err);
        if (opts.memory)
          log.warn({ sandboxId: id, reason }, 'memory checkpoint failed; pausing with the filesystem only');
        await rm(join(dir, 'memory'), { recursive: true, force: true });
        await rm(join(dir, 'disk'), { recursive: true, force: true });
        await phase('capture-disk', () => o.runtime.captureDisk(cid, join(dir, 'disk')));
      }
      crashPoint('pause:captured');
      bytes = await phase('measure', () => treeBytes(dir));
      opts.admit?.(bytes);
      pausedAt = new Date().toISOString();
      await phase('sync', async () => {
        const marker = JSON.stringify({ kind, pausedAt, bytes });
        if (committed) await writeDurably(join(dir, COMPLETE), marker);
        else {
          await writeFile(join(dir, COMPLETE), marker);
          await syncFilesystem(dir);
        }
      });
      crashPoint('pause:synced');
    } catch (err) {
      await dirs.removePauseArtifacts(id).catch(() => {});
      await o.runtime.thaw(cid).catch(() => {});
      throw err;
    }
    const state = stateOf(this.ctx, record);
    // The frozen container is released later, in the background (maintain), so the pause answers as soon as it
    // is durable. Until then a memory pause within its grace resumes by thawing. A filesystem-only pause (asked
    // for, or because the checkpoint was refused) means "restart the processes": it is never thawed.
    if (record.runtime) {
      state.resident = true;
      state.residentSlot = record.runtime.slotIndex;
      state.thawable = kind === 'memory' && o.residentPauseGraceMs > 0 && !this.underMemoryPressure();
      setState(this.ctx, record, state);
    }
    const paused: PausedState = {
      kind,
      pausedAt,
      artifactDir: dir,
      ...(reason ? { reason } : {}),
      bytes,
    };
    this.sharing?.share(
      { ...record, state: 'paused', paused },
      dir,
      { ...o.runtimeVersions, tools: state.toolsVersion },
      o.runtime.virtualizationMode,
    );
    return paused;
  }

  private underMemoryPressure(): boolean {
    return availableMemoryRatio() < (this.ctx.o.memoryPressureRatio ?? 0.15);
  }

  /**
   * Drops the frozen processes and the slot of a paused sandbox, in the background (resident-releases.ts); its
   * artifacts stay. The record says at once that nothing is resident any more.
   */
  private releaseMemory(record: SandboxRecord): void {
    const state = stateOf(this.ctx, record);
    const cid = containerIdOf(this.ctx, record);
    const slot = state.residentSlot ?? record.runtime?.slotIndex;
    setState(this.ctx, record, { ...state, resident: false, residentSlot: undefined, thawable: undefined });
    this.releases.start(record.id, cid, async () => {
      await this.ctx.o.runtime.destroy(cid);
      releaseSlot(this.ctx, record.id, slot);
    });
  }

  /** Resolves when no release of the sandbox's memory is in flight (a kill, a hand-over). */
  releasesSettled(sandboxId: string): Promise<void> {
    return this.releases.settled(sandboxId);
  }

  /** Resolves when no release is in flight (shutdown). */
  idle(): Promise<void> {
    return this.releases.idle();
  }

  resume(
    record: SandboxRecord,
    policy: EgressPolicy,
    opts: { memory: boolean; beforeStart?: BeforeInstanceStart },
  ): Promise<StartResult> {
    return this.releases.resuming(record.id, () => this.resumeNow(record, policy, opts));
  }

  private async resumeNow(
    record: SandboxRecord,
    policy: EgressPolicy,
    opts: { memory: boolean; beforeStart?: BeforeInstanceStart },
  ): Promise<StartResult> {
    const { o, dirs } = this.ctx;
    let state = stateOf(this.ctx, record);
    const dir = dirs.pausedDir(record.id);
    // The claim must be this node's, and the shared copy gone, before the sandbox runs again: nobody may resume
    // it elsewhere meanwhile (docs/cluster.md#sandbox-ownership).
    if (this.sharing) await phase('claim', () => this.sharing!.takeBack(record.id));
    if (state.resident && (!opts.memory || !state.thawable)) {
      this.releaseMemory(record);
      state = stateOf(this.ctx, record);
    }
    if (state.resident && state.residentSlot !== undefined) {
      const slot = o.network.attach(state.residentSlot);
      const instanceId = randomUUID();
      const hook = opts.beforeStart;
      if (hook)
        await phase('placement', () =>
          hook({
            kind: 'resume',
            instanceId,
            netnsPath: slot.netnsPath,
            hostInteractionIp: slot.hostInteractionIp,
          }),
        );
      await phase('thaw', () => o.runtime.thaw(containerIdOf(this.ctx, record)));
      // No /init: envd never stopped, and nothing it was given changed (env, user, workdir and token are the
      // sandbox's for life; a container reads the host's clock, so there is no clock to set after a pause).
      dirs.discardInBackground(record.id);
      return {
        binding: bindingOf({ slot, instanceId }),
        backend: this.ctx.records.encodeState({
          ...state,
          resident: false,
          residentSlot: undefined,
          thawable: undefined,
        }),
      };
    }
    if (!existsSync(join(dir, COMPLETE)))
      throw new Error(`the pause artifacts of ${record.id} are missing (${dir})`);
    const memory = opts.memory && record.paused?.kind === 'memory' ? join(dir, 'memory') : undefined;
    const result = await launchSaved(
      this.ctx,
      record,
      state,
      policy,
      {
        memory,
        disk: join(dir, 'disk'),
        currentId: record.id,
        currentToken: record.secure ? o.envdToken(record.id) : undefined,
        leaseHeld: true,
        // Not the one a release of its previous container still holds: the resume does not wait for it.
        containerId: this.releases.freeContainerId(record.id),
      },
      opts.beforeStart,
    );
    dirs.discardInBackground(record.id);
    return result;
  }

  async maintain(paused: readonly SandboxRecord[], opts: { releaseAll?: boolean } = {}): Promise<void> {
    const now = Date.now();
    const pressure = opts.releaseAll || this.underMemoryPressure();
    for (const r of paused) {
      const state = stateOf(this.ctx, r);
      if (!state.resident || !r.paused) continue;
      const inGrace = state.thawable && now - Date.parse(r.paused.pausedAt) < this.ctx.o.residentPauseGraceMs;
      if (inGrace && !pressure) continue;
      this.releaseMemory(r);
    }
  }
}

/**
 * Gives a sandbox's slot back once its container is gone, without waiting for the teardown. A teardown that
 * fails stays with the network manager, which retries it: the sandbox no longer needs the slot.
 */
export function releaseSlot(ctx: BackendContext, sandboxId: string, index: number | undefined): void {
  if (index === undefined) return;
  // In the background (docs/benchmarks.md): the slot is not handed out again before it is clean.
  detached(() =>
    ctx.o.network.releaseInBackground(index, (err: unknown) => {
      ctx.log.warn({ err, sandboxId, index }, 'network slot teardown failed; the network manager retries it');
    }),
  );
}
