#!/usr/bin/env node
// Scheduler benchmark (docs/benchmarks.md#scheduler): one real `aenv scheduler` process with Redis bindings and
// a static list of N nodes, driven over gRPC by this process.
//   1. Schedule latency (sequential) and throughput (concurrent) once every node has reported one heartbeat.
//   2. A bounded simulation: every node heartbeats every --interval-ms with a roster of --sandboxes ids (a few
//      change each time), while Schedule keeps being called; heartbeat latency, the rate achieved, Schedule
//      latency under that load, Redis commands/s (INFO commandstats) and memory, the scheduler's CPU and RSS.
// The simulated nodes are heartbeat clients only. Traffic stays on loopback. Needs `npm run build` first.
//
//   node scripts/bench/scheduler-bench.mjs [--nodes 1000] [--sandboxes 100] [--interval-ms 5000] [--duration 60]
//       [--schedule-n 5000] [--concurrency 32] [--strategy round_robin] [--redis redis://127.0.0.1:6379] [--db 8]
//       [--json FILE]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { clearTimeout, setTimeout } from 'node:timers';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, URL } from 'node:url';
import { Redis } from 'ioredis';
import { createSchedulerClient } from '../../packages/scheduler/dist/index.js';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : dflt;
};
const NODES = Number(opt('--nodes', 1000));
const SANDBOXES = Number(opt('--sandboxes', 100));
const INTERVAL_MS = Number(opt('--interval-ms', 5000));
const DURATION_S = Math.min(600, Number(opt('--duration', 60)));
const SCHEDULE_N = Number(opt('--schedule-n', 5000));
const CONCURRENCY = Number(opt('--concurrency', 32));
const STRATEGY = opt('--strategy', 'round_robin');
const REDIS = opt('--redis', process.env.AENV_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379').replace(
  /\/\d*$/,
  '',
);
const DB = Number(opt('--db', 8));
const JSON_OUT = opt('--json', undefined);
const PREFIX = 'agentenv:scheduler:bindings';
const CLI = fileURLToPath(new URL('../../packages/cli/dist/main.js', import.meta.url));

const quantile = (sorted, q) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
function summary(samples) {
  const s = [...samples].sort((a, b) => a - b);
  if (s.length === 0) return null;
  return {
    n: s.length,
    p50: quantile(s, 0.5),
    p90: quantile(s, 0.9),
    p99: quantile(s, 0.99),
    max: s[s.length - 1],
    mean: s.reduce((a, b) => a + b, 0) / s.length,
  };
}
const ms = (x) => (x === undefined || x === null ? '-' : x < 10 ? x.toFixed(3) : x.toFixed(1));
const line = (label, s) =>
  console.log(
    `${label.padEnd(44)} n=${String(s?.n ?? 0).padStart(6)}  p50 ${ms(s?.p50)}  p90 ${ms(s?.p90)}  p99 ${ms(s?.p99)}  max ${ms(s?.max)} ms`,
  );

const nodeId = (i) => `bench-node-${String(i).padStart(4, '0')}`;
const nodes = Array.from({ length: NODES }, (_, i) => ({
  id: nodeId(i),
  endpoint: `http://127.0.0.${1 + (i % 250)}:${8000 + i}`,
}));

// ---- Redis: the database the benchmark owns, cleaned before and after --------------------------------
const ROLE = opt('--role', 'main');
/** @type {Redis} */ // only the main role uses it
const admin = ROLE === 'main' ? new Redis(`${REDIS}/${DB}`) : /** @type {any} */ (undefined);
async function clearBindings() {
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `${PREFIX}:*`, 'COUNT', 5000);
    if (keys.length > 0) await admin.del(...keys);
    cursor = next;
  } while (cursor !== '0');
}
async function commandStats() {
  const text = await admin.info('commandstats');
  const out = {};
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm))
    out[m[1]] = { calls: Number(m[2]), usec: Number(m[3]) };
  return out;
}
async function usedMemory() {
  return Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
}

