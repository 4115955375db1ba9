// Ownership of a sandbox whose paused state lives in a shared repository (docs/cluster.md#sandbox-ownership).
// One small signed document per sandbox, `claims/<sandboxId>`, names the node allowed to run it and a generation
// that every change of hands (and every resume) increases. Whoever resumes a sandbox first swaps the claim from
// what it last saw to itself; a node that lost the swap must not run the sandbox.

import { z } from 'zod';

export const sandboxClaimSchema = z
  .object({
    sandboxId: z.string().min(1).max(128),
    owner: z.string().min(1).max(253),
    generation: z.number().int().nonnegative(),
    /**
     * What the owner last said: `running` (not in the repository), `paused` (its pause is shared) or `killed` (a
     * tombstone, kept only for a sandbox that moved: a node holding an older copy must learn it is gone).
     */
    state: z.enum(['running', 'paused', 'killed']),
    /** The sandbox changed hands at least once (stale copies may exist on the nodes it left). */
    moved: z.boolean().optional(),
    updatedAt: z.string(),
  })
  .strict();

export type SandboxClaim = z.infer<typeof sandboxClaimSchema>;

/** What a swap expects to find: a claim (compared by owner and generation) or none at all. */
export type ClaimExpectation = Pick<SandboxClaim, 'owner' | 'generation'> | null;

export function claimMatches(current: SandboxClaim | undefined, expected: ClaimExpectation): boolean {
  if (expected === null) return current === undefined;
  return (
    current !== undefined && current.owner === expected.owner && current.generation === expected.generation
  );
}

/**
 * The claim `node` writes to resume a sandbox it holds locally: the current one must be its own (or absent: the
 * sandbox never moved); anything else means the sandbox moved to another node, and `moved` names it.
 */
export function localResumeClaim(
  current: SandboxClaim | undefined,
  node: string,
  sandboxId: string,
): { next: SandboxClaim; expected: ClaimExpectation } | { moved: SandboxClaim } {
  if (current && current.owner !== node) return { moved: current };
  return {
    expected: current ? { owner: current.owner, generation: current.generation } : null,
    next: nextClaim(sandboxId, node, (current?.generation ?? 0) + 1, 'running', current?.moved),
  };
}

/**
 * The claim `node` writes to take over a sandbox another node paused into the repository: the swap succeeds
 * only if the claim is still exactly what the shared pause recorded (nobody resumed or took it since).
 */
export function adoptionClaim(
  recorded: ClaimExpectation,
  node: string,
  sandboxId: string,
): { next: SandboxClaim; expected: ClaimExpectation } {
  return {
    expected: recorded,
    next: nextClaim(sandboxId, node, (recorded?.generation ?? 0) + 1, 'running', true),
  };
}

export function nextClaim(
  sandboxId: string,
  owner: string,
  generation: number,
  state: SandboxClaim['state'],
  moved?: boolean,
): SandboxClaim {
  return {
    sandboxId,
    owner,
    generation,
    state,
    ...(moved ? { moved } : {}),
    updatedAt: new Date().toISOString(),
  };
}
