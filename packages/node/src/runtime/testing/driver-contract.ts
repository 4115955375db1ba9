/**
 * The contract every RuntimeDriver passes (imported by the drivers' integration tests; not a test file itself):
 * create, freeze/thaw, checkpoint/restore, fork, saved disks, reconcile and stats, observed only through the
 * boundary (`RuntimeDriver`) and a command runner the driver's test supplies. Each driver supplies a
 * `DriverContractTarget`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RuntimeDriver, SandboxSpec, ToolsMount } from '../driver.js';

export interface DriverContractTarget {
  /** An initialised driver whose sandboxes this suite may create and remove freely. */
  driver: RuntimeDriver;
  tools: ToolsMount;
  /**
   * A spec with a fresh id, network namespace and uid range whose sandbox runs `workload` (a POSIX shell line,
   * with busybox applets) in the background, beside what `exec` needs.
   */
  spec(workload?: string): Promise<SandboxSpec>;
  /** Runs a shell line inside a running sandbox and returns its output (throws when it fails). */
  exec(id: string, command: string): Promise<string>;
  /** Memory checkpoints work on this host (false: those cases are skipped, and say so). */
  canCheckpoint: boolean;
  cleanup(): Promise<void>;
}

const MIB = 1024 * 1024;

/** Writes "<token> <n>" to /tmp/count every 50 ms; the token is made at start and lives only in memory. */
const COUNTER =
  't=$(cat /proc/sys/kernel/random/uuid); i=0; while :; do i=$((i+1)); echo "$t $i" > /tmp/count.new; mv /tmp/count.new /tmp/count; usleep 50000; done';

interface Count {
  token: string;
  n: number;
}

const parseCount = (text: string): Count | undefined => {
  const [token, n] = text.trim().split(' ');
  return token && n ? { token, n: Number(n) } : undefined;
};

/** Polls `read` until `ok` accepts its value, a bounded number of times (no timing is asserted). */
async function until<T>(read: () => Promise<T | undefined>, ok: (v: T) => boolean, what: string): Promise<T> {
  let last: T | undefined;
  for (let i = 0; i < 600; i++) {
    last = await read().catch(() => undefined);
    if (last !== undefined && ok(last)) return last;
    await sleep(50);
  }
  throw new Error(`gave up waiting for ${what} (last: ${JSON.stringify(last)})`);
}