// ---- the scheduler process ----------------------------------------------------------------------------
function procStats(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const ticks = Number(stat[11]) + Number(stat[12]);
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return { cpuSeconds: ticks / 100, rssMb: rssKb / 1024 };
}

async function startScheduler() {
  const dir = mkdtempSync(join(tmpdir(), 'aenv-scheduler-bench-'));
  const config = join(dir, 'scheduler.json');
  writeFileSync(
    config,
    JSON.stringify({
      log_level: 'info',
      log_format: 'json',
      scheduler: {
        grpc_listen_addr: '127.0.0.1:0',
        metrics_listen_addr: '127.0.0.1:0',
        strategy: STRATEGY,
        redis_addr: `${REDIS}/${DB}`,
        report_ttl: '30s',
        binding_ttl: '30s',
        nodes,
        // Every filter is evaluated for every node on every Schedule.
        node_resource_limit: {
          max_sandbox_count: 1000,
          max_sandbox_starting_count: 100,
          max_cpu_used_percent: 95,
          max_cpu_allocated_percent: 400,
          max_memory_used_percent: 95,
          max_memory_allocated_percent: 150,
        },
      },
    }),
    { mode: 0o600 },
  );
  // SCHEDULER_BENCH_NODE_ARGS: extra node flags for the scheduler (e.g. --cpu-prof --cpu-prof-dir=/tmp/p).
  const nodeArgs = (process.env.SCHEDULER_BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const child = spawn(process.execPath, [...nodeArgs, CLI, 'scheduler', '-config', config], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const ports = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`scheduler did not start:\n${out}`)), 30_000);
    child.stdout.on('data', (c) => {
      out += c;
      const m = /"grpcPort":(\d+),"metricsPort":(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ grpc: Number(m[1]), metrics: Number(m[2]) });
      }
    });
    child.stderr.on('data', (c) => (out += c));
    child.on('exit', (code) => reject(new Error(`scheduler exited ${code}:\n${out}`)));
  });
  return {
    pid: child.pid,
    ports,
    stop: async () => {
      child.kill('SIGTERM');
      await new Promise(
        /** @param {(v?: unknown) => void} resolve */ (resolve) =>
          child.exitCode !== null ? resolve() : child.on('exit', resolve),
      );
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function serverMean(metricsPort, metric, labels) {
  const text = await (await globalThis.fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const pick = (suffix) => {
    const re = new RegExp(`^${metric}_${suffix}\\{([^}]*)\\} (\\S+)$`, 'gm');
    let total = 0;
    for (const m of text.matchAll(re)) if (labels.every((l) => m[1].includes(l))) total += Number(m[2]);
    return total;
  };
  const count = pick('count');
  return count > 0 ? { count, meanMs: (pick('sum') / count) * 1000 } : { count: 0, meanMs: null };
}

/** Cumulative bucket counts of a histogram's series matching `labels` (summed over the other labels). */
async function buckets(metricsPort, metric, labels) {
  const text = await (await globalThis.fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const out = new Map();
  for (const m of text.matchAll(new RegExp(`^${metric}_bucket\\{([^}]*)\\} (\\S+)$`, 'gm'))) {
    if (!labels.every((l) => m[1].includes(l))) continue;
    const le = /le="([^"]+)"/.exec(m[1])?.[1] ?? '';
    out.set(le, (out.get(le) ?? 0) + Number(m[2]));
  }
  return out;
}

/** Upper bucket bound (ms) under which a fraction q of the observations between two readings fell. */
function bucketQuantile(before, after, q) {
  const les = [...after.keys()].sort((a, b) =>
    a === '+Inf' ? 1 : b === '+Inf' ? -1 : Number(a) - Number(b),
  );
  const total = (after.get('+Inf') ?? 0) - (before.get('+Inf') ?? 0);
  if (total <= 0) return null;
  for (const le of les)
    if (after.get(le) - (before.get(le) ?? 0) >= q * total)
      return le === '+Inf' ? Infinity : Number(le) * 1000;
  return null;
}

// ---- the simulated nodes ------------------------------------------------------------------------------
const GiB = 1024n ** 3n;
let generation = 0;
const rosters = nodes.map((_, i) => Array.from({ length: SANDBOXES }, (_, j) => `sbx-${i}-${j}`));
function heartbeatFor(i) {
  // Two sandboxes of each roster are replaced per beat: creates and deletes keep happening.
  const roster = rosters[i];
  for (let k = 0; k < 2 && roster.length > 0; k++)
    roster[(generation + k) % roster.length] = `sbx-${i}-g${generation}-${k}`;
  generation++;
  return {
    nodeId: nodes[i].id,
    clusterId: 'bench',
    serviceInstanceId: `${nodes[i].id}-1`,
    version: 'bench',
    snapshot: {
      status: 1,
      cpuCount: 64,
      allocatedCpu: 32 + (i % 16),
      cpuPercent: 20 + (i % 50),
      memoryTotalBytes: 256n * GiB,
      memoryUsedBytes: 64n * GiB,
      allocatedMemoryBytes: 100n * GiB + BigInt(i) * 1024n * 1024n,
      sandboxCount: roster.length,
      reportedAtUnixMs: BigInt(Date.now()),
    },
    sandboxIds: roster,
  };
}

/** Every node heartbeats every INTERVAL_MS, evenly spread, for `durationS`; its own connection. */
async function runHeartbeatLoad(address, durationS) {
  const client = createSchedulerClient(address, { timeoutMs: 30_000 });
  const latencies = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let sent = 0;
  let failed = 0;
  const perHeartbeatMs = INTERVAL_MS / NODES;
  const start = performance.now();
  const end = start + durationS * 1000;
  let next = 0;
  while (performance.now() < end) {
    const due = start + next * perHeartbeatMs;
    const now = performance.now();
    if (due > now) {
      await sleep(Math.max(1, due - now));
      continue;
    }
    const req = heartbeatFor(next % NODES);
    next++;
    sent++;
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const t = performance.now();
    client.heartbeat(req).then(
      () => {
        latencies.push(performance.now() - t);
        inFlight--;
      },
      () => {
        failed++;
        inFlight--;
      },
    );
  }
  while (inFlight > 0) await sleep(10);
  return {
    sent,
    failed,
    maxInFlight,
    latency: summary(latencies),
    elapsedS: (performance.now() - start) / 1000,
  };
}

/** The simulated nodes run in a child process, as they run on other machines: their work does not share
 * an event loop with the Schedule measurement. */
function heartbeatsInChild(address, durationS) {
  const child = spawn(
    process.execPath,
    [
      fileURLToPath(import.meta.url),
      ...['--role', 'heartbeats', '--address', address, '--duration', String(durationS)],
      ...['--nodes', String(NODES), '--sandboxes', String(SANDBOXES), '--interval-ms', String(INTERVAL_MS)],
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (c) => (out += c));
  return new Promise((resolve, reject) =>
    child.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`heartbeat child exited ${code}`)),
    ),
  );
}

