// The libnftables helper (native/aenv-nft.c, nft-session.ts), built by gcc as the node builds it and run in a
// network namespace of its own (`unshare -n`), so nothing here touches the host's tables: scripts apply as one
// transaction each, a refused one applies nothing and says why, a helper that dies fails only what it was
// applying, and a node whose helper cannot be built writes through `nft -f -`.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildNftHelper, NftRefused, NftSession, nftSessionRunner } from './nft-session.js';

describe('nftables helper', () => {
  let dir: string;
  let helper: string;
  const sessions: NftSession[] = [];
  const session = () => {
    const s = new NftSession(['unshare', '-n', helper]);
    sessions.push(s);
    return s;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aenv-nft-'));
    helper = await buildNftHelper(dir);
  });
  afterAll(async () => {
    for (const s of sessions) s.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('applies each script as one transaction; a refused one applies nothing and carries nft’s message', async () => {
    const s = session();
    await s.run('add table inet t\nadd chain inet t c\nadd rule inet t c ip daddr 192.0.2.1 drop\n');
    const refused = await s
      .run('add chain inet t c2\nadd rule inet t nochain drop\n')
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(NftRefused);
    expect((refused as Error).message).toMatch(
      /nft refused the transaction: Error: .*No such file or directory/,
    );
    // c2 came in the refused transaction: it is not there; c is.
    await expect(s.run('delete chain inet t c2\n')).rejects.toBeInstanceOf(NftRefused);
    await s.run('flush chain inet t c\ndelete chain inet t c\n');
  });

  it('answers requests in order when many are in flight, large scripts included', async () => {
    const s = session();
    await s.run('add table inet t\nadd set inet t big { type ipv4_addr; }\n');
    const elements = Array.from({ length: 20_000 }, (_, i) => `10.${(i >> 8) & 255}.${i & 255}.1`).join(', ');
    const results = await Promise.allSettled([
      s.run(`add element inet t big { ${elements} }\n`),
      s.run('add rule inet t nochain drop\n'),
      s.run('add chain inet t after\n'),
      s.run('delete chain inet t after\n'),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
  });

  it('a helper that dies fails what it was applying; the next script starts another', async () => {
    const s = new NftSession(['sh', '-c', `read -r x; exit 3`]);
    sessions.push(s);
    await expect(s.run('add table inet t\n')).rejects.toThrow(/the nftables helper exited \(status 3\)/);
    const fresh = session();
    await fresh.run('add table inet t\n');
  });

  it('without a compiler the node writes through nft processes, and says so once', async () => {
    const warnings: string[] = [];
    const log = { warn: (_o: unknown, msg: string) => void warnings.push(msg) };
    const { runner, close } = nftSessionRunner(join(dir, 'fallback'), log as never, 'aenv-no-such-gcc');
    // Refused by nft itself (no such table): nothing on the host changes.
    for (let i = 0; i < 2; i++)
      await expect(runner('delete table inet aenv-test-no-such-table\n')).rejects.toThrow(
        /^nft -f - exited with 1/,
      );
    close();
    expect(warnings).toEqual([
      'nftables writes spawn nft per transaction: the libnftables helper is not available',
    ]);
  });
});
