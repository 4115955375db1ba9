#!/usr/bin/env node
// Gateway overhead (docs/benchmarks.md#gateway): one real `aenv scheduler`, one node reporting heartbeats, one
// `aenv gateway` and the floor relay (lib/floor-relay.mjs: the least a relay in front of the node can do, with the
// Schedule and RecordAssignment a create must pay), all processes on this machine; the same operations with the
// e2b SDK straight to the node, through the floor relay and through the gateway, interleaved in the same run:
// create → usable (Sandbox.create), exec round trip (commands.run('true')) and a file read. min / median / p95 in
// ms and the added median; the CPU time the gateway and the floor relay spent per operation (all threads, and the
// main thread: its event loop), which does not depend on how busy the machine is; and bare scheduler round trips
// (Schedule, RecordAssignment) from this process.
// Needs root and `npm run build`; run it under the shared lock:
//   flock /tmp/aenv-roottests.lock node scripts/bench/gateway-bench.mjs [--creates 10] [--execs 100] [--json]
//     [--cpu-prof DIR]   (V8 CPU profiles of the gateway and the floor relay, written to DIR when they stop)
import { fork } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, URL } from 'node:url';
import { register } from 'tsx/esm/api';
import { Sandbox } from 'e2b';
import { createSchedulerClient } from '@aenv/protocol';

register();
const here = (p) => new URL(p, import.meta.url).href;
const harness = await import(here('../../test/e2e/harness.ts'));
const { startSchedulerProcess } = await import(
  here('../../packages/scheduler/src/testing/scheduler-process.ts')
);
const { startGatewayProcess } = await import(here('../../packages/gateway/src/testing/gateway-process.ts'));

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) || dflt : dflt;
};
const CREATES = Math.min(50, opt('--creates', 10));
const EXECS = Math.min(2000, opt('--execs', 100));
const asJson = args.includes('--json');
const profIndex = args.indexOf('--cpu-prof');
const profDir = profIndex >= 0 ? args[profIndex + 1] : undefined;
const profArgs = profDir ? ['--cpu-prof', '--cpu-prof-dir', profDir] : [];
const KEY = `e2b_${'be11c4'.repeat(10)}`;
const NAME = 'bgway';

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { n: s.length, min: s[0], median: q(0.5), p95: q(0.95) };
};
const time = async (f) => {
  const t = performance.now();
  await f();
  return performance.now() - t;
};
/** On-CPU ns of a process (every thread) and of its main thread, from the scheduler's own accounting. */
const cpuNs = (pid) => {
  let all = 0;
  for (const t of readdirSync(`/proc/${pid}/task`))
    all += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
  const main = Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[0]);
  return { all, main };
};

