#!/usr/bin/env node
// `npm run scale`: density on one node (docs/benchmarks.md "Scale"). Starts a real `aenv server`, fills it
// with idle sandboxes from `base` in steps, and at every step measures what density costs: host memory and
// tasks per sandbox, create latency, an exec round trip through the SDK on sampled sandboxes, and the list
// API over every record. Then pauses a share of them and resumes that share in one burst. Stops at the first
// failure and says at which count and why (that is the host limit to raise; scripts/setup-host.sh raises
// the ones known). Everything it made is removed at the end.
//
//   npm run scale -- [--n 1000] [--step 100] [--paused 200] [--resume-from disk|memory] [--concurrency 4]
//                    [--json out.json] [--force]
//
// Needs root. Traffic stays on loopback. Bounded: at most --n sandboxes, each step's work is counted.
import { readdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Sandbox } from 'e2b';
import { currentLoad, formatLoad, machineInfo } from './lib/host.mjs';
import { summarize, fmt } from './lib/stats.mjs';

const USAGE = `npm run scale -- [--n 1000] [--step 100] [--paused 200] [--resume-from disk|memory] [--concurrency 4]
                  [--json out.json] [--force]
  --n            sandboxes to reach (default 1000, at most 2000)
  --step         measure after every this many creates (default 100)
  --paused       how many of them to pause, then resume in one burst (default 200; 0 = skip)
  --resume-from  disk (default): a pause releases the memory at once, so the burst is of restores; memory: the
                 paused sandboxes stay frozen in memory, so the burst is of thaws
  --concurrency  creates / pauses in flight at once (default 4)
  --json         also write the results as JSON to this file
  --force        run even when the 1-minute load is above 1.0 (the numbers then say less)`;

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '1000' },
    step: { type: 'string', default: '100' },
    paused: { type: 'string', default: '200' },
    'resume-from': { type: 'string', default: 'disk' },
    concurrency: { type: 'string', default: '4' },
    json: { type: 'string' },
    force: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}
const intArg = (name, min, max) => {
  const v = Number(args[name]);
  if (!Number.isInteger(v) || v < min || v > max) {
    console.error(`scale: --${name} must be an integer in ${min}..${max} (see --help)`);
    process.exit(2);
  }
  return v;
};
const N = intArg('n', 1, 2000);
const STEP = intArg('step', 1, N);
const PAUSED = intArg('paused', 0, N);
const CONCURRENCY = intArg('concurrency', 1, 32);
const RESUME_FROM = args['resume-from'];
if (RESUME_FROM !== 'disk' && RESUME_FROM !== 'memory') {
  console.error('scale: --resume-from must be disk or memory (see --help)');
  process.exit(2);
}
if (process.getuid?.() !== 0) {
  console.error('scale: needs root (it runs an aenv node)');
  process.exit(2);
}
if (currentLoad().one > 1.0 && !args.force) {
  console.error(`scale: the machine is busy (load ${formatLoad(currentLoad())}); wait, or pass --force`);
  process.exit(2);
}

const { startNode, removeNode, nodeLeftovers, isEmpty, nodePaths, serverPids } =
  await import('./lib/nodes.mjs');
const { mapLimit } = await import('./lib/api.mjs');
const { parseServerTiming } = await import('./lib/product.mjs');

const log = (msg) => console.error(`[scale ${new Date().toISOString().slice(11, 19)}] ${msg}`);
const NODE = 'bscale';

function memAvailableMiB() {
  const kb = Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0);
  return kb / 1024;
}

/** The node's sandbox cgroup parents (one per cgroup v2 subtree the node uses). */
function sandboxCgroups() {
  const { prefix } = nodePaths(NODE);
  return readdirSync('/sys/fs/cgroup')
    .map((c) => `/sys/fs/cgroup/${c}/${prefix}`)
    .filter((d) => existsSync(d));
}
/** The first of `files` each cgroup parent has, summed (cgroup v2 names, then v1's). */
function cgroupSum(...files) {
  let sum = 0;
  for (const d of sandboxCgroups()) {
    const file = files.find((f) => existsSync(`${d}/${f}`));
    if (file) sum += Number(readFileSync(`${d}/${file}`, 'utf8').trim());
  }
  return sum;
}

function serverRssMiB(pid) {
  try {
    const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
    return kb / 1024;
  } catch {
    return null;
  }
}

async function timed(fn) {
  const t0 = performance.now();
  const value = await fn();
  return { ms: performance.now() - t0, value };
}

function expectStatus(ans, ok, what) {
  if (!ok.includes(ans.status)) {
    const msg = typeof ans.body === 'string' ? ans.body : JSON.stringify(ans.body);
    throw new Error(`${what} answered ${ans.status}: ${String(msg).slice(0, 300)}`);
  }
}

