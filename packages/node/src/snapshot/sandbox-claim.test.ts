import { describe, expect, it } from 'vitest';
import { adoptionClaim, claimMatches, localResumeClaim, nextClaim } from './sandbox-claim.js';

describe('sandbox claims', () => {
  const mine = nextClaim('sbx1', 'node-a', 3, 'paused');

  it('matches by owner and generation; null matches only no claim', () => {
    expect(claimMatches(mine, { owner: 'node-a', generation: 3 })).toBe(true);
    expect(claimMatches(mine, { owner: 'node-a', generation: 2 })).toBe(false);
    expect(claimMatches(mine, { owner: 'node-b', generation: 3 })).toBe(false);
    expect(claimMatches(mine, null)).toBe(false);
    expect(claimMatches(undefined, null)).toBe(true);
    expect(claimMatches(undefined, { owner: 'node-a', generation: 3 })).toBe(false);
  });

  it('a local resume moves its own claim one generation on, or takes an absent one', () => {
    const step = localResumeClaim(mine, 'node-a', 'sbx1');
    expect(step).toMatchObject({
      expected: { owner: 'node-a', generation: 3 },
      next: { owner: 'node-a', generation: 4, state: 'running' },
    });
    expect(localResumeClaim(undefined, 'node-a', 'sbx1')).toMatchObject({
      expected: null,
      next: { owner: 'node-a', generation: 1 },
    });
  });

  it('a local resume of a sandbox another node claimed says where it went', () => {
    const theirs = nextClaim('sbx1', 'node-b', 4, 'running');
    expect(localResumeClaim(theirs, 'node-a', 'sbx1')).toEqual({ moved: theirs });
  });

  it('a take-over expects exactly the claim the shared pause recorded', () => {
    expect(adoptionClaim({ owner: 'node-a', generation: 3 }, 'node-b', 'sbx1')).toMatchObject({
      expected: { owner: 'node-a', generation: 3 },
      next: { owner: 'node-b', generation: 4, state: 'running', sandboxId: 'sbx1' },
    });
    expect(adoptionClaim(null, 'node-b', 'sbx1').next.generation).toBe(1);
  });
});
