// Resume from disk of a sandbox holding 256 MB / 1 GB, eager and lazy (docs/runtime.md#lazy-restore), as time
// to the first command: `POST /sandboxes/{id}/connect` → 201, then `commands.run('true')` answered. Two
// nodes that release a paused sandbox's memory at once: one restores eagerly, one lazily
// (runtime.lazy_restore_min_mib = 64). Next to them, in the same run, the raw twins: `runc restore` and
// `runc restore --lazy-pages` + `criu lazy-pages`, each followed by /bin/true in the container.
// "All pages in" = until the lazy-pages daemon exits. Every round also checks the memory's checksum.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox } from 'e2b';
import { timedApi } from '../api.mjs';
import { nodePaths } from '../nodes.mjs';
import { RAW_BASE, waitFifo } from '../raw.mjs';
import { describe } from '../report.mjs';
import { sandboxHostPaths } from '../sandbox-facts.mjs';

const KINDS = [
  { name: '256 MB', mb: 256 },
  { name: '1 GB', mb: 1024 },
];
const HOLD_PATH = '/tmp/aenv-bench-hold.py';
const SUM = '/tmp/aenv-bench-hold.sum';
const SUM_AGAIN = '/tmp/aenv-bench-hold.sum2';
// Fills `mb` MiB (two bytes of every page, varying per page), writes the buffer's sha256 to argv[2], then
// sleeps; SIGUSR1 writes the sha256 again to argv[3] (the check after a restore reads every page).
const HOLD_SRC = `import hashlib, os, signal, sys, time
n = int(sys.argv[1]) << 20
buf = bytearray(n)
for i in range(0, n, 4096):
    buf[i] = (i >> 12) & 255
    buf[i + 1] = 7
def put(path):
    with open(path + '.tmp', 'w') as f:
        f.write(hashlib.sha256(buf).hexdigest())
    os.rename(path + '.tmp', path)
signal.signal(signal.SIGUSR1, lambda *a: put(sys.argv[3]))
with open(sys.argv[2] + '.pid', 'w') as f:
    f.write(str(os.getpid()))
put(sys.argv[2])
while True:
    time.sleep(3600)
`;
const CHECK_CMD = `rm -f ${SUM_AGAIN}; kill -USR1 "$(cat ${SUM}.pid)"; for i in $(seq 600); do [ -e ${SUM_AGAIN} ] && break; sleep 0.1; done; cmp -s ${SUM} ${SUM_AGAIN}`;

async function holdingSandbox(node, mb) {
  const sbx = await Sandbox.create({ ...node.sdk, timeoutMs: 3_600_000, metadata: { bench: 'resume' } });
  await sbx.files.write(HOLD_PATH, HOLD_SRC);
  await sbx.commands.run(`setsid nohup python3 ${HOLD_PATH} ${mb} ${SUM} ${SUM_AGAIN} >/dev/null 2>&1 &`);
  await sbx.commands.run(`for i in $(seq 1200); do [ -e ${SUM} ] && exit 0; sleep 0.1; done; exit 1`, {
    timeoutMs: 180_000,
  });
  return sbx;
}

/** Lazy-pages logs under the node's CRIU work dirs written since `since` (ms epoch): lazy restores done. */
function lazyLogsSince(runtimePath, since) {
  const dir = join(runtimePath, 'criu-work');
  if (!existsSync(dir)) return 0;
  return readdirSync(dir).filter((id) => {
    const log = join(dir, id, 'restore', 'lazy-pages.log');
    return existsSync(log) && statSync(log).mtimeMs >= since;
  }).length;
}

/** PIDs of `criu lazy-pages` daemons whose work dir is under `runtimePath`. */
function lazyDaemons(runtimePath) {
  const out = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const argv = readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0');
      if (argv.includes('lazy-pages') && argv.some((a) => a.startsWith(`${runtimePath}/`))) out.push(e);
    } catch {
      // gone
    }
  }
  return out;
}

async function waitReleased(node, id) {
  const cgroup = sandboxHostPaths(node, id).memoryCgroup;
  const deadline = performance.now() + 60_000;
  while (existsSync(cgroup)) {
    if (performance.now() > deadline) throw new Error(`paused sandbox ${id} still holds its memory`);
    await sleep(10);
  }
}

/** One pause + resume from disk: time to first command, and (lazy node) until the daemon is gone. */
async function aenvRound(node, sbx, lazy) {
  await timedApi(node.server, 'POST', `/sandboxes/${sbx.sandboxId}/pause`, undefined, [204], 'pause');
  await waitReleased(node, sbx.sandboxId);
  const since = Date.now() - 1;
  const t0 = performance.now();
  await timedApi(
    node.server,
    'POST',
    `/sandboxes/${sbx.sandboxId}/connect`,
    { timeout: 3600 },
    [201],
    'connect',
  );
  const connected = performance.now() - t0;
  await sbx.commands.run('true');
  const first = performance.now() - t0;
  let allIn = null;
  const runtimePath = nodePaths(node.name).runtimePath;
  if (lazy) {
    for (let i = 0; i < 60_000 && lazyDaemons(runtimePath).length > 0; i++) await sleep(5);
    allIn = performance.now() - t0;
  }
  const wasLazy = lazyLogsSince(runtimePath, since) > 0;
  const intact = await sbx.commands.run(CHECK_CMD, { timeoutMs: 120_000 }).then(
    () => true,
    () => false,
  );
  return { connected, first, allIn, wasLazy, intact };
}