export function defineDriverContract(name: string, makeTarget: () => Promise<DriverContractTarget>): void {
  describe(`runtime driver contract: ${name}`, () => {
    let t: DriverContractTarget;
    let d: RuntimeDriver;
    const made: string[] = [];

    beforeAll(async () => {
      t = await makeTarget();
      d = t.driver;
    });
    afterAll(async () => {
      for (const id of made) await d?.destroy(id).catch(() => {});
      await t?.cleanup();
    });

    const create = async (workload?: string, patch: Partial<SandboxSpec> = {}, disk?: string) => {
      const spec = { ...(await t.spec(workload)), ...patch };
      made.push(spec.id);
      const handle = await d.create(spec, { tools: t.tools, ...(disk ? { disk } : {}) });
      await d.diskLimitSet(spec.id);
      return { spec, handle };
    };
    const countOf = async (id: string) => parseCount(await t.exec(id, 'cat /tmp/count'));
    const counting = (id: string, after = 0) =>
      until(
        () => countOf(id),
        (c) => c.n > after,
        `the counter of ${id} to pass ${after}`,
      );
    const statusOf = async (id: string) => (await d.list()).find((s) => s.id === id)?.status ?? 'absent';
    const captureRoot = () => d.captureRoot;
    const place = (what: string) => join(captureRoot(), `contract-${what}-${process.pid}-${made.length}`);

    it('creates a running sandbox with its limits, reports its stats, and destroys it without a trace', async () => {
      const { spec, handle } = await create(COUNTER, {
        resources: { cpuCount: 1, memoryMB: 96, pidsLimit: 64 },
      });
      expect(handle.id).toBe(spec.id);
      expect(handle.pid).toBeGreaterThan(1);
      expect(await statusOf(spec.id)).toBe('running');
      expect(await d.isRunning(spec.id)).toBe(true);
      await counting(spec.id);
      expect(await t.exec(spec.id, 'hostname')).toBe(`${spec.hostname}\n`);
      const stats = await d.stats(spec.id);
      expect(stats.memoryLimitBytes).toBe(96 * MIB);
      expect(stats.memoryUsageBytes).toBeGreaterThan(0);
      expect(stats.pids).toBeGreaterThanOrEqual(2);
      expect(stats.cpuUsageNs).toBeGreaterThan(0);
      expect(stats.frozen).toBe(false);
      await d.destroy(spec.id);
      await d.destroy(spec.id); // idempotent
      expect((await d.list()).some((s) => s.id === spec.id)).toBe(false);
      expect(await d.isRunning(spec.id)).toBe(false);
      await expect(d.stats(spec.id)).rejects.toMatchObject({ reason: 'NotFound' });
    });

    it('refuses a spec it cannot run, with a RuntimeError that says why', async () => {
      const spec = await t.spec();
      await expect(d.create({ ...spec, id: '../escape' }, { tools: t.tools })).rejects.toMatchObject({
        name: 'RuntimeError',
        reason: 'InvalidSpec',
      });
      await expect(
        d.create(
          { ...spec, rootfs: { ...spec.rootfs, driverOptions: { 'no-such-option': '1' } } },
          { tools: t.tools },
        ),
      ).rejects.toMatchObject({ reason: 'InvalidSpec', message: expect.stringContaining('no-such-option') });
      expect((await d.list()).some((s) => s.id === spec.id)).toBe(false);
    });

    it('freezes and thaws: nothing runs while frozen, everything goes on after', async () => {
      const { spec } = await create(COUNTER);
      await counting(spec.id);
      await d.freeze(spec.id);
      expect((await d.stats(spec.id)).frozen).toBe(true);
      expect(await statusOf(spec.id)).toBe('paused');
      // A frozen sandbox runs no command either: what it shows is read from a saved disk.
      const disk = await d.captureDisk(spec.id, place('frozen'));
      const frozenAt = parseCount(await readFile(join(d.diskFilesDir(disk), 'tmp/count'), 'utf8'));
      await d.freeze(spec.id); // idempotent
      await d.thaw(spec.id);
      expect((await d.stats(spec.id)).frozen).toBe(false);
      const after = await counting(spec.id, frozenAt!.n);
      expect(after.token).toBe(frozenAt!.token);
      await d.removeDisk(disk);
      await d.removeDisk(disk); // idempotent
      expect(existsSync(disk)).toBe(false);
      await d.destroy(spec.id);
    });

    it('starts a new sandbox on a saved disk: what the first had written is there', async () => {
      const { spec } = await create(COUNTER);
      const before = await counting(spec.id);
      await t.exec(spec.id, 'echo kept > /tmp/kept');
      await d.freeze(spec.id);
      const disk = await d.captureDisk(spec.id, place('disk'));
      await d.thaw(spec.id);
      const { spec: second } = await create(undefined, {}, disk);
      expect(await t.exec(second.id, 'cat /tmp/kept')).toBe('kept\n');
      expect(await t.exec(second.id, 'cat /tmp/count')).toBe(
        await readFile(join(d.diskFilesDir(disk), 'tmp/count'), 'utf8'),
      );
      expect((await countOf(second.id))?.token).toBe(before.token);
      await Promise.all([d.destroy(spec.id), d.destroy(second.id)]);
      await d.removeDisk(disk);
    });

    describe('memory', () => {
      it('checkpoints a sandbox (stopping it) and restores it in place: its processes go on', async ({
        skip,
      }) => {
        if (!t.canCheckpoint) skip();
        const { spec } = await create(COUNTER);
        const started = await counting(spec.id, 3);
        await d.freeze(spec.id);
        const dest = place('memory');
        const result = await d.checkpoint(spec.id, dest);
        expect(result.memory).toBe(dest);
        expect(result.imageBytes).toBeGreaterThan(0);
        expect(await statusOf(spec.id)).not.toBe('running');
        expect(await d.isRunning(spec.id)).toBe(false);
        await expect(d.checkpoint(spec.id, place('again'))).rejects.toMatchObject({ name: 'RuntimeError' });
        const restored = await d.restore(spec, result.memory, { tools: t.tools });
        expect(restored.id).toBe(spec.id);
        await d.diskLimitSet(spec.id);
        expect(await statusOf(spec.id)).toBe('running');
        // The same process: its in-memory token, and a count that went on from where it stopped.
        const after = await counting(spec.id, started.n);
        expect(after.token).toBe(started.token);
        await d.destroy(spec.id);
      });

      it('forks: a leave-running checkpoint with its disk, restored under a new id, and both go on apart', async ({
        skip,
      }) => {
        if (!t.canCheckpoint) skip();
        const { spec } = await create(COUNTER);
        await counting(spec.id, 3);
        const memory = place('fork-memory');
        const diskDest = place('fork-disk');
        await d.checkpoint(spec.id, memory, { leaveRunning: true, diskDest });
        expect(await statusOf(spec.id)).toBe('running');
        const atFork = parseCount(await readFile(join(d.diskFilesDir(diskDest), 'tmp/count'), 'utf8'))!;
        const child = await t.spec();
        made.push(child.id);
        await d.restore(child, memory, { tools: t.tools, disk: diskDest });
        await d.diskLimitSet(child.id);
        const [p, c] = await Promise.all([counting(spec.id, atFork.n), counting(child.id, atFork.n)]);
        expect([p.token, c.token]).toEqual([atFork.token, atFork.token]);
        await t.exec(child.id, 'echo child-only > /tmp/mine');
        expect(await t.exec(spec.id, 'cat /tmp/mine 2>/dev/null || echo none')).toBe('none\n');
        await Promise.all([d.destroy(spec.id), d.destroy(child.id)]);
        await d.removeDisk(diskDest);
      });
    });

    it('reconciles: everything of a sandbox not kept is removed, kept ones run on', async () => {
      const [{ spec: kept }, { spec: lost }] = [await create(COUNTER), await create(COUNTER)];
      const report = await d.reconcile([kept.id]);
      expect(JSON.stringify(report)).toContain(lost.id);
      expect(JSON.stringify(report)).not.toContain(kept.id);
      expect((await d.list()).some((s) => s.id === lost.id)).toBe(false);
      expect(await statusOf(kept.id)).toBe('running');
      await counting(kept.id);
      expect(JSON.stringify(await d.reconcile([kept.id]))).not.toContain(lost.id);
      await d.destroy(kept.id);
    });
  });
}