async function main() {
  await clearBindings();
  const scheduler = await startScheduler();
  const client = createSchedulerClient(`127.0.0.1:${scheduler.ports.grpc}`, { timeoutMs: 30_000 });
  const results = {
    date: new Date().toISOString(),
    options: { NODES, SANDBOXES, INTERVAL_MS, DURATION_S, SCHEDULE_N, CONCURRENCY, STRATEGY },
  };
  try {
    console.log(`scheduler pid ${scheduler.pid}, ${NODES} nodes, strategy ${STRATEGY}, Redis ${REDIS}/${DB}`);
    // Every node reports once, so placement runs over real snapshots.
    const reportAll = async () => {
      for (let i = 0; i < NODES; i += 50)
        await Promise.all(
          Array.from({ length: Math.min(50, NODES - i) }, (_, k) => client.heartbeat(heartbeatFor(i + k))),
        );
    };
    await reportAll();

    // 1. Schedule, idle.
    for (let i = 0; i < 200; i++) await client.schedule({});
    const scheduleBuckets = () =>
      buckets(scheduler.ports.metrics, 'agentenv_scheduler_schedule_duration_seconds', ['status="OK"']);
    const seqBefore = await scheduleBuckets();
    const sequential = [];
    for (let i = 0; i < SCHEDULE_N; i++) {
      const t = performance.now();
      await client.schedule({
        hint: { kind: { case: 'newColdSandbox', value: { cpuCount: 2, memoryMb: 1024n } } },
      });
      sequential.push(performance.now() - t);
    }
    const seq = summary(sequential);
    const seqAfter = await scheduleBuckets();
    line('Schedule, sequential (client round trip)', seq);
    const seqServer = {
      p50Ms: bucketQuantile(seqBefore, seqAfter, 0.5),
      p99Ms: bucketQuantile(seqBefore, seqAfter, 0.99),
    };
    console.log(
      'Schedule, sequential, server-side buckets'.padEnd(44),
      `p50 ≤ ${seqServer.p50Ms} p99 ≤ ${seqServer.p99Ms} ms`,
    );
    let done = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (done < SCHEDULE_N) {
          done++;
          await client.schedule({});
        }
      }),
    );
    const throughput = SCHEDULE_N / ((performance.now() - t0) / 1000);
    console.log(
      `${'Schedule throughput, ' + CONCURRENCY + ' in flight'.padEnd(20)}`.padEnd(44),
      `${throughput.toFixed(0)} calls/s`,
    );
    const idleServer = await serverMean(
      scheduler.ports.metrics,
      'agentenv_scheduler_schedule_duration_seconds',
      ['status="OK"'],
    );
    console.log(
      'Schedule, server-side mean'.padEnd(44),
      `${ms(idleServer.meanMs)} ms over ${idleServer.count}`,
    );
    results.scheduleIdle = {
      sequential: seq,
      sequentialServerBucketBoundsMs: seqServer,
      throughputPerSec: throughput,
      serverMeanMs: idleServer.meanMs,
    };

    // 2. Heartbeat load. The idle phase may have outlasted report_ttl: every node reports again first, or
    // the scheduler would rightly find them all stale.
    await reportAll();
    const statsBefore = await commandStats();
    const memBefore = await usedMemory();
    const procBefore = procStats(scheduler.pid);
    const schedLatency = [];
    const hbBuckets = () =>
      buckets(scheduler.ports.metrics, 'agentenv_scheduler_rpc_duration_seconds', [
        'rpc="Heartbeat"',
        'status="OK"',
      ]);
    const schedBuckets = () =>
      buckets(scheduler.ports.metrics, 'agentenv_scheduler_schedule_duration_seconds', ['status="OK"']);
    const hbBefore = await hbBuckets();
    const schedBefore = await schedBuckets();
    const start = performance.now();
    const end = start + DURATION_S * 1000;
    const load = heartbeatsInChild(`127.0.0.1:${scheduler.ports.grpc}`, DURATION_S);
    let scheduleFailures = 0;
    while (performance.now() < end) {
      const t = performance.now();
      try {
        await client.schedule({});
        schedLatency.push(performance.now() - t);
      } catch {
        scheduleFailures++;
      }
      await sleep(50);
    }
    const { sent, failed, maxInFlight, latency: hb, elapsedS: loadElapsedS } = await load;
    const elapsedS = (performance.now() - start) / 1000;
    const procAfter = procStats(scheduler.pid);
    const statsAfter = await commandStats();
    const memAfter = await usedMemory();
    const sched = summary(schedLatency);
    const hbAfter = await hbBuckets();
    const schedAfter = await schedBuckets();
    const serverSide = {
      heartbeatP50Ms: bucketQuantile(hbBefore, hbAfter, 0.5),
      heartbeatP99Ms: bucketQuantile(hbBefore, hbAfter, 0.99),
      scheduleP50Ms: bucketQuantile(schedBefore, schedAfter, 0.5),
      scheduleP99Ms: bucketQuantile(schedBefore, schedAfter, 0.99),
    };
    const hbServer = await serverMean(scheduler.ports.metrics, 'agentenv_scheduler_rpc_duration_seconds', [
      'rpc="Heartbeat"',
      'status="OK"',
    ]);
    const redisCalls = {};
    let totalCalls = 0;
    for (const [cmd, s] of Object.entries(statsAfter)) {
      const d = s.calls - (statsBefore[cmd]?.calls ?? 0);
      if (d > 0) {
        redisCalls[cmd] = Math.round(d / elapsedS);
        totalCalls += d;
      }
    }
    const bindings = await admin.dbsize();
    console.log(
      `heartbeats: ${sent} sent in ${loadElapsedS.toFixed(1)} s = ${(sent / loadElapsedS).toFixed(1)}/s (target ${((NODES * 1000) / INTERVAL_MS).toFixed(0)}/s), ${failed} failed, at most ${maxInFlight} in flight`,
    );
    line('Heartbeat (100-id roster), client round trip', hb);
    console.log('Heartbeat, server-side mean'.padEnd(44), `${ms(hbServer.meanMs)} ms over ${hbServer.count}`);
    line('Schedule under heartbeat load', sched);
    if (scheduleFailures > 0) console.log(`Schedule failures under load: ${scheduleFailures}`);
    console.log(
      'server-side, bucket bounds'.padEnd(44),
      `Heartbeat p50 ≤ ${serverSide.heartbeatP50Ms} p99 ≤ ${serverSide.heartbeatP99Ms} ms; Schedule p50 ≤ ${serverSide.scheduleP50Ms} p99 ≤ ${serverSide.scheduleP99Ms} ms`,
    );
    console.log(
      `Redis: ${Math.round(totalCalls / elapsedS)} commands/s (${Object.entries(redisCalls)
        .sort((a, b) => b[1] - a[1])
        .slice(0, 6)
        .map(([c, n]) => `${c} ${n}/s`)
        .join(
          ', ',
        )}); used_memory ${(memBefore / 2 ** 20).toFixed(1)} → ${(memAfter / 2 ** 20).toFixed(1)} MiB; ${bindings} keys in db ${DB}`,
    );
    const cpu = (procAfter.cpuSeconds - procBefore.cpuSeconds) / elapsedS;
    console.log(
      `scheduler: ${(cpu * 100).toFixed(0)}% of one core, RSS ${procBefore.rssMb.toFixed(0)} → ${procAfter.rssMb.toFixed(0)} MiB`,
    );
    results.heartbeatLoad = {
      sent,
      failed,
      elapsedS,
      ratePerSec: sent / loadElapsedS,
      maxInFlight,
      heartbeat: hb,
      heartbeatServerMeanMs: hbServer.meanMs,
      scheduleUnderLoad: sched,
      scheduleFailuresUnderLoad: scheduleFailures,
      serverSideBucketBoundsMs: serverSide,
      redisCommandsPerSec: totalCalls / elapsedS,
      redisCallsPerSec: redisCalls,
      redisUsedMemoryBytes: { before: memBefore, after: memAfter },
      redisKeys: bindings,
      schedulerCpuCores: cpu,
      schedulerRssMb: { before: procBefore.rssMb, after: procAfter.rssMb },
    };
    if (JSON_OUT) writeFileSync(JSON_OUT, JSON.stringify(results, null, 2));
  } finally {
    await scheduler.stop();
    await clearBindings();
    admin.disconnect();
  }
}

if (ROLE === 'heartbeats') {
  const result = await runHeartbeatLoad(opt('--address'), DURATION_S);
  // Exit once the pipe has taken it all (the client's connection would keep the process alive).
  process.stdout.write(JSON.stringify(result), () => process.exit(0));
} else await main();
