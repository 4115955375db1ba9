// A node's startup: every stored sandbox record meets what the host still holds. Running containers are adopted
// (and must still answer), paused sandboxes keep their complete artifacts, everything else of the backend (other
// containers, slots, uid ranges, image leases, orphaned pause/fork/capture dirs, half-made capture records) goes.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { waitForEnvd } from '@aenv/protocol';
import type { RecoveryOutcome } from '../orchestrator/backend.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import { treeBytes } from '../util/disk-usage.js';
import { COMPLETE } from './capture-dirs.js';
import {
  leaseHolder,
  policyOf,
  setState,
  START_CAPTURE_LEASE_PREFIX,
  stateIfAny,
  type BackendContext,
} from './context.js';
import { releaseDriveLeases } from './drives.js';
import type { BackendState } from './record-state.js';

export class SandboxRecovery {
  constructor(
    private readonly ctx: BackendContext,
    /** Removes everything of a sandbox (an adopted one that no longer answers). */
    private readonly destroy: (record: SandboxRecord) => Promise<void>,
  ) {}

  async recover(records: readonly SandboxRecord[]): Promise<Map<string, RecoveryOutcome>> {
    const outcomes = new Map<string, RecoveryOutcome>();
    const listed = new Map((await this.ctx.o.runtime.list()).map((s) => [s.id, s]));
    const keepSlots: number[] = [];
    const keepIds: string[] = [];
    for (const r of records) {
      let state: BackendState | undefined;
      try {
        state = stateIfAny(this.ctx, r);
      } catch (err) {
        // Recovered as far as the record allows (its container taken to be its id); what needs the state (a
        // resume, a pause) answers with this error.
        this.ctx.log.error({ err, sandboxId: r.id }, 'the stored backend state of a sandbox cannot be read');
      }
      const live = listed.get(state?.containerId ?? r.id);
      const artifactsComplete = existsSync(join(this.ctx.dirs.pausedDir(r.id), COMPLETE));
      if (r.state === 'paused') {
        // A resident pause does not survive a restart: its frozen container is removed below, the artifacts stay.
        if (state)
          setState(this.ctx, r, { ...state, resident: false, residentSlot: undefined, thawable: undefined });
        outcomes.set(
          r.id,
          artifactsComplete ? await this.recoveredPause(r, r.paused?.bytes === undefined) : { kind: 'gone' },
        );
        if (!artifactsComplete)
          this.ctx.log.error({ sandboxId: r.id }, 'paused sandbox has no complete artifacts');
        continue;
      }
      if (r.runtime && live && (live.status === 'running' || live.status === 'paused')) {
        // Running, or caught in the middle of a pause: a frozen container whose pause never completed runs on.
        if (live.status === 'paused') await this.ctx.o.runtime.thaw(state?.containerId ?? r.id);
        await this.ctx.dirs.removePauseArtifacts(r.id);
        keepSlots.push(r.runtime.slotIndex);
        keepIds.push(state?.containerId ?? r.id);
        outcomes.set(r.id, { kind: 'running', binding: { ...r.runtime, instanceId: randomUUID() } });
      } else if ((r.state === 'pausing' || r.state === 'resuming') && artifactsComplete) {
        // A pause that completed, or a resume the crash cut short before its sandbox ran: still paused.
        outcomes.set(r.id, await this.recoveredPause(r, true));
      } else {
        outcomes.set(r.id, { kind: 'gone' });
      }
    }
    const runtimeReport = await this.ctx.o.runtime.reconcile(keepIds);
    // Ranges of sandboxes that are gone, and of pre-started and build sandboxes (removed above), are free.
    const freedRanges = this.ctx.o.idRanges.retainOnly(
      [...outcomes].filter(([, o]) => o.kind !== 'gone').map(([id]) => id),
    );
    const networkReport = await this.ctx.o.network.init(keepSlots);
    await this.reinstallPolicies(records, outcomes);
    await this.removeOrphanStoreDirs(outcomes);
    for (const [id, outcome] of outcomes) {
      if (outcome.kind === 'gone') {
        this.ctx.o.images.releaseLease(leaseHolder(id));
        releaseDriveLeases(this.ctx.o.images, leaseHolder(id));
      }
    }
    for (const lease of this.ctx.o.images.listLeases()) {
      // `sandbox:<id>` holds the rootfs, `sandbox:<id>:drive:<n>` a drive (drives.ts).
      const id = lease.holder.startsWith('sandbox:')
        ? lease.holder.slice('sandbox:'.length).split(':')[0]
        : undefined;
      if (id && !outcomes.has(id)) this.ctx.o.images.releaseLease(lease.holder);
      // Start captures do not outlive a restart (their dirs went above).
      if (lease.holder.startsWith(START_CAPTURE_LEASE_PREFIX)) this.ctx.o.images.releaseLease(lease.holder);
    }
    this.ctx.log.info(
      { runtime: runtimeReport, network: networkReport, adopted: keepIds.length, freedRanges },
      'host reconciled',
    );
    // Re-adopted sandboxes must still answer; a container that runs but whose envd is gone is not usable.
    for (const r of records) {
      const o = outcomes.get(r.id);
      if (o?.kind !== 'running') continue;
      try {
        await waitForEnvd(o.binding.hostInteractionIp, this.ctx.o.envdPort, { pollMs: 20, timeoutMs: 2000 });
      } catch (err) {
        this.ctx.log.warn({ err, sandboxId: r.id }, 'adopted sandbox does not answer; removing it');
        await this.destroy({ ...r, runtime: o.binding }).catch(() => {});
        outcomes.set(r.id, { kind: 'gone' });
      }
    }
    return outcomes;
  }

