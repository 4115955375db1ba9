import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { Logger } from '../util/log.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import {
  localResumeClaim,
  nextClaim,
  type ClaimExpectation,
  type SnapshotRepository,
} from '../snapshot/index.js';
import type { RuntimeDriver } from '../runtime/driver.js';
import { archiveDir } from './disk-archive.js';
import { sandboxContext } from './capture-format.js';
import { bindingVolume, type NodeVolumes } from './volume-affinity.js';

export const PAUSED_DISK_MEDIA_TYPE = 'application/vnd.aenv.paused-disk.tar';

/** What a shared pause records in `committed.extra` besides the capture context. */
export interface SharedPauseExtra {
  sandbox: SandboxRecord;
  /** The claim the pause was made under: a node taking the sandbox over swaps exactly this one. */
  claim: ClaimExpectation;
  /** The node that paused it. */
  node: string;
  /**
   * That node's `[orchestrator].paused_retention_secs` (0 = kept): what applies while no node holds the sandbox
   * (backend/unheld-pauses.ts). Absent in copies made before it was recorded.
   */
  retentionSecs?: number;
}

/** The sandbox was taken over by another node while this one held an older copy (docs/cluster.md). */
export class SandboxMovedError extends DomainError {
  readonly sandboxMovedTo: string;
  constructor(
    readonly sandboxId: string,
    readonly owner: string,
    killed = false,
  ) {
    const where = killed ? `it was killed on node ${owner}` : `it moved to node ${owner}`;
    super(ErrorKind.NotFound, `sandbox ${sandboxId} not found: ${where}`, {
      details: { sandboxId, node: owner },
    });
    this.sandboxMovedTo = owner;
  }
}

/**
 * Copies paused sandboxes into a shared snapshot repository (oss, or posix_fs on a shared directory), so that
 * another node with the same repository can resume them (paused-adoption.ts); the local artifacts stay
 * authoritative for this node while it owns the sandbox's claim (snapshot/sandbox-claim.ts). The copy happens
 * after the pause is already durable locally, so it never slows a pause down; resume and kill wait for it.
 */
export class PausedSharing {
  private readonly inflight = new Map<string, Promise<void>>();

  constructor(
    private readonly repository: SnapshotRepository,
    private readonly runtime: Pick<RuntimeDriver, 'diskFilesDir' | 'memoryMediaTypes'>,
    private readonly logger: Logger,
    /** `[node_identity].node_id`: the name this node claims sandboxes under. */
    readonly nodeId: string,
    /** This node's volumes (absent: it has none): a sandbox mounting node-affine ones is never handed over. */
    private readonly volumes?: NodeVolumes,
    /** `[orchestrator].paused_retention_secs`, recorded in each copy. */
    private readonly retentionSecs?: number,
  ) {}

  /** Why the sandbox cannot be handed to another node (its volumes are only here), or undefined. */
  staysHere(record: SandboxRecord): string | undefined {
    return bindingVolume(record, this.volumes);
  }

  /** Starts copying the artifacts in `dir` (`memory/`, `disk/`) of a paused sandbox. */
  share(record: SandboxRecord, dir: string, runtimeVersions: Record<string, string>, mode: string): void {
    const job = this.copy(record, dir, runtimeVersions, mode).catch((err: unknown) =>
      this.logger.warn({ err, sandboxId: record.id }, 'could not copy the paused sandbox to the repository'),
    );
    this.inflight.set(record.id, job);
    void job.finally(() => {
      if (this.inflight.get(record.id) === job) this.inflight.delete(record.id);
    });
  }

  /** Resolves once the copy of `sandboxId` started before now has finished (or failed). */
  async settled(sandboxId: string): Promise<void> {
    await this.inflight.get(sandboxId);
  }

