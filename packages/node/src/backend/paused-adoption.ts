import { randomUUID } from 'node:crypto';
import { mkdir, rename, rm } from 'node:fs/promises';
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { Logger } from '../util/log.js';
import type { SandboxRecord } from '../orchestrator/types.js';
import {
  adoptionClaim,
  RepositoryError,
  type SnapshotRecord,
  type SnapshotRepository,
} from '../snapshot/index.js';
import { extractArchive } from './disk-archive.js';
import type { SharedPauseExtra } from './paused-sharing.js';
import { assertVolumesHere, type NodeVolumes } from './volume-affinity.js';
import { join } from 'node:path';

export interface AdoptionDeps {
  repository: SnapshotRepository;
  nodeId: string;
  logger: Logger;
  /** Where this node keeps the pause artifacts of `id` (memory/, disk/ and the completion marker). */
  pausedDir: (id: string) => string;
  /** The runtime's disk files dir inside a saved `disk/` dir. */
  diskFilesDir: (disk: string) => string;
  /** Writes the completion marker of a pause dir (the format the backend's resume checks). */
  markComplete: (dir: string, paused: { kind: string; pausedAt: string; bytes: number }) => Promise<void>;
  /** Makes the record's backend state this node's (its image's layers here, the image lease held). */
  localize: (record: SandboxRecord) => Promise<SandboxRecord>;
  /** This node's volumes (absent: it has none): a sandbox mounting one it lacks is not taken. */
  volumes?: NodeVolumes;
  /**
   * Told once the repository holds a copy to take, before it is fetched; never for a sandbox the repository has no
   * copy of (it may be running on another node).
   */
  onFound?: () => void;
  /** Told the sandbox (as the pause recorded it) once its claim is this node's, before its record is ready. */
  onClaimed?: (record: SandboxRecord) => void;
}

/**
 * "Unknown sandbox → look in the shared repository" (docs/cluster.md#sandboxes-that-move): a sandbox another
 * node paused into the shared repository becomes a paused sandbox of this node. Its artifacts are fetched and
 * verified (signed record, digests), then its claim is swapped from exactly the one the pause recorded to this
 * node; only then is it this node's. A lost race leaves nothing here. A sandbox mounting a volume this node does
 * not have (node-affine volumes) is refused first (503), so it stays its node's.
 */
