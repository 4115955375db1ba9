// Pause / resume / snapshot / fork for an idle `base` sandbox and one holding 256 MB, through the API
// (docs/snapshots.md, docs/architecture.md#lifecycle), next to raw `runc checkpoint|restore` with the same CRIU, CRIU config
// and environment on a raw container of the same rootfs and OCI config, interleaved in the same run.
//   pause (API call → durable)        vs  runc checkpoint (stop)
//   resume, memory still resident     vs  runc resume (freezer thaw)          target: ≤ 10 ms absolute
//   resume from disk (grace 0 node)   vs  runc restore
//   snapshot                          vs  runc checkpoint --leave-running
//   fork ×4                           vs  one --leave-running dump + 4 concurrent (upper copy + overlay + restore)
// A route that is missing or answers 501 gives "not available yet" for its rows; the raw twins still run.
import { performance } from 'node:perf_hooks';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox } from 'e2b';
import { timedApi, Unavailable } from '../api.mjs';
import { RAW_BASE, waitFifo } from '../raw.mjs';
import { describe, NOT_AVAILABLE } from '../report.mjs';
import { cgroupMemory, sandboxHostPaths } from '../sandbox-facts.mjs';
import { traceLabel } from '../trace.mjs';
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

const FORK_COUNT = 4;
const MB = 1024 * 1024;
const KINDS = [
  { name: 'idle', mb: 0 },
  { name: '256 MB', mb: 256 },
];
const HOLD_PATH = '/tmp/aenv-bench-hold.py';
// Matches the python process but not the shell running pgrep (its command line holds "[a]env").
const HOLD_PGREP = "pgrep -f '[a]env-bench-hold.py'";
const HOLD_READY = '/tmp/aenv-bench-hold.ready';
// Allocates and touches `mb` MiB (every page written), signals readiness on argv[2], then sleeps.
const HOLD_SRC = `import sys, time
n = int(sys.argv[1]) << 20
buf = bytearray(n)
for i in range(0, n, 4096):
    buf[i] = 1
with open(sys.argv[2], 'w') as f:
    f.write('ok\\n')
while True:
    time.sleep(3600)
`;

/**
 * The first failure of an operation turns it off for the rest of the run, keeping why: `not available yet`
 * (route missing or 501) or `failed` (anything else; the other operations still run).
 */
class Availability {
  constructor() {
    this.off = new Map();
  }
  available(op) {
    return !this.off.has(op);
  }
  async attempt(op, fn) {
    if (!this.available(op)) return null;
    try {
      return await fn();
    } catch (e) {
      this.off.set(op, { status: e instanceof Unavailable ? NOT_AVAILABLE : 'failed', reason: describe(e) });
      return null;
    }
  }
}

/** Waits until a paused sandbox's frozen container is gone (its memory cgroup removed), up to 30 s. */
async function waitReleased(node, id) {
  const cgroup = sandboxHostPaths(node, id).memoryCgroup;
  const deadline = performance.now() + 30_000;
  while (existsSync(cgroup)) {
    if (performance.now() > deadline)
      throw new Error(`paused sandbox ${id} still holds its memory after 30 s`);
    await sleep(10);
  }
}

async function aenvSandbox(node, mb) {
  const sbx = await Sandbox.create({ ...node.sdk, timeoutMs: 3_600_000, metadata: { bench: 'pause' } });
  if (mb > 0) {
    await sbx.files.write(HOLD_PATH, HOLD_SRC);
    await sbx.commands.run(`setsid nohup python3 ${HOLD_PATH} ${mb} ${HOLD_READY} >/dev/null 2>&1 &`);
    await sbx.commands.run(
      `for i in $(seq 1200); do [ -e ${HOLD_READY} ] && exit 0; sleep 0.1; done; exit 1`,
      {
        timeoutMs: 180_000,
      },
    );
  }
  return sbx;
}

const timed = async (fn) => {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
};

