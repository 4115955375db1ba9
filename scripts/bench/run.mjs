#!/usr/bin/env node
// `npm run bench`: aenv's benchmark suite. Each operation is measured through aenv (a real `aenv server`
// driven by the e2b SDK / its HTTP API) and done raw with the host tools in the same run; the summary
// table gives min / median / p95 and the ratio aenv median / raw median. See docs/benchmarks.md.
//
//   npm run bench -- [--only create,exec,memory,pause,template] [--n N] [--quick] [--json out.json] [--keep] [--force]
//
// Needs root. Traffic stays on loopback and in namespaces the run creates; everything it makes is removed
// at the end (or by --cleanup after a crash / --keep).
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, URL } from 'node:url';
import { COMPONENT_SUITES, E2E_SUITES, parseOptions, USAGE } from './lib/options.mjs';
import { currentLoad, formatLoad, machineInfo, startLoadSampler } from './lib/host.mjs';
import { describe, Report } from './lib/report.mjs';

/** ISO time of the newest file below `dir` (tsc rewrites only the files that changed), or 'not built'. */
function newestMtime(dir) {
  if (!existsSync(dir)) return 'not built';
  let newest = 0;
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (e.isFile()) newest = Math.max(newest, statSync(join(e.parentPath ?? e.path, e.name)).mtimeMs);
  }
  return newest ? new Date(newest).toISOString() : 'not built';
}

const log = (msg) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);

let opts;
try {
  opts = parseOptions(process.argv.slice(2));
} catch (/** @type {any} */ e) {
  console.error(`bench: ${e.message.replace(/ \(see --help\)$/, '')} (see --help)`);
  process.exit(2);
}
if (opts.help) {
  console.log(USAGE);
  process.exit(0);
}
if (process.getuid?.() !== 0) {
  console.error('bench: needs root (it runs an aenv node and raw runc containers)');
  process.exit(2);
}

// Loaded after the cheap checks: these pull in tsx, the harness and the product modules.
const {
  DISK_NODE,
  EAGER_NODE,
  LAZY_NODE,
  MAIN_NODE,
  START_NODE,
  WARM_NODE,
  isEmpty,
  nodeLeftovers,
  removeNode,
} = await import('./lib/nodes.mjs');
const { rawLeftovers, removeRawLeftovers } = await import('./lib/raw.mjs');
const { run } = await import('./lib/product.mjs');

async function leftovers() {
  return {
    [MAIN_NODE]: await nodeLeftovers(MAIN_NODE),
    [DISK_NODE]: await nodeLeftovers(DISK_NODE),
    [WARM_NODE]: await nodeLeftovers(WARM_NODE),
    [START_NODE]: await nodeLeftovers(START_NODE),
    [EAGER_NODE]: await nodeLeftovers(EAGER_NODE),
    [LAZY_NODE]: await nodeLeftovers(LAZY_NODE),
    raw: await rawLeftovers(),
  };
}
const allEmpty = (l) => Object.values(l).every(isEmpty);
const showLeft = (l) =>
  Object.entries(l)
    .filter(([, v]) => !isEmpty(v))
    .map(
      ([k, v]) =>
        `  ${k}: ${JSON.stringify(Object.fromEntries(Object.entries(v).filter(([, x]) => x.length)))}`,
    )
    .join('\n');

if (opts.cleanup) {
  await removeNode(MAIN_NODE);
  await removeNode(DISK_NODE);
  await removeNode(WARM_NODE);
  await removeNode(START_NODE);
  await removeNode(EAGER_NODE);
  await removeNode(LAZY_NODE);
  await removeRawLeftovers();
  const left = await leftovers();
  if (allEmpty(left)) {
    console.log('bench --cleanup: nothing of the benchmark is left on this host');
    process.exit(0);
  }
  console.error(`bench --cleanup: could not remove:\n${showLeft(left)}`);
  process.exit(1);
}

const load = currentLoad();
console.log(`load average: ${formatLoad(load)}`);
if (load.one > opts.maxLoad && !opts.force) {
  console.error(
    `bench: the 1-minute load average ${load.one.toFixed(2)} is above ${opts.maxLoad} — results would mostly measure the other load.\n` +
      'Wait for a quieter machine, or pass --force (numbers under load are pessimistic), or raise --max-load.',
  );
  process.exit(3);
}
const cli = fileURLToPath(new URL('../../packages/cli/dist/main.js', import.meta.url));
const e2eWanted = E2E_SUITES.filter((s) => opts.suites.has(s));
if (e2eWanted.length && !existsSync(cli)) {
  console.error(`bench: ${cli} is missing: build first (npx tsc -b && npm run -w @aenv/envd bundle)`);
  process.exit(2);
}
if ((opts.suites.has('pause') || opts.suites.has('resume')) && !existsSync(opts.criuPath)) {
  console.error(
    `bench: CRIU not found at ${opts.criuPath} (the pause suite's raw twins need it; see docs/install.md, or pass --criu)`,
  );
  process.exit(2);
}
const before = await leftovers();
if (!allEmpty(before)) {
  console.error(
    `bench: an earlier run left these behind (crashed, or --keep):\n${showLeft(before)}\nRemove them with: npm run bench -- --cleanup`,
  );
  process.exit(2);
}