export async function adoptSharedPause(
  deps: AdoptionDeps,
  sandboxId: string,
): Promise<SandboxRecord | undefined> {
  // The claim first (one small read): every shared copy is made under a paused claim, so without one there is
  // nothing to take, and the repository is not listed (on S3 that list grows with everything the repository holds).
  const claim = await deps.repository.readClaim(sandboxId).catch((err: unknown) => {
    // An id no claim can have (not a sandbox id) has nothing to take. Any other failure (the repository out of
    // reach, a claim that does not verify) is the answer: a "not found" would be remembered as a miss.
    if (err instanceof RepositoryError && err.reason === 'InvalidRequest') return undefined;
    throw err;
  });
  const shared =
    claim?.state === 'paused'
      ? (await deps.repository.list({ kind: 'paused', sandboxId, committed: true }))[0]
      : undefined;
  if (!shared?.committed) {
    if (claim && claim.owner !== deps.nodeId && claim.state !== 'killed') {
      throw new DomainError(
        ErrorKind.NotFound,
        claim.state === 'running'
          ? `sandbox ${sandboxId} is lost: it was running on node ${claim.owner}, which no longer serves it, and it has no paused copy in the shared repository; it comes back if node ${claim.owner} returns`
          : `sandbox ${sandboxId} not found: node ${claim.owner} holds it and its paused copy is not in the shared repository`,
        { details: { sandboxId, node: claim.owner } },
      );
    }
    return undefined;
  }
  const extra = sharedExtra(shared, sandboxId);
  // Refused before anything is fetched or swapped: the node that paused it keeps the sandbox and its copy.
  await assertVolumesHere(sandboxId, extra.sandbox.volumeMounts, {
    nodeId: deps.nodeId,
    home: extra.node,
    volumes: deps.volumes,
  });
  deps.onFound?.();
  const dir = deps.pausedDir(sandboxId);
  const tmp = `${dir}.adopt-${randomUUID()}`;
  await mkdir(tmp, { recursive: true, mode: 0o711 });
  try {
    const paused = extra.sandbox.paused;
    const memory = shared.committed.artifacts.memory;
    if (memory) {
      await extractArchive(
        await deps.repository.fetchArtifact(shared.id, 'memory'),
        join(tmp, 'memory'),
        memory,
      );
    }
    const disk = shared.committed.layers[0];
    const files = deps.diskFilesDir(join(tmp, 'disk'));
    if (disk) await extractArchive(await deps.repository.fetch(disk), files, disk);
    else await mkdir(files, { recursive: true });
    const kind = memory && paused?.kind === 'memory' ? 'memory' : 'filesystem';
    const pausedAt = paused?.pausedAt ?? shared.createdAt;
    const bytes = paused?.bytes ?? 0;
    await deps.markComplete(tmp, { kind, pausedAt, bytes });
    const step = adoptionClaim(extra.claim, deps.nodeId, sandboxId);
    if (!(await deps.repository.swapClaim(sandboxId, step.expected, step.next))) {
      const now = await deps.repository.readClaim(sandboxId).catch(() => undefined);
      // Killed meanwhile (a DELETE elsewhere, or its paused retention ran out while no node held it).
      if (now?.state === 'killed') throw notFound(sandboxId);
      throw new DomainError(
        ErrorKind.Conflict,
        `sandbox ${sandboxId} was resumed or taken by another node meanwhile`,
        { details: { sandboxId } },
      );
    }
    deps.onClaimed?.({ ...extra.sandbox, state: 'paused' });
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
    // The claim is this node's now: the shared copy is stale (the local one is authoritative).
    await deps.repository.delete(shared.id).catch((err: unknown) => {
      deps.logger.warn({ err, sandboxId }, 'could not remove the adopted shared copy');
    });
    const record: SandboxRecord = {
      ...extra.sandbox,
      state: 'paused',
      paused: {
        kind,
        pausedAt,
        artifactDir: dir,
        bytes,
        ...(paused?.reason ? { reason: paused.reason } : {}),
      },
    };
    delete record.runtime;
    delete record.extensionInstanceId;
    const local = await deps.localize(record);
    deps.logger.info(
      { sandboxId, from: extra.node, generation: step.next.generation },
      'took over a sandbox paused on another node',
    );
    return local;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

const notFound = (sandboxId: string) =>
  new DomainError(ErrorKind.NotFound, `sandbox ${sandboxId} not found`, { details: { sandboxId } });

/** What a shared pause recorded about its sandbox; Corrupt when it does not describe `sandboxId`. */
export function sharedExtra(shared: SnapshotRecord, sandboxId: string): SharedPauseExtra {
  const extra = shared.committed?.extra as Partial<SharedPauseExtra> | undefined;
  const sandbox = extra?.sandbox;
  const claim = extra?.claim;
  const claimOk =
    claim === null ||
    (typeof claim === 'object' &&
      claim !== undefined &&
      typeof claim.owner === 'string' &&
      Number.isInteger(claim.generation));
  if (!sandbox || typeof sandbox !== 'object' || sandbox.id !== sandboxId || !claimOk) {
    throw new DomainError(
      ErrorKind.Corrupt,
      `the shared pause ${shared.id} of sandbox ${sandboxId} does not describe it`,
      { details: { sandboxId } },
    );
  }
  const retention = extra.retentionSecs;
  return {
    sandbox,
    claim: claim ?? null,
    node: typeof extra.node === 'string' ? extra.node : 'unknown',
    ...(Number.isInteger(retention) && (retention as number) >= 0 ? { retentionSecs: retention } : {}),
  };
}
