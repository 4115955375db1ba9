// Paused sandboxes held by no node (docs/cluster.md#sandboxes-held-by-no-node): their only copy is the shared
// repository's, because the node that paused them was lost, or handed them over in a drain. No node lists them or
// applies their paused retention, so the cluster list asks for them here, and one node expires them.
import type { SandboxRecord } from '../orchestrator/types.js';
import {
  claimMatches,
  nextClaim,
  type ClaimExpectation,
  type SnapshotRecord,
  type SnapshotRepository,
} from '../snapshot/index.js';
import type { Logger } from '../util/log.js';
import { mapLimit } from '../util/map-limit.js';
import { sharedExtra } from './paused-adoption.js';

/** Claims read at once while looking for them (one small document each). */
const CLAIM_READS_IN_FLIGHT = 8;

export interface UnheldPause {
  /** The sandbox as its pause recorded it, `paused`. */
  sandbox: SandboxRecord;
  /** The claim the pause was made under, still the sandbox's: whoever swaps it first has the sandbox. */
  claim: ClaimExpectation;
  /** The node that paused it. */
  node: string;
  /** That node's `paused_retention_secs`, when the copy records it. */
  retentionSecs?: number;
}

export interface UnheldSearch {
  unheld: UnheldPause[];
  /** Ids of shared copies of sandboxes killed since (a delete that failed after the kill): garbage. */
  killedCopies: string[];
}

/**
 * The paused sandboxes no node holds: each committed shared pause that either its node handed over (a drain) or
 * whose node is not among `listed` (the nodes that list their own sandboxes), and whose claim is still the one
 * the pause was made under (nobody took it, resumed it or killed it since). Reads the records and commit markers
 * (small documents) and the claim of each such pause only; never a blob.
 */
export async function findUnheldPauses(
  repository: SnapshotRepository,
  listed: ReadonlySet<string>,
  logger: Logger,
): Promise<UnheldSearch> {
  const candidates = new Map<string, { copy: SnapshotRecord; pause: UnheldPause }>();
  // Newest first: of two copies of one sandbox (a stale one whose delete failed), the newer is the candidate.
  for (const copy of await repository.list({ kind: 'paused', committed: true })) {
    if (copy.source.kind !== 'paused' || candidates.has(copy.source.sandboxId)) continue;
    const sandboxId = copy.source.sandboxId;
    let pause: UnheldPause;
    try {
      const extra = sharedExtra(copy, sandboxId);
      pause = {
        sandbox: { ...extra.sandbox, state: 'paused' },
        claim: extra.claim,
        node: extra.claim?.owner ?? extra.node,
        ...(extra.retentionSecs !== undefined ? { retentionSecs: extra.retentionSecs } : {}),
      };
    } catch (err) {
      logger.warn(
        { err, sandboxId, recordId: copy.id },
        'skipping a shared pause that does not describe its sandbox',
      );
      continue;
    }
    if (copy.source.handedOver || !listed.has(pause.node)) candidates.set(sandboxId, { copy, pause });
  }
  const out: UnheldSearch = { unheld: [], killedCopies: [] };
  await mapLimit([...candidates.values()], CLAIM_READS_IN_FLIGHT, async ({ copy, pause }) => {
    const id = pause.sandbox.id;
    try {
      const claim = await repository.readClaim(id);
      if (claim?.state === 'killed') out.killedCopies.push(copy.id);
      else if (claimMatches(claim, pause.claim)) out.unheld.push(pause);
    } catch (err) {
      // One unreadable claim must not hide the others.
      logger.warn({ err, sandboxId: id }, 'skipping a shared pause whose claim cannot be read');
    }
  });
  return out;
}

/**
 * Whether the pause is past its paused retention at `now`: the retention its node recorded, else `fallbackMs` (this
 * node's); 0 keeps it. Measured from its `pausedAt`, as a node expires its own paused sandboxes.
 */
export function unheldExpired(pause: UnheldPause, now: number, fallbackMs: number): boolean {
  const retentionMs = pause.retentionSecs !== undefined ? pause.retentionSecs * 1000 : fallbackMs;
  if (retentionMs <= 0) return false;
  const at = Date.parse(pause.sandbox.paused?.pausedAt ?? '');
  return Number.isFinite(at) && now - at >= retentionMs;
}

/**
 * Kills a sandbox no node holds, by `nodeId`: its claim goes from exactly the one its pause recorded to a `killed`
 * tombstone (the compare-and-swap a kill uses: a node taking it over at the same time either took it first, and
 * this changes nothing, or fails to take it), then its shared copies are deleted. The tombstone stays, so the node
 * that paused it, if it returns with a copy, drops that copy rather than resuming it. False when the claim had
 * changed (someone has the sandbox now).
 */
export async function killUnheld(
  repository: SnapshotRepository,
  pause: UnheldPause,
  nodeId: string,
): Promise<boolean> {
  const id = pause.sandbox.id;
  const generation = (pause.claim?.generation ?? 0) + 1;
  if (!(await repository.swapClaim(id, pause.claim, nextClaim(id, nodeId, generation, 'killed', true)))) {
    return false;
  }
  for (const copy of await repository.list({ kind: 'paused', sandboxId: id }))
    await repository.delete(copy.id);
  return true;
}