export async function pauseSuite(ctx) {
  const { report, opts } = ctx;
  const main = await ctx.mainNode();
  const lab = await ctx.rawLab();
  const avail = new Availability();
  const sandboxes = [];

  // Is pause there at all? Decides whether the resume-from-disk node is worth starting.
  const probe = await aenvSandbox(main, 0);
  sandboxes.push(probe);
  const pauseProbe = await avail.attempt('pause', async () => {
    await timedApi(
      main.server,
      'POST',
      `/sandboxes/${probe.sandboxId}/pause`,
      undefined,
      [204],
      'POST /sandboxes/{id}/pause',
    );
    await timedApi(
      main.server,
      'POST',
      `/sandboxes/${probe.sandboxId}/connect`,
      { timeout: 3600 },
      [201],
      'POST /sandboxes/{id}/connect',
    );
    return true;
  });
  const disk = pauseProbe ? await ctx.diskNode() : null;

  try {
    for (const kind of KINDS) {
      // One group of phases per workload: a median over idle and 256 MB answers together describes neither.
      traceLabel(kind.name);
      /** @type {Record<string, number[]>} */
      const s = {
        pause: [],
        resident: [],
        pauseDisk: [],
        fromDisk: [],
        snapshot: [],
        snapshotHeld: [],
        fork: [],
      };
      /** @type {Record<string, number[]>} */
      const r = { checkpoint: [], restore: [], freeze: [], thaw: [], leave: [], fork: [] };
      const notes = [];
      let forkChildFailures = 0;

      const sbx = await aenvSandbox(main, kind.mb);
      sandboxes.push(sbx);
      const diskSbx = disk ? await aenvSandbox(disk, kind.mb) : null;
      if (diskSbx) sandboxes.push(diskSbx);
      const aenvMem = (await cgroupMemory(main, sbx.sandboxId)).usage / MB;

      const id = lab.nextId(`cr${kind.mb}`);
      const fifo = await lab.makeFifo(id);
      const ready = waitFifo(fifo, 180_000);
      const args = ['/usr/bin/python3', '-c', HOLD_SRC, String(kind.mb), `/agentenv/ready/${id}`];
      const b = await lab.createBundle(id, await lab.createNetns(), args);
      await lab.runcRun(b);
      await ready;
      const rawMem = lab.memoryUsage(b) / MB;
      notes.push(
        `memory charged before the first pause: aenv sandbox ${aenvMem.toFixed(0)} MB (envd + workload), raw container ${rawMem.toFixed(0)} MB (python only)`,
      );

      const api = (node, method, path, body, ok, label) =>
        timedApi(node.server, method, path, body, ok, label);
      const aenvRound = async () => {
        await avail.attempt('pause', async () => {
          s.pause.push(
            (
              await api(
                main,
                'POST',
                `/sandboxes/${sbx.sandboxId}/pause`,
                undefined,
                [204],
                'POST /sandboxes/{id}/pause',
              )
            ).ms,
          );
          s.resident.push(
            (
              await api(
                main,
                'POST',
                `/sandboxes/${sbx.sandboxId}/connect`,
                { timeout: 3600 },
                [201],
                'POST /sandboxes/{id}/connect',
              )
            ).ms,
          );
          if (diskSbx) {
            s.pauseDisk.push(
              (
                await api(
                  disk,
                  'POST',
                  `/sandboxes/${diskSbx.sandboxId}/pause`,
                  undefined,
                  [204],
                  'POST /sandboxes/{id}/pause',
                )
              ).ms,
            );
            // Timed from disk only: the frozen container is released in the background right after the pause.
            await waitReleased(disk, diskSbx.sandboxId);
            s.fromDisk.push(
              (
                await api(
                  disk,
                  'POST',
                  `/sandboxes/${diskSbx.sandboxId}/connect`,
                  { timeout: 3600 },
                  [201],
                  'POST /sandboxes/{id}/connect',
                )
              ).ms,
            );
          }
        });
        await avail.attempt('snapshot', async () => {
          const { ms, ans } = await api(
            main,
            'POST',
            `/sandboxes/${sbx.sandboxId}/snapshots`,
            {},
            [201],
            'POST /sandboxes/{id}/snapshots',
          );
          s.snapshot.push(ms);
          const held = /capture;dur=([\d.]+)/.exec(ans.headers.get('server-timing') ?? '');
          if (held) s.snapshotHeld.push(Number(held[1]));
          await main.server.api('DELETE', `/templates/${ans.body.snapshotID}`);
        });
        await avail.attempt('fork', async () => {
          const { ms, ans } = await api(
            main,
            'POST',
            `/sandboxes/${sbx.sandboxId}/fork`,
            { count: FORK_COUNT, timeout: 600 },
            [201],
            'POST /sandboxes/{id}/fork',
          );
          const children = ans.body.filter((c) => c.sandbox).map((c) => c.sandbox.sandboxID);
          forkChildFailures += ans.body.length - children.length;
          await Promise.all(children.map((c) => main.server.api('DELETE', `/sandboxes/${c}`)));
          if (children.length === FORK_COUNT) s.fork.push(ms);
        });
      };
      const rawRound = async (i) => {
        const img = await lab.imageDir(`${id}-stop-${i}`);
        r.checkpoint.push(await timed(() => lab.checkpoint(b, img)));
        await lab.deleteContainer(b);
        r.restore.push(await timed(() => lab.restore(b, img)));
        r.freeze.push(await timed(() => lab.pause(b)));
        r.thaw.push(await timed(() => lab.resume(b)));
        const img2 = await lab.imageDir(`${id}-leave-${i}`);
        r.leave.push(await timed(() => lab.checkpoint(b, img2, { leaveRunning: true })));
        // Fork: the children's netns exist beforehand (aenv takes them from its warm pool).
        const nss = [];
        for (let k = 0; k < FORK_COUNT; k++) nss.push(await lab.createNetns());
        const img3 = await lab.imageDir(`${id}-fork-${i}`);
        const children = [];
        r.fork.push(
          await timed(async () => {
            await lab.checkpoint(b, img3, { leaveRunning: true });
            await Promise.all(
              nss.map(async (ns) => {
                const c = await lab.createBundle(lab.nextId('fork'), ns, args, { seedUpper: b.upper });
                children.push(c);
                await lab.restore(c, img3);
              }),
            );
          }),
        );
        for (const c of children) await lab.destroy(c);
        await rm(join(RAW_BASE, 'img'), { recursive: true, force: true });
      };

      for (let i = 0; i < opts.crN; i++) {
        if (i % 2) {
          await rawRound(i);
          await aenvRound();
        } else {
          await aenvRound();
          await rawRound(i);
        }
      }

      // The state must have survived every round on both sides.
      if (kind.mb > 0 && s.pause.length > 0) {
        const alive = await sbx.commands.run(HOLD_PGREP).then(
          () => true,
          () => false,
        );
        if (!alive) notes.push('the aenv sandbox lost its 256 MB python process across pause/resume');
      }
      const rawState = await lab.state(b);
      if (rawState !== 'running') notes.push(`the raw container is ${rawState} after the rounds`);
      if (forkChildFailures)
        notes.push(`${forkChildFailures} fork children failed (their rounds are left out)`);
      await lab.destroy(b);

      const row = (op, aenvKey, availKey, baseline, rawSamples, target, extraNote) => {
        const note = [extraNote, ...notes].filter(Boolean).join('; ') || null;
        if (!avail.available(availKey)) {
          const { status, reason } = avail.off.get(availKey);
          report.notMeasured({
            suite: 'pause',
            op: `${op} (${kind.name})`,
            status,
            reason,
            baseline,
            raw: rawSamples,
            target,
          });
        } else {
          report.add({
            suite: 'pause',
            op: `${op} (${kind.name})`,
            aenv: s[aenvKey],
            baseline,
            raw: rawSamples,
            target,
            note,
          });
        }
      };
      row('pause (API call → durable)', 'pause', 'pause', 'runc checkpoint (stop)', r.checkpoint, {
        maxRatio: 1.2,
        text: '≤ 1.2× raw',
      });
      row('resume, memory resident', 'resident', 'pause', 'runc resume (freezer thaw)', r.thaw, {
        maxMedian: 10,
        text: '≤ 10 ms',
      });
      if (disk || !avail.available('pause')) {
        row(
          'pause, memory released right after (in the background)',
          'pauseDisk',
          'pause',
          'runc checkpoint (stop)',
          r.checkpoint,
          null,
          'node with resident_pause_grace_secs = 0',
        );
        row('resume from disk', 'fromDisk', 'pause', 'runc restore', r.restore, {
          maxRatio: 1.2,
          text: '≤ 1.2× raw',
        });
      }
      row(
        'snapshot, sandbox held (capture, excluding publish)',
        'snapshotHeld',
        'snapshot',
        'runc checkpoint --leave-running',
        r.leave,
        { maxRatio: 1.2, text: '≤ 1.2× raw' },
        'server-side, from the Server-Timing header: Snapshotting state until the sandbox runs again',
      );
      row(
        'snapshot, API call (capture + publish into the repository)',
        'snapshot',
        'snapshot',
        'runc checkpoint --leave-running',
        r.leave,
        null,
        'includes archiving memory and disk and the posix_fs repository write',
      );
      row(
        `fork ×${FORK_COUNT}`,
        'fork',
        'fork',
        `--leave-running dump + ${FORK_COUNT} concurrent (upper copy + overlay + restore)`,
        r.fork,
        { maxRatio: 1.2, text: '≤ 1.2× raw' },
      );
      if (kind.mb === 0 && s.fromDisk.length) ctx.shared.resumeFromDiskIdle = s.fromDisk;
      report.add({
        suite: 'pause',
        op: `freezer pause alone (${kind.name})`,
        aenv: null,
        baseline: 'runc pause',
        raw: r.freeze,
      });
    }
  } finally {
    traceLabel('');
    for (const sbx of sandboxes) await sbx.kill().catch(() => {});
  }
}