const { createContext, SUITES } = await import('./e2e-bench.mjs');
const { componentSuite } = await import('./lib/suites/components.mjs');

// What code the nodes run: HEAD when the run starts and when the server build (dist) was made — the
// nodes run packages/*/dist, which is only as new as the last build.
const commit =
  (await run('git', ['rev-parse', '--short', 'HEAD'], { allowFailure: true })).stdout.trim() || 'unknown';
const builtAt = newestMtime(fileURLToPath(new URL('../../packages/node/dist', import.meta.url)));

const { startTrace, traceSummary, traceTable } = await import('./lib/trace.mjs');
if (opts.trace) startTrace();
const report = new Report();
const sampler = startLoadSampler();
const ctx = createContext(opts, report, log);
const t0 = Date.now();
let closing = null;
const close = () => (closing ??= ctx.close({ keep: opts.keep }));
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    log(`${sig}: cleaning up`);
    close().finally(() => process.exit(130));
  });
}

const counts = {
  create: opts.createN,
  exec: opts.execN,
  memory: opts.sandboxes,
  pause: opts.crN,
  template: opts.templateN,
  resume: opts.crN,
};
let left = {};
try {
  for (const name of e2eWanted) {
    const t = Date.now();
    log(`suite ${name} (n=${counts[name]})`);
    try {
      await SUITES[name](ctx);
    } catch (/** @type {any} */ e) {
      log(`suite ${name} failed: ${e.stack ?? e}`);
      report.suiteFailed(name, e);
    }
    log(`suite ${name} done in ${((Date.now() - t) / 1000).toFixed(0)} s`);
  }
} finally {
  left = await close();
}
for (const name of COMPONENT_SUITES.filter((s) => opts.suites.has(s))) {
  try {
    await componentSuite(ctx, name);
  } catch (e) {
    report.suiteFailed(name, e);
  }
}

const loadDuring = sampler.stop();
const machine = machineInfo();
const { table, notes } = report.table();
console.log(
  `\naenv benchmark${opts.quick ? ' (--quick)' : ''} — ${new Date(t0).toISOString()}, ${((Date.now() - t0) / 60000).toFixed(1)} min; HEAD ${commit} at the start, server dist built ${builtAt}`,
);
console.log(
  `machine: ${machine.cpus} × ${machine.cpuModel}, ${machine.memTotalMiB} MiB, kernel ${machine.kernel}, node ${machine.node}`,
);
console.log(
  `load average (1 min) during the run: min ${loadDuring.min.toFixed(2)} / mean ${loadDuring.mean.toFixed(2)} / max ${loadDuring.max.toFixed(2)} on ${machine.cpus} cores` +
    (loadDuring.max > opts.maxLoad ? ' — loaded machine: the numbers are pessimistic' : ''),
);
console.log('times in ms (memory in MB): min / median / p95; ratio = aenv median / raw median\n');
console.log(table);
if (notes) console.log(`\n${notes}`);
if (opts.trace) console.log(`\nphases (median ms of each, from the nodes' Server-Timing):\n${traceTable()}`);

if (opts.json) {
  await report.writeJson(opts.json, {
    date: new Date().toISOString(),
    commit,
    serverDistBuiltAt: builtAt,
    machine,
    loadAtStart: load,
    loadDuring,
    options: { ...opts, suites: [...opts.suites] },
    ...(opts.trace ? { trace: traceSummary() } : {}),
  });
  console.log(`\nresults written to ${opts.json}`);
}
if (opts.keep) {
  console.log(
    '\n--keep: the nodes were killed with their sandboxes still running; raw containers are still there. Remove all with: npm run bench -- --cleanup',
  );
} else if (!allEmpty(left)) {
  console.error(`\nbench: cleanup left these behind:\n${showLeft(left)}\nTry: npm run bench -- --cleanup`);
  process.exitCode = 1;
}
const failed = report.rows.filter((r) => r.status === 'failed');
if (failed.length) {
  console.error(
    `\nbench: ${failed.length} row(s) failed: ${failed.map((r) => `${r.suite}: ${r.op} (${describe(r.note)})`).join('; ')}`,
  );
  process.exitCode = 1;
}
process.exit();