export async function resumeSuite(ctx) {
  const { report, opts } = ctx;
  const sysctl = readFileSync('/proc/sys/vm/unprivileged_userfaultfd', 'utf8').trim();
  const eagerNode = await ctx.eagerNode();
  const lazyNode = sysctl === '1' ? await ctx.lazyNode() : null;
  const lab = await ctx.rawLab();
  const sandboxes = [];
  try {
    for (const kind of KINDS) {
      /** @type {Record<string, number[]>} */
      const s = { eagerConnect: [], eager: [], lazyConnect: [], lazy: [], lazyAll: [] };
      /** @type {Record<string, number[]>} */
      const r = { eager: [], lazy: [], lazyAll: [] };
      const notes = [];
      const eagerSbx = await holdingSandbox(eagerNode, kind.mb);
      sandboxes.push(eagerSbx);
      const lazySbx = lazyNode ? await holdingSandbox(lazyNode, kind.mb) : null;
      if (lazySbx) sandboxes.push(lazySbx);

      const id = lab.nextId(`lz${kind.mb}`);
      const fifo = await lab.makeFifo(id);
      const ready = waitFifo(fifo, 180_000);
      const args = [
        '/bin/sh',
        '-c',
        `python3 -c "$0" ${kind.mb} /tmp/s /tmp/s2 & while [ ! -e /tmp/s ]; do sleep 0.1; done; echo > /agentenv/ready/${id}; wait`,
        HOLD_SRC,
      ];
      const b = await lab.createBundle(id, await lab.createNetns(), args, { memoryMb: 2048 });
      await lab.runcRun(b);
      await ready;

      let bad = 0;
      let noDaemon = 0;
      for (let i = 0; i < opts.crN; i++) {
        const e = await aenvRound(eagerNode, eagerSbx, false);
        s.eagerConnect.push(e.connected);
        s.eager.push(e.first);
        if (!e.intact) bad++;
        if (e.wasLazy) throw new Error('the eager node restored lazily');
        if (lazySbx) {
          const l = await aenvRound(lazyNode, lazySbx, true);
          s.lazyConnect.push(l.connected);
          s.lazy.push(l.first);
          s.lazyAll.push(/** @type {number} */ (l.allIn));
          if (!l.intact) bad++;
          if (!l.wasLazy) noDaemon++;
        }
        const img = await lab.imageDir(`${id}-e-${i}`);
        await lab.checkpoint(b, img);
        await lab.deleteContainer(b);
        let t0 = performance.now();
        await lab.restore(b, img);
        await lab.firstCommand(b);
        r.eager.push(performance.now() - t0);
        const img2 = await lab.imageDir(`${id}-l-${i}`);
        await lab.checkpoint(b, img2);
        await lab.deleteContainer(b);
        t0 = performance.now();
        const { allIn } = await lab.restoreLazy(b, img2);
        await lab.firstCommand(b);
        r.lazy.push(performance.now() - t0);
        await allIn;
        r.lazyAll.push(performance.now() - t0);
        await rm(join(RAW_BASE, 'img'), { recursive: true, force: true });
      }
      await lab.destroy(b);
      if (bad) notes.push(`${bad} round(s) found the memory checksum changed after the resume`);
      else notes.push('memory checksum intact after every resume');
      if (noDaemon) notes.push(`${noDaemon} round(s) of the lazy node restored eagerly (see its log)`);
      const note = notes.join('; ');
      report.add({
        suite: 'resume',
        op: `resume from disk → first command, eager (${kind.name})`,
        aenv: s.eager,
        baseline: 'runc restore + nsenter true',
        raw: r.eager,
        note,
      });
      report.add({
        suite: 'resume',
        op: `  of which connect → 201, eager (${kind.name})`,
        aenv: s.eagerConnect,
      });
      if (!lazyNode) {
        report.notMeasured({
          suite: 'resume',
          op: `resume from disk → first command, lazy (${kind.name})`,
          status: 'failed',
          reason: `vm.unprivileged_userfaultfd = ${sysctl}: lazy restore needs 1`,
          baseline: 'runc restore --lazy-pages + nsenter true',
          raw: r.lazy,
        });
      } else {
        report.add({
          suite: 'resume',
          op: `resume from disk → first command, lazy (${kind.name})`,
          aenv: s.lazy,
          baseline: 'runc restore --lazy-pages + nsenter true',
          raw: r.lazy,
          note,
        });
        report.add({
          suite: 'resume',
          op: `  of which connect → 201, lazy (${kind.name})`,
          aenv: s.lazyConnect,
        });
        report.add({
          suite: 'resume',
          op: `resume from disk → all pages in, lazy (${kind.name})`,
          aenv: s.lazyAll,
          baseline: 'until criu lazy-pages exits',
          raw: r.lazyAll,
        });
      }
    }
  } catch (e) {
    throw new Error(`resume suite: ${describe(e)}`, { cause: e });
  } finally {
    for (const sbx of sandboxes) await sbx.kill().catch(() => {});
  }
}