  /**
   * A paused sandbox found at startup. When its record does not say what the pause holds (a crash between the
   * artifacts' completion and the record, or a record of a version that did not count bytes), the artifacts
   * do: their `complete` marker, and their size measured on disk.
   */
  private async recoveredPause(r: SandboxRecord, fromDisk: boolean): Promise<RecoveryOutcome> {
    if (!fromDisk) return { kind: 'paused' };
    const dir = this.ctx.dirs.pausedDir(r.id);
    let marker: { kind?: unknown; pausedAt?: unknown; bytes?: unknown } = {};
    try {
      marker = JSON.parse(await readFile(join(dir, COMPLETE), 'utf8')) as typeof marker;
    } catch {
      // an older marker (empty) or unreadable: the record and the disk say the rest
    }
    const kind = marker.kind === 'filesystem' || marker.kind === 'memory' ? marker.kind : undefined;
    const pausedAt = typeof marker.pausedAt === 'string' ? marker.pausedAt : undefined;
    const bytes =
      typeof marker.bytes === 'number' && Number.isFinite(marker.bytes) ? marker.bytes : await treeBytes(dir);
    return {
      kind: 'paused',
      paused: {
        kind: r.paused?.kind ?? kind ?? 'filesystem',
        pausedAt: r.paused?.pausedAt ?? pausedAt ?? new Date().toISOString(),
        artifactDir: dir,
        ...(r.paused?.reason ? { reason: r.paused.reason } : {}),
        bytes,
      },
    };
  }

  /**
   * Installs again the stored policy of every sandbox that survived the restart: a slot from an older version may
   * lack its chain (it would be denied everything), and a crash in the middle of a policy change left the old one.
   * A slot this fails for stays as it was, or denied everything.
   */
  private async reinstallPolicies(
    records: readonly SandboxRecord[],
    outcomes: Map<string, RecoveryOutcome>,
  ): Promise<void> {
    await Promise.all(
      records.map(async (r) => {
        const o = outcomes.get(r.id);
        if (o?.kind !== 'running') return;
        try {
          await this.ctx.o.network.applyPolicy(this.ctx.o.network.attach(o.binding.slotIndex), policyOf(r));
        } catch (err) {
          this.ctx.log.error(
            { err, sandboxId: r.id },
            'could not install the egress policy of an adopted sandbox',
          );
        }
      }),
    );
  }

  /** A capture cut short by a crash leaves its repository record uncommitted: remove it, freeing its name. */
  private async dropUncommittedRecord(recordId: string): Promise<void> {
    try {
      const rec = await this.ctx.o.repository.find(recordId);
      if (rec && !rec.committed && rec.source.kind === 'sandbox') {
        await this.ctx.o.repository.delete(recordId);
        this.ctx.log.warn(
          { snapshotId: recordId, alias: rec.alias },
          'removed a snapshot whose capture was interrupted',
        );
      }
    } catch (err) {
      this.ctx.log.warn({ err, snapshotId: recordId }, 'could not remove an interrupted snapshot record');
    }
  }

  /** Pause artifacts without a paused sandbox, and fork/capture work dirs of a crashed run. */
  private async removeOrphanStoreDirs(outcomes: Map<string, RecoveryOutcome>): Promise<void> {
    for (const id of await readdir(join(this.ctx.dirs.root, 'paused')).catch(() => [] as string[])) {
      if (outcomes.get(id)?.kind !== 'paused') await this.ctx.dirs.removePauseArtifacts(id);
    }
    for (const sub of ['forks', 'captures', 'start-captures']) {
      for (const name of await readdir(join(this.ctx.dirs.root, sub)).catch(() => [] as string[])) {
        const dir = join(this.ctx.dirs.root, sub, name);
        if (sub === 'captures') await this.dropUncommittedRecord(name);
        if (existsSync(join(dir, 'disk')))
          await this.ctx.o.runtime.removeDisk(join(dir, 'disk')).catch(() => {});
        await rm(dir, { recursive: true, force: true });
      }
    }
    for (const name of await readdir(join(this.ctx.dirs.root, 'trash')).catch(() => [] as string[])) {
      await this.ctx.dirs.removeTree(join(this.ctx.dirs.root, 'trash', name)).catch(() => {});
    }
    for (const name of await readdir(join(this.ctx.dirs.root, 'snapshots')).catch(() => [] as string[])) {
      if (name.includes('.tmp-'))
        await rm(join(this.ctx.dirs.root, 'snapshots', name), { recursive: true, force: true });
    }
  }
}