const port = await harness.freePort();
// At info, as a scheduler runs: at debug it logs every Schedule.
const sched = await startSchedulerProcess({
  log_level: 'info',
  scheduler: { nodes: [{ id: NAME, endpoint: `http://127.0.0.1:${port}` }] },
});
// The parents must stay searchable by the sandbox uid range (the node refuses to start otherwise).
mkdirSync(`/var/lib/aenv-e2e/${NAME}`, { recursive: true, mode: 0o711 });
mkdirSync(`/var/lib/aenv-e2e/${NAME}/secrets`, { recursive: true, mode: 0o700 });
writeFileSync(`/var/lib/aenv-e2e/${NAME}/secrets/api-key`, `${KEY}\n`, { mode: 0o600 });
const node = await harness.startServer(
  {
    name: NAME,
    toml: [
      '[cluster]',
      `scheduler_endpoint = "http://${sched.grpcAddress}"`,
      '[observability.scheduler_report]',
      'enabled = true',
      'interval_secs = 5',
      '[node_identity]',
      `node_id = "${NAME}"`,
    ].join('\n'),
  },
  port,
);
const gw = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, KEY, { nodeArgs: profArgs });
const floorChild = fork(fileURLToPath(here('./lib/floor-relay.mjs')), [node.url, sched.grpcAddress], {
  execArgv: profArgs,
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
/** @type {string} */
const floorUrl = await new Promise((resolve, reject) => {
  floorChild.once('message', (m) => resolve(`http://127.0.0.1:${/** @type {{port: number}} */ (m).port}`));
  floorChild.once('exit', (code) => reject(new Error(`floor relay exited (${code})`)));
});
const via = {
  node: { apiUrl: node.url, sandboxUrl: node.url, apiKey: KEY, debug: false },
  floor: { apiUrl: floorUrl, sandboxUrl: floorUrl, apiKey: KEY, debug: false },
  gateway: { apiUrl: gw.url, sandboxUrl: gw.url, apiKey: KEY, debug: false },
};
const pids = { floor: floorChild.pid, gateway: gw.pid };
const paths = Object.keys(via);
/** The order of the paths in round `i` (rotated, so none always goes first). */
const order = (i) => paths.map((_, j) => paths[(i + j) % paths.length]);
/** @type {{place: number[], record: number[]}} */
const phases = { place: [], record: [] };
const ops = ['create', 'exec', 'read'];
/** @type {Record<string, Record<string, number[]>>} */
const samples = Object.fromEntries(ops.map((op) => [op, Object.fromEntries(paths.map((k) => [k, []]))]));
/** CPU ns the relaying process spent on each operation, summed (floor and gateway only). */
const cpu = Object.fromEntries(
  ops.map((op) => [op, Object.fromEntries(Object.keys(pids).map((k) => [k, { all: 0, main: 0, n: 0 }]))]),
);
/** Times `f` through path `k`, and counts what that path's process spent on it. */
const measure = async (op, k, f) => {
  const pid = pids[k];
  const before = pid ? cpuNs(pid) : undefined;
  samples[op][k].push(await time(f));
  if (pid && before) {
    const after = cpuNs(pid);
    const c = cpu[op][k];
    c.all += after.all - before.all;
    c.main += after.main - before.main;
    c.n++;
  }
};
/** @type {{ Schedule: number[], RecordAssignment: number[] }} */
const grpc = { Schedule: [], RecordAssignment: [] };
try {
  // Warm-up: one create and a few execs each way (connections, caches).
  for (const o of Object.values(via)) {
    const s = await Sandbox.create({ ...o, timeoutMs: 120_000 });
    await s.commands.run('true');
    await s.kill();
  }
  for (let i = 0; i < CREATES; i++)
    for (const k of order(i)) {
      /** @type {Sandbox[]} */
      const made = [];
      await measure('create', k, async () =>
        made.push(await Sandbox.create({ ...via[k], timeoutMs: 120_000 })),
      );
      for (const s of made) await s.kill();
    }
  // The gateway's own phases of a create, from the Server-Timing it adds to the node's.
  for (let i = 0; i < CREATES; i++) {
    const answer = await globalThis.fetch(`${gw.url}/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', timeout: 120 }),
    });
    const made = /** @type {{sandboxID: string}} */ (await answer.json());
    for (const [name, key] of [
      ['gateway-place', 'place'],
      ['gateway-record', 'record'],
    ]) {
      const m = new RegExp(`${name};dur=([0-9.]+)`).exec(answer.headers.get('server-timing') ?? '');
      if (m) phases[key].push(Number(m[1]));
    }
    await globalThis.fetch(`${gw.url}/sandboxes/${made.sandboxID}`, {
      method: 'DELETE',
      headers: { 'x-api-key': KEY },
    });
  }
  const sbx = await Sandbox.create({ ...via.node, timeoutMs: 300_000 });
  await sbx.files.write('/tmp/bench.txt', 'x'.repeat(4096));
  const handles = Object.fromEntries(
    await Promise.all(paths.map(async (k) => [k, await Sandbox.connect(sbx.sandboxId, via[k])])),
  );
  // The two scheduler calls a create through a gateway adds, straight from this process (a warm channel).
  const sc = createSchedulerClient(sched.grpcAddress);
  const bound = (await sc.schedule({})).node;
  for (let i = 0; i < EXECS; i++) {
    for (const k of order(i)) {
      await measure('exec', k, () => handles[k].commands.run('true'));
      await measure('read', k, () => handles[k].files.read('/tmp/bench.txt'));
    }
    grpc.Schedule.push(await time(() => sc.schedule({})));
    grpc.RecordAssignment.push(
      await time(() => sc.recordAssignment({ sandboxId: sbx.sandboxId, node: bound })),
    );
  }
  await sbx.kill();
} finally {
  await gw.stop();
  // Disconnecting lets it exit on its own (a V8 profile is written only then).
  const exited = new Promise((resolve) => floorChild.once('exit', resolve));
  floorChild.disconnect();
  await exited;
  await node.shutdown();
  await sched.stop();
}

/** @typedef {{ n: number, min: number, median: number, p95: number }} Stats */
const rows = ops.map((op) => {
  /** @type {Record<'node' | 'floor' | 'gateway', Stats>} */
  const st = /** @type {any} */ (Object.fromEntries(paths.map((k) => [k, stats(samples[op][k])])));
  const perOp = (k) => {
    const c = cpu[op][k];
    return { allUs: c.all / c.n / 1e3, mainUs: c.main / c.n / 1e3 };
  };
  return {
    op,
    ...st,
    floorAddedMedianMs: st.floor.median - st.node.median,
    gatewayAddedMedianMs: st.gateway.median - st.node.median,
    cpuPerOp: { floor: perOp('floor'), gateway: perOp('gateway') },
  };
});
const gatewayPhases = Object.fromEntries(
  Object.entries(phases).map(([k, v]) => [k, v.length > 0 ? stats(v) : undefined]),
);
const grpcRoundTrips = Object.fromEntries(Object.entries(grpc).map(([k, v]) => [k, stats(v)]));
const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
if (asJson)
  process.stdout.write(JSON.stringify({ load, rows, gatewayPhases, grpcRoundTrips }, null, 2) + '\n');
else {
  const f = (x) => x.toFixed(2);
  const t = (s) => `${f(s.min)}/${f(s.median)}/${f(s.p95)}`;
  console.log(`load average at the end: ${load}`);
  console.log(
    'ms, min/median/p95: node | floor relay | gateway | added median floor, gateway | CPU µs per op floor, gateway (main thread)',
  );
  for (const r of rows) {
    const c = (k) => `${r.cpuPerOp[k].allUs.toFixed(0)} (${r.cpuPerOp[k].mainUs.toFixed(0)})`;
    console.log(
      `${r.op.padEnd(7)} n=${r.node.n}  ${t(r.node)} | ${t(r.floor)} | ${t(r.gateway)} | ` +
        `${f(r.floorAddedMedianMs)}, ${f(r.gatewayAddedMedianMs)} | ${c('floor')}, ${c('gateway')}`,
    );
  }
  for (const [k, st] of Object.entries(gatewayPhases))
    if (st) console.log(`create, gateway ${k} (Server-Timing) n=${st.n}  ${t(st)}`);
  for (const [k, st] of Object.entries(grpcRoundTrips))
    console.log(`scheduler ${k} round trip from the bench n=${st.n}  ${t(st)}`);
}
