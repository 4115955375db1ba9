// The control plane as the e2b SDK and raw clients see it: list/filter/paginate, timeouts, connect, kill and
// node counters. Its wire shapes (x-next-token, error bodies, statuses) are conformance cases
// (packages/protocol/src/conformance/cases/api.ts, run by conformance.test.ts).
import { beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, SandboxNotFoundError, TimeoutError, type SandboxInfo } from 'e2b';
import { describeNode } from './fixture.js';

async function allPages(p: {
  hasNext: boolean;
  nextItems(): Promise<SandboxInfo[]>;
}): Promise<SandboxInfo[][]> {
  const pages: SandboxInfo[][] = [];
  for (let i = 0; i < 20 && p.hasNext; i++) pages.push(await p.nextItems());
  return pages;
}

describe('control plane through the e2b SDK and raw HTTP', () => {
  const { server } = describeNode({ name: 'api' });
  const run = `r${Date.now()}`;
  const made: Sandbox[] = [];

  beforeAll(async () => {
    // Created one after another so their start times order them.
    for (let i = 0; i < 3; i++) {
      made.push(
        await Sandbox.create({ timeoutMs: 300_000, metadata: { run, idx: String(i), odd: String(i % 2) } }),
      );
    }
  });

  it('lists with a metadata filter, newest first, in pages until hasNext is false', async () => {
    const ids = made.map((s) => s.sandboxId);
    const one = await allPages(Sandbox.list({ query: { metadata: { run } }, limit: 2 }));
    expect(one.map((p) => p.map((s) => s.sandboxId))).toEqual([[ids[2], ids[1]], [ids[0]]]);
    const byOne = await allPages(Sandbox.list({ query: { metadata: { run, odd: '0' } }, limit: 1 }));
    expect(byOne.map((p) => p.map((s) => s.sandboxId))).toEqual([[ids[2]], [ids[0]]]);
    const none = Sandbox.list({ query: { metadata: { run, odd: '7' } } });
    expect(await none.nextItems()).toEqual([]);
    expect(none.hasNext).toBe(false);

    const info = (await Sandbox.list({ query: { metadata: { run, idx: '1' } } }).nextItems())[0]!;
    expect(info).toMatchObject({
      sandboxId: ids[1],
      state: 'running',
      metadata: { run, idx: '1', odd: '1' },
      name: 'base',
    });
    expect(info.cpuCount).toBeGreaterThan(0);
    expect(info.memoryMB).toBeGreaterThanOrEqual(128);
    expect(info.envdVersion).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('matches metadata values with spaces and reserved characters', async () => {
    const odd = { run, tricky: 'a b&c=d/é%' };
    const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: odd });
    try {
      const found = await Sandbox.list({ query: { metadata: { tricky: 'a b&c=d/é%' } } }).nextItems();
      expect(found.map((s) => s.sandboxId)).toEqual([sbx.sandboxId]);
      expect(found[0]!.metadata).toEqual(odd);
    } finally {
      await sbx.kill();
    }
  });

  it('honours the order query parameter the SDK sends', async () => {
    const ids = made.map((s) => s.sandboxId);
    const asc = await Sandbox.list({ query: { metadata: { run } }, order: 'asc' }).nextItems();
    expect(asc.map((s) => s.sandboxId)).toEqual(ids);
  });

  it('honours the template query parameter the SDK sends', async () => {
    const byAlias = await Sandbox.list({ query: { metadata: { run }, template: 'base' } }).nextItems();
    expect(byAlias).toHaveLength(3);
    const otherTemplate = await Sandbox.list({
      query: { metadata: { run }, template: 'no-such' },
    }).nextItems();
    expect(otherTemplate).toEqual([]);
  });

  it('lists running sandboxes on the deprecated GET /sandboxes', async () => {
    const v1 = await server.api('GET', `/sandboxes?metadata=${encodeURIComponent(`run=${run}`)}`);
    expect(v1.status).toBe(200);
    expect(new Set(v1.body.map((s: { sandboxID: string }) => s.sandboxID))).toEqual(
      new Set(made.map((s) => s.sandboxId)),
    );
    for (const s of v1.body) expect(s.state).toBe('running');
  });

  it('moves endAt with setTimeout, and connect never shortens it', async () => {
    const sbx = made[0]!;
    const before = await sbx.getInfo();
    await sbx.setTimeout(600_000);
    const later = await sbx.getInfo();
    expect(later.endAt.getTime()).toBeGreaterThan(before.endAt.getTime() + 250_000);
    await sbx.setTimeout(200_000);
    const shorter = await sbx.getInfo();
    expect(shorter.endAt.getTime()).toBeLessThan(later.endAt.getTime() - 350_000);

    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 });
    expect((await again.getInfo()).endAt.getTime()).toBeGreaterThanOrEqual(shorter.endAt.getTime());
    expect((await again.commands.run('echo via-connect')).stdout).toBe('via-connect\n');
    await expect(Sandbox.connect('01990000-0000-7000-8000-000000000000')).rejects.toBeInstanceOf(
      SandboxNotFoundError,
    );
  });

  it('counts sandboxes and allocations on /nodes as they are created and killed', async () => {
    const nodes = async () => {
      const r = await server.api('GET', '/nodes');
      expect(r.status).toBe(200);
      expect(r.body).toHaveLength(1);
      return r.body[0];
    };
    const before = await nodes();
    const raw = await server.api('POST', '/v2/sandboxes', {
      templateID: 'base',
      timeout: 120,
      metadata: { run: `${run}-n` },
    });
    expect(raw.status).toBe(201);
    expect(raw.headers.get('x-agentenv-sandbox-id')).toBe(raw.body.sandboxID);
    expect(raw.body).toMatchObject({
      templateID: expect.any(String),
      clientID: '',
      trafficAccessToken: null,
    });
    // Every v2 sandbox is secured (NewSandboxV2).
    expect(raw.body.envdAccessToken).toMatch(/.+/);
    const detail = await server.api('GET', `/sandboxes/${raw.body.sandboxID}`);
    const cpu = detail.body.cpuCount as number;
    const memBytes = (detail.body.memoryMB as number) * 1024 * 1024;

    const during = await nodes();
    expect(during.sandboxCount).toBe(before.sandboxCount + 1);
    expect(during.metrics.allocatedCPU).toBe(before.metrics.allocatedCPU + cpu);
    expect(during.metrics.allocatedMemoryBytes).toBe(before.metrics.allocatedMemoryBytes + memBytes);
    expect(during.createSuccesses).toBe(before.createSuccesses + 1);
    expect(during.createFails).toBe(before.createFails);

    expect((await server.api('DELETE', `/sandboxes/${raw.body.sandboxID}`)).status).toBe(204);
    const after = await nodes();
    expect(after.sandboxCount).toBe(before.sandboxCount);
    expect(after.metrics.allocatedCPU).toBe(before.metrics.allocatedCPU);
    expect(after.metrics.allocatedMemoryBytes).toBe(before.metrics.allocatedMemoryBytes);
    expect(after.createSuccesses).toBe(before.createSuccesses + 1);
    expect((await server.api('DELETE', `/sandboxes/${raw.body.sandboxID}`)).body).toEqual({
      code: 404,
      message: `sandbox ${raw.body.sandboxID} not found`,
    });
  });

  it('raises TimeoutError naming the kill when a sandbox dies during commands.run', async () => {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    const running = sbx.commands.run('echo started; sleep 60').catch((e: unknown) => e);
    // The command is running once its stream delivered output; kill it from outside.
    for (let i = 0; i < 100; i++) {
      const ps = await sbx.commands.list();
      if (ps.some((p) => p.args.includes('echo started; sleep 60'))) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await Sandbox.kill(sbx.sandboxId)).toBe(true);
    const err = await running;
    expect(err).toBeInstanceOf(TimeoutError);
    expect((err as Error).message).toMatch(/sandbox was killed/);
    expect(await sbx.isRunning()).toBe(false);
    await expect(sbx.getInfo()).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await sbx.kill()).toBe(false);
    // The killed sandbox is gone from every list.
    expect((await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId)).toBe(false);
  });
});
