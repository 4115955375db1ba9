import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DomainError, ErrorKind } from '@aenv/protocol';
import { nextClaim } from '../snapshot/index.js';
import { SandboxMovedError } from './paused-sharing.js';
import { findUnheldPauses, killUnheld, unheldExpired, type UnheldPause } from './unheld-pauses.js';
import { pausedRecord, quietLogger, SharedNodes } from './testing/shared-nodes.js';

/**
 * Paused sandboxes no node holds (docs/cluster.md#sandboxes-held-by-no-node), on one real posix_fs repository
 * shared by several nodes: which are found, and the kill that expires them racing a take-over.
 */
describe('paused sandboxes held by no node', () => {
  let nodes: SharedNodes;
  beforeEach(async () => {
    nodes = await SharedNodes.create();
  });
  afterEach(async () => {
    await nodes.close();
  });
  const ids = (found: { unheld: UnheldPause[] }) => found.unheld.map((p) => p.sandbox.id).sort();

  it('are the pauses of nodes not listed, and those handed over by a drain; a node listing its own hides them', async () => {
    const a = nodes.node('node-a', { retentionSecs: 600 });
    const b = nodes.node('node-b');
    for (const id of ['a1', 'a2']) {
      await a.sharing.claimNew(id);
      await nodes.pauseOn(a, id, { metadata: { owner: 'a' } });
    }
    await b.sharing.claimNew('b1');
    await nodes.pauseOn(b, 'b1');
    // Both nodes up and holding their copies: none.
    const both = new Set(['node-a', 'node-b']);
    expect(ids(await findUnheldPauses(b.repository, both, quietLogger))).toEqual([]);
    // A drained a2: its copy is marked the only one, and is found although A still lists its own.
    expect(await a.sharing.handOver(pausedRecord('a2'))).toBe(true);
    const copy = (await a.repository.list({ kind: 'paused', sandboxId: 'a2' }))[0]!;
    expect(copy.source).toEqual({ kind: 'paused', sandboxId: 'a2', handedOver: true });
    const found = await findUnheldPauses(b.repository, both, quietLogger);
    expect(ids(found)).toEqual(['a2']);
    // As the pause recorded it: paused, its metadata, its node's claim and retention.
    expect(found.unheld[0]).toMatchObject({
      sandbox: { id: 'a2', state: 'paused', metadata: { owner: 'a' }, templateId: 'tpl' },
      claim: { owner: 'node-a', generation: 1 },
      node: 'node-a',
      retentionSecs: 600,
    });
    // A lost: all of its pauses. No node listed: every pause.
    expect(ids(await findUnheldPauses(b.repository, new Set(['node-b']), quietLogger))).toEqual(['a1', 'a2']);
    expect(ids(await findUnheldPauses(b.repository, new Set(), quietLogger))).toEqual(['a1', 'a2', 'b1']);
  });

  it('are no longer found once a node takes one over (from the claim’s swap on), or it resumes where it was', async () => {
    const a = nodes.node('node-a');
    const b = nodes.node('node-b');
    await nodes.pauseOn(a, 'a1');
    await nodes.pauseOn(a, 'a2');
    const onlyB = new Set(['node-b']);
    // B takes a1 over; at the swap it is told, and the repository stops naming it (B lists it from then on).
    let atSwap: Promise<string[]> | undefined;
    const claimed: string[] = [];
    await b.adopt('a1', {
      onClaimed: (r) => {
        claimed.push(`${r.id}:${r.state}`);
        atSwap = findUnheldPauses(b.repository, onlyB, quietLogger).then(ids);
      },
    });
    expect(claimed).toEqual(['a1:paused']);
    expect(await atSwap).toEqual(['a2']);
    expect(ids(await findUnheldPauses(b.repository, onlyB, quietLogger))).toEqual(['a2']);
    // A copy left behind after its claim changed (a delete that failed) is not found either.
    await a.repository.swapClaim(
      'a2',
      { owner: 'node-a', generation: 1 },
      nextClaim('a2', 'node-c', 2, 'running'),
    );
    expect(ids(await findUnheldPauses(b.repository, onlyB, quietLogger))).toEqual([]);
  });

  it('expire by their recorded retention, else the sweeping node’s, from their pause; 0 keeps them', () => {
    const now = Date.parse('2026-06-01T12:00:00.000Z');
    const pause = (pausedAt: string, retentionSecs?: number): UnheldPause => {
      const sandbox = pausedRecord('x');
      sandbox.paused!.pausedAt = pausedAt;
      return {
        sandbox,
        claim: { owner: 'n', generation: 1 },
        node: 'n',
        ...(retentionSecs !== undefined ? { retentionSecs } : {}),
      };
    };
    const hourAgo = '2026-06-01T11:00:00.000Z';
    expect(unheldExpired(pause(hourAgo, 3600), now, 0)).toBe(true);
    expect(unheldExpired(pause(hourAgo, 3601), now, 1)).toBe(false);
    // Recorded 0: kept, whatever the sweeping node's setting.
    expect(unheldExpired(pause(hourAgo, 0), now, 1000)).toBe(false);
    // Not recorded (a copy made before it was): the sweeping node's.
    expect(unheldExpired(pause(hourAgo), now, 3600_000)).toBe(true);
    expect(unheldExpired(pause(hourAgo), now, 3601_000)).toBe(false);
    expect(unheldExpired(pause(hourAgo), now, 0)).toBe(false);
    expect(unheldExpired(pause('not a time', 1), now, 1)).toBe(false);
  });

  it('a kill leaves a tombstone and no copy: nobody takes it, and its node, back with a copy, drops it', async () => {
    const a = nodes.node('node-a');
    const b = nodes.node('node-b');
    const c = nodes.node('node-c');
    await a.sharing.claimNew('a1');
    await nodes.pauseOn(a, 'a1');
    const [pause] = (await findUnheldPauses(b.repository, new Set(['node-b']), quietLogger)).unheld;
    expect(await killUnheld(b.repository, pause!, 'node-b')).toBe(true);
    expect(await b.repository.readClaim('a1')).toMatchObject({
      owner: 'node-b',
      generation: 2,
      state: 'killed',
      moved: true,
    });
    expect(await b.repository.list({ kind: 'paused', sandboxId: 'a1' })).toEqual([]);
    expect(await c.adopt('a1')).toBeUndefined();
    const back = await a.sharing.takeBack('a1').catch((e: unknown) => e);
    expect(back).toBeInstanceOf(SandboxMovedError);
    expect((back as Error).message).toBe('sandbox a1 not found: it was killed on node node-b');
    // The same kill again finds the claim changed: nothing happens.
    expect(await killUnheld(b.repository, pause!, 'node-b')).toBe(false);
  });

  it('a kill after a take-over changes nothing; a take-over after a kill is a 404; racing, exactly one wins', async () => {
    const a = nodes.node('node-a');
    const b = nodes.node('node-b');
    const c = nodes.node('node-c');
    await nodes.pauseOn(a, 'taken');
    const [early] = (await findUnheldPauses(c.repository, new Set(), quietLogger)).unheld;
    await b.adopt('taken');
    expect(await killUnheld(c.repository, early!, 'node-c')).toBe(false);
    expect(await c.repository.readClaim('taken')).toMatchObject({ owner: 'node-b', state: 'running' });

    // The kill swaps the claim while a take-over is fetching: the take-over's swap fails, and it says not found.
    await nodes.pauseOn(a, 'killed');
    const [pause] = (await findUnheldPauses(c.repository, new Set(), quietLogger)).unheld;
    const killedClaim = nextClaim('killed', 'node-c', 2, 'killed', true);
    // The kill lands while the take-over fetches the copy (the real fetch, run after it).
    const fetch = b.repository.fetchArtifact.bind(b.repository);
    let swapped: boolean | undefined;
    vi.spyOn(b.repository, 'fetchArtifact').mockImplementationOnce(async (...args) => {
      swapped = await c.repository.swapClaim('killed', pause!.claim, killedClaim);
      return fetch(...args);
    });
    const late = await b.adopt('killed').catch((e: unknown) => e);
    expect(swapped).toBe(true);
    expect(late).toBeInstanceOf(DomainError);
    expect((late as DomainError).kind).toBe(ErrorKind.NotFound);
    expect((late as DomainError).message).toBe('sandbox killed not found');
    // Once killed, a look-up reads the tombstone and takes nothing.
    expect(await b.adopt('killed')).toBeUndefined();
    // Its copy, left by the interrupted kill, is garbage a sweep removes.
    expect((await findUnheldPauses(c.repository, new Set(), quietLogger)).killedCopies).toHaveLength(1);

    for (let i = 0; i < 5; i++) {
      const id = `race${i}`;
      await nodes.pauseOn(a, id);
      const [p] = (
        await findUnheldPauses(c.repository, new Set(['node-b', 'node-c']), quietLogger)
      ).unheld.filter((x) => x.sandbox.id === id);
      const [kill, take] = await Promise.allSettled([killUnheld(c.repository, p!, 'node-c'), b.adopt(id)]);
      const killed = kill.status === 'fulfilled' && kill.value;
      const taken = take.status === 'fulfilled' && take.value !== undefined;
      expect(killed !== taken, `${id}: killed ${String(killed)}, taken ${String(taken)}`).toBe(true);
      const claim = await c.repository.readClaim(id);
      expect(claim?.state).toBe(killed ? 'killed' : 'running');
    }
  });
});
