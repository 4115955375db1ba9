// create → usable: the SDK's Sandbox.create() (from `base`; returns once envd is healthy and /init is
// done) next to the raw floor: netns + veth (2× ip -batch), overlay over the same cached layers, and
// `runc run -d` of the same OCI config until the container's first process writes a FIFO.
import { performance } from 'node:perf_hooks';
import { Sandbox } from 'e2b';
import { sleep } from '../api.mjs';
import { waitFifo } from '../raw.mjs';
import { harness } from '../product.mjs';

// Pause between samples so the server's background work after a kill (slot refill, deferred removals)
// does not land inside the next sample of either side. Not a timed assertion: pacing only.
const GAP_MS = 300;

export async function createSuite(ctx) {
  const { report, opts } = ctx;
  const main = await ctx.mainNode();
  const lab = await ctx.rawLab();
  const aenv = [];
  const raw = [];

  const aenvOnce = async (keep) => {
    const t0 = performance.now();
    const sbx = await Sandbox.create({ ...main.sdk, timeoutMs: 600_000 });
    const ms = performance.now() - t0;
    await sbx.kill();
    if (keep) aenv.push(ms);
  };
  const rawOnce = async (keep) => {
    const id = lab.nextId('create');
    const fifo = await lab.makeFifo(id);
    const ready = waitFifo(fifo);
    const t0 = performance.now();
    const ns = await lab.createNetns();
    const b = await lab.createBundle(id, ns, [
      '/bin/sh',
      '-c',
      'echo ok > "$AENV_READY"; exec sleep 1000000',
    ]);
    await lab.runcRun(b);
    await ready;
    const ms = performance.now() - t0;
    await lab.destroy(b);
    if (keep) raw.push(ms);
  };

  // Two warm-up rounds are dropped; the order alternates so both sides see the same machine noise.
  for (let i = 0; i < opts.createN + 2; i++) {
    const keep = i >= 2;
    if (i % 2) {
      await rawOnce(keep);
      await aenvOnce(keep);
    } else {
      await aenvOnce(keep);
      await rawOnce(keep);
    }
    await sleep(GAP_MS);
  }
  // The same with the warm pool (the product default): each create takes a pre-started sandbox. Between
  // samples the pool is let refill to its two idle sandboxes, so every sample is a warm take; a burst of more
  // creates than the pool holds pays the cold time above for the excess.
  const warmNode = await ctx.warmNode();
  const idleWarm = () =>
    harness.hostObjects(warmNode.server).runcContainers.filter((c) => c.startsWith('warm-')).length;
  const warm = [];
  for (let i = 0; i < opts.createN + 2; i++) {
    await harness.eventually(() => idleWarm() >= 2, 'the warm pool to refill', 600, 50);
    const t0 = performance.now();
    const sbx = await Sandbox.create({ ...warmNode.sdk, timeoutMs: 600_000 });
    const ms = performance.now() - t0;
    await sbx.kill();
    if (i >= 2) warm.push(ms);
  }
  report.add({
    suite: 'create',
    op: 'Sandbox.create() → usable, warm pool',
    aenv: warm,
    baseline: 'netns+veth (2× ip -batch) + overlay + runc run -d → first process',
    raw,
    target: { maxRatio: 1.3, text: '≤ 1.3× raw' },
    note: 'the product default ([pool].warm_sandboxes = 2): a pre-started sandbox is renamed, given its egress policy and /init; the pool refills in the background.',
  });

  report.add({
    suite: 'create',
    op: 'Sandbox.create() → usable, cold (no warm pool)',
    aenv,
    baseline: 'netns+veth (2× ip -batch) + overlay + runc run -d → first process',
    raw,
    target: { maxRatio: 1.3, text: '≤ 1.3× raw' },
    note: 'aenv also applies the nft egress chain, writes /etc files, starts envd (node) and calls its /init, and takes its netns from a warm pool; the raw twin runs /bin/sh, not envd.',
  });
}
