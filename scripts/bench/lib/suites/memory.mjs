// Idle memory per sandbox with N (default 50) sandboxes running: the sandbox's memory cgroup, envd's
// RSS and PSS, and the host-wide MemAvailable drop divided by N; next to a raw runc container of the
// same config running `sleep` (its cgroup usage).
import { Sandbox } from 'e2b';
import { mapLimit, sleep } from '../api.mjs';
import { memAvailableBytes } from '../host.mjs';
import { waitFifo } from '../raw.mjs';
import { cgroupMemory, envdPid, processMemory } from '../sandbox-facts.mjs';

const MB = 1024 * 1024;
const CREATE_CONCURRENCY = 2;

export async function memorySuite(ctx) {
  const { report, opts } = ctx;
  const main = await ctx.mainNode();
  const lab = await ctx.rawLab();
  const sandboxes = [];
  let rawBundle = null;
  try {
    const before = await memAvailableBytes();
    // Created a couple at a time (2 cores); a failed create aborts the suite after the others are killed.
    const created = await mapLimit(Array.from({ length: opts.sandboxes }), CREATE_CONCURRENCY, async () => {
      const sbx = await Sandbox.create({ ...main.sdk, timeoutMs: 3_600_000, metadata: { bench: 'memory' } });
      sandboxes.push(sbx);
      return sbx;
    });
    const id = lab.nextId('idle');
    const fifo = await lab.makeFifo(id);
    const ready = waitFifo(fifo);
    rawBundle = await lab.createBundle(id, await lab.createNetns(), [
      '/bin/sh',
      '-c',
      'echo ok > "$AENV_READY"; exec sleep 1000000',
    ]);
    await lab.runcRun(rawBundle);
    await ready;

    await sleep(opts.settleSecs * 1000);
    const cg = [];
    const anon = [];
    const rss = [];
    const pss = [];
    for (const sbx of created) {
      const c = await cgroupMemory(main, sbx.sandboxId);
      const m = await processMemory(envdPid(main, sbx.sandboxId));
      cg.push(c.usage / MB);
      anon.push(c.anon / MB);
      rss.push(m.rss / MB);
      pss.push(m.pss / MB);
    }
    const after = await memAvailableBytes();
    const rawUsage = lab.memoryUsage(rawBundle) / MB;
    const perSandboxHost = (before - after) / created.length / MB;
    const n = created.length;
    const target = { maxMean: 40, text: '≤ 40 MB mean' };
    const meanMax = (xs) =>
      `mean ${(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(1)} MB, max ${Math.max(...xs).toFixed(1)} MB`;
    report.add({
      suite: 'memory',
      op: `idle sandbox, cgroup memory.usage_in_bytes (${n} running)`,
      unit: 'MB',
      aenv: cg,
      baseline: 'raw runc container of the same config running sleep',
      raw: [rawUsage],
      target,
      note: `${meanMax(cg)}. Everything the kernel charges to the sandbox: envd's heap, page cache the sandbox touched first (shared files are charged once, to whoever touched them first), tmpfs, kernel memory.`,
    });
    report.add({
      suite: 'memory',
      op: 'idle sandbox, cgroup anonymous memory (memory.stat total_rss)',
      unit: 'MB',
      aenv: anon,
      note: `${meanMax(anon)}. The private part of the cgroup usage: in an idle sandbox almost all of it is envd's heap.`,
    });
    report.add({
      suite: 'memory',
      op: 'idle sandbox, envd RSS',
      unit: 'MB',
      aenv: rss,
      note: `${meanMax(rss)}. Counts the node binary's shared pages in full for every sandbox, so it overstates the cost.`,
    });
    report.add({
      suite: 'memory',
      op: 'idle sandbox, envd PSS',
      unit: 'MB',
      aenv: pss,
      target,
      note: `${meanMax(pss)}. Shared pages divided among the processes mapping them: envd's fair share.`,
    });
    report.add({
      suite: 'memory',
      op: 'host MemAvailable drop per sandbox',
      unit: 'MB',
      aenv: [perSandboxHost],
      note: `(MemAvailable before − after creating ${n} sandboxes) / ${n}: includes the server's own growth and kernel objects (netns, veths, overlay); other load on the machine moves it too.`,
    });
  } finally {
    if (rawBundle) await lab.destroy(rawBundle).catch(() => {});
    await mapLimit(sandboxes, 4, (s) => s.kill().catch(() => {}));
  }
}