  private async copy(
    record: SandboxRecord,
    dir: string,
    runtimeVersions: Record<string, string>,
    mode: string,
  ) {
    const work = join(dir, 'share');
    try {
      const claim = await this.markPaused(record.id);
      const hasMemory = record.paused?.kind === 'memory';
      await Promise.all([
        hasMemory ? archiveDir(join(dir, 'memory'), join(work, 'memory.tar')) : Promise.resolve(),
        archiveDir(this.runtime.diskFilesDir(join(dir, 'disk')), join(work, 'disk.tar')),
      ]);
      const created = await this.repository.create({
        source: { kind: 'paused', sandboxId: record.id },
        resources: record.resources,
      });
      const extra: SharedPauseExtra = {
        sandbox: { ...record },
        claim,
        node: this.nodeId,
        ...(this.retentionSecs !== undefined ? { retentionSecs: this.retentionSecs } : {}),
      };
      await this.repository.publish(created.id, {
        layers: [{ path: join(work, 'disk.tar'), mediaType: PAUSED_DISK_MEDIA_TYPE }],
        artifacts: hasMemory
          ? { memory: { path: join(work, 'memory.tar'), mediaType: this.runtime.memoryMediaTypes.paused } }
          : {},
        committed: {
          context: sandboxContext(record),
          runtimeVersions,
          virtualizationMode: mode,
          extra: { ...extra },
        },
      });
      this.logger.info(
        { sandboxId: record.id, recordId: created.id },
        'paused sandbox copied to the repository',
      );
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  /** Notes in the sandbox's claim that this node paused it; the claim a taker must swap. */
  private async markPaused(sandboxId: string): Promise<ClaimExpectation> {
    const current = await this.repository.readClaim(sandboxId);
    if (current && current.owner !== this.nodeId) throw new SandboxMovedError(sandboxId, current.owner);
    const generation = current?.generation ?? 1;
    const next = nextClaim(sandboxId, this.nodeId, generation, 'paused', current?.moved);
    const expected = current ? { owner: current.owner, generation: current.generation } : null;
    if (!(await this.repository.swapClaim(sandboxId, expected, next))) {
      throw new Error(`the claim of sandbox ${sandboxId} changed while it was being paused`);
    }
    return { owner: this.nodeId, generation };
  }

  /** Records that this node runs `sandboxId` (a create or fork here): who to name if it is lost. */
  async claimNew(sandboxId: string): Promise<void> {
    await this.repository.swapClaim(sandboxId, null, nextClaim(sandboxId, this.nodeId, 1, 'running'));
  }

  /**
   * Before this node resumes its own copy: the claim must still be this node's (or absent), and is moved one
   * generation on, so a node that saw the shared pause can no longer take it. Then the shared copy goes.
   * Throws SandboxMovedError when another node took the sandbox meanwhile.
   */
  async takeBack(sandboxId: string): Promise<void> {
    await this.inflight.get(sandboxId);
    const current = await this.repository.readClaim(sandboxId);
    const step = localResumeClaim(current, this.nodeId, sandboxId);
    if ('moved' in step) {
      throw new SandboxMovedError(sandboxId, step.moved.owner, step.moved.state === 'killed');
    }
    if (!(await this.repository.swapClaim(sandboxId, step.expected, step.next))) {
      const now = await this.repository.readClaim(sandboxId);
      if (now && now.owner !== this.nodeId) throw new SandboxMovedError(sandboxId, now.owner);
      throw new DomainError(ErrorKind.Conflict, `sandbox ${sandboxId} is being resumed elsewhere`, {
        details: { sandboxId },
      });
    }
    await this.forget(sandboxId);
  }

  /** Waits for a copy in progress and removes every shared copy of the sandbox (on resume and kill). */
  async forget(sandboxId: string): Promise<void> {
    await this.inflight.get(sandboxId);
    for (const r of await this.repository.list({ kind: 'paused', sandboxId })) {
      await this.repository
        .delete(r.id)
        .catch((err: unknown) =>
          this.logger.warn({ err, sandboxId }, 'could not remove the shared copy of a paused sandbox'),
        );
    }
  }

  /** The sandbox is gone for good (killed here): its shared copies and, if it is this node's, its claim. */
  async release(sandboxId: string): Promise<void> {
    await this.inflight.get(sandboxId);
    const current = await this.repository.readClaim(sandboxId);
    // A sandbox another node took over is that node's: its shared copies and claim are not ours to remove.
    if (current && current.owner !== this.nodeId) return;
    await this.forget(sandboxId);
    if (!current) return;
    const expected = { owner: current.owner, generation: current.generation };
    // A sandbox that moved may have stale copies on the nodes it left: they must find it gone, not unclaimed.
    if (current.moved) {
      await this.repository.swapClaim(
        sandboxId,
        expected,
        nextClaim(sandboxId, this.nodeId, current.generation + 1, 'killed', true),
      );
    } else {
      await this.repository.deleteClaim(sandboxId, expected);
    }
  }

  /**
   * Hands the sandbox's pause over to the repository (a drain), when it is there for another node to take: a
   * committed shared copy made under this node's current claim. That copy is marked as the only one before this
   * node drops its own, so from then on it is listed as a sandbox no node holds (docs/cluster.md). False, and
   * nothing marked, when there is no such copy or the sandbox {@link staysHere}.
   */
  async handOver(record: SandboxRecord): Promise<boolean> {
    if (this.staysHere(record)) return false;
    const sandboxId = record.id;
    await this.inflight.get(sandboxId);
    const current = await this.repository.readClaim(sandboxId);
    if (!current || current.owner !== this.nodeId || current.state !== 'paused') return false;
    const shared = await this.repository.list({ kind: 'paused', sandboxId, committed: true });
    const copy = shared.find((r) => {
      const claim = (r.committed?.extra as Partial<SharedPauseExtra> | undefined)?.claim;
      return claim?.owner === current.owner && claim.generation === current.generation;
    });
    if (!copy) return false;
    await this.repository.update(copy.id, (r) => {
      if (r.source.kind === 'paused') r.source = { ...r.source, handedOver: true };
    });
    return true;
  }
}