/** Every sandbox record through the paginated v2 list, timed as one walk. */
async function listAll(server) {
  const t0 = performance.now();
  let token = '';
  let count = 0;
  for (let page = 0; page < 100; page++) {
    const q = `/v2/sandboxes?limit=100${token ? `&nextToken=${encodeURIComponent(token)}` : ''}`;
    const ans = await server.api('GET', q);
    expectStatus(ans, [200], 'GET /v2/sandboxes');
    count += ans.body.length;
    token = ans.headers.get('x-next-token') ?? '';
    if (!token) break;
  }
  return { ms: performance.now() - t0, count };
}

/** @type {any} */
const results = {
  machine: machineInfo(),
  loadAtStart: currentLoad(),
  target: N,
  steps: [],
  reached: 0,
  stoppedBy: null,
  pausedBurst: null,
};

await removeNode(NODE);
log(`starting node ${NODE}`);
// What the burst resumes from is chosen, not left to how long the pauses took against the resident grace.
const residentGrace = RESUME_FROM === 'disk' ? 0 : 3600;
const node = await startNode(
  NODE,
  `[limits]\nmax_concurrent_creates = 32\n[orchestrator]\nresident_pause_grace_secs = ${residentGrace}\n`,
);
const { server } = node;
const serverPid = serverPids(nodePaths(NODE).configPath)[0];
const mem0 = memAvailableMiB();
const ids = [];
/** Server-Timing phases of the creates of the current step (or of the resume burst): name → ms samples. */
let createPhases = new Map();

function notePhases(headers, into = createPhases) {
  for (const { name, ms } of parseServerTiming(headers.get('server-timing') ?? '')) {
    if (name === 'total') continue;
    into.set(name, [...(into.get(name) ?? []), ms]);
  }
}

/** Median of each phase, largest first. */
function phaseMedians(phases = createPhases) {
  return Object.fromEntries(
    [...phases].map(([name, samples]) => [name, summarize(samples)?.median ?? 0]).sort((a, b) => b[1] - a[1]),
  );
}

async function createOne() {
  const { ms, value: ans } = await timed(() =>
    server.api('POST', '/sandboxes', { templateID: 'base', timeout: 3600 }),
  );
  expectStatus(ans, [200, 201], 'POST /sandboxes');
  notePhases(ans.headers);
  ids.push(ans.body.sandboxID);
  return ms;
}

async function execSample(count) {
  const sample = Array.from({ length: count }, (_, i) => ids[Math.floor((i * ids.length) / count)]);
  const out = [];
  for (const id of sample) {
    const sbx = await Sandbox.connect(id, { ...node.sdk, timeoutMs: 3_600_000 });
    for (let i = 0; i < 3; i++) {
      const { ms, value } = await timed(() => sbx.commands.run('true'));
      if (value.exitCode !== 0) throw new Error(`exec in ${id} exited ${value.exitCode}`);
      out.push(ms);
    }
  }
  return out;
}

try {
  while (ids.length < N) {
    const want = Math.min(STEP, N - ids.length);
    createPhases = new Map();
    const { ms: stepMs, value: creates } = await timed(() =>
      mapLimit(Array.from({ length: want }), CONCURRENCY, () => createOne()),
    );
    const exec = await execSample(5);
    const list = await listAll(server);
    if (list.count !== ids.length) {
      throw new Error(`the list shows ${list.count} sandboxes, ${ids.length} were created`);
    }
    const usedMiB = mem0 - memAvailableMiB();
    /** @type {any} */
    const step = {
      sandboxes: ids.length,
      createsPerSecond: (want * 1000) / stepMs,
      create: summarize(creates),
      createPhases: phaseMedians(),
      exec: summarize(exec),
      listAllMs: list.ms,
      hostMiBPerSandbox: usedMiB / ids.length,
      cgroupMiBPerSandbox: cgroupSum('memory.current', 'memory.usage_in_bytes') / 2 ** 20 / ids.length,
      tasksPerSandbox: cgroupSum('pids.current') / ids.length,
      serverRssMiB: serverRssMiB(serverPid),
      load1: currentLoad().one,
    };
    results.steps.push(step);
    results.reached = ids.length;
    log(
      `${ids.length} sandboxes: create p50 ${fmt(step.create.median)} ms (${fmt(step.createsPerSecond)}/s), ` +
        `exec p50 ${fmt(step.exec.median)} ms, list all ${fmt(list.ms)} ms, ` +
        `${fmt(step.hostMiBPerSandbox)} MiB host / ${fmt(step.cgroupMiBPerSandbox)} MiB cgroup per sandbox, ` +
        `${fmt(step.tasksPerSandbox)} tasks each, server RSS ${fmt(step.serverRssMiB)} MiB; create phases ` +
        Object.entries(step.createPhases)
          .slice(0, 4)
          .map(([name, ms]) => `${name} ${fmt(ms)}`)
          .join(', '),
    );
  }

  if (PAUSED > 0) {
    const chosen = ids.slice(0, PAUSED);
    log(`pausing ${chosen.length}`);
    const pauses = await mapLimit(chosen, CONCURRENCY, async (id) => {
      const { ms, value } = await timed(() => server.api('POST', `/sandboxes/${id}/pause`));
      expectStatus(value, [204], `pause of ${id}`);
      return ms;
    });
    log(`resuming ${chosen.length} in one burst (from ${RESUME_FROM})`);
    const resumePhases = new Map();
    const { ms: burstMs, value: resumes } = await timed(() =>
      Promise.all(
        chosen.map(async (id) => {
          const { ms, value } = await timed(() =>
            server.api('POST', `/sandboxes/${id}/connect`, { timeout: 3600 }),
          );
          expectStatus(value, [200, 201], `connect (resume) of ${id}`);
          notePhases(value.headers, resumePhases);
          return ms;
        }),
      ),
    );
    const exec = await execSample(5);
    results.pausedBurst = {
      count: chosen.length,
      resumeFrom: RESUME_FROM,
      pause: summarize(pauses),
      resume: summarize(resumes),
      resumePhases: phaseMedians(resumePhases),
      burstMs,
      execAfter: summarize(exec),
    };
    log(
      `burst of ${chosen.length} resumes done in ${fmt(burstMs)} ms (each p50 ${fmt(results.pausedBurst.resume.median)}, ` +
        `p95 ${fmt(results.pausedBurst.resume.p95)} ms); pause p50 ${fmt(results.pausedBurst.pause.median)} ms; ` +
        `resume phases ` +
        Object.entries(results.pausedBurst.resumePhases)
          .slice(0, 5)
          .map(([name, ms]) => `${name} ${fmt(ms)}`)
          .join(', '),
    );
  }
} catch (/** @type {any} */ e) {
  results.stoppedBy = `${e.message} (at ${ids.length} sandboxes)`;
  log(`stopped: ${results.stoppedBy}`);
} finally {
  log(`killing ${ids.length} sandboxes`);
  const { ms: killMs } = await timed(() =>
    mapLimit(ids, CONCURRENCY * 2, (id) => server.api('DELETE', `/sandboxes/${id}`)),
  );
  results.killAllMs = killMs;
  await server.stop();
  const left = await removeNode(NODE);
  results.leftovers = isEmpty(left) ? null : left;
  if (!isEmpty(await nodeLeftovers(NODE))) log('could not remove everything: see "leftovers" in the JSON');
}
results.loadAtEnd = currentLoad();

console.log(
  `\nscale run: ${results.reached} of ${N} sandboxes on one node (${results.machine.cpus} cores, ` +
    `${results.machine.memTotalMiB} MiB)${results.stoppedBy ? `, stopped by: ${results.stoppedBy}` : ''}`,
);
console.log(
  '| sandboxes | creates/s | create p50 / p95 ms | exec p50 / p95 ms | list all ms | MiB per sandbox (host / cgroup) | tasks per sandbox | server RSS MiB |',
);
console.log('|---|---|---|---|---|---|---|---|');
for (const s of results.steps) {
  console.log(
    `| ${s.sandboxes} | ${fmt(s.createsPerSecond)} | ${fmt(s.create.median)} / ${fmt(s.create.p95)} | ` +
      `${fmt(s.exec.median)} / ${fmt(s.exec.p95)} | ${fmt(s.listAllMs)} | ${fmt(s.hostMiBPerSandbox)} / ` +
      `${fmt(s.cgroupMiBPerSandbox)} | ${fmt(s.tasksPerSandbox)} | ${fmt(s.serverRssMiB)} |`,
  );
}
if (results.pausedBurst) {
  const b = results.pausedBurst;
  console.log(
    `\npaused ${b.count}: pause p50 ${fmt(b.pause.median)} ms; burst resume of all ${b.count}: ${fmt(b.burstMs)} ms ` +
      `(each p50 ${fmt(b.resume.median)} / p95 ${fmt(b.resume.p95)} ms); exec after p50 ${fmt(b.execAfter.median)} ms`,
  );
}
console.log(`kill of all: ${fmt(results.killAllMs)} ms; leftovers: ${results.leftovers ? 'yes' : 'none'}`);
if (args.json) writeFileSync(args.json, JSON.stringify(results, null, 2));
process.exit(results.stoppedBy || results.leftovers ? 1 : 0);
