#!/usr/bin/env node
// Gateway overhead (docs/benchmarks.md#gateway): one real `aenv scheduler`, one node reporting heartbeats and
// one `aenv gateway`, all processes on this machine; the same operations with the e2b SDK straight to the
// node and through the gateway, interleaved in the same run: create → usable (Sandbox.create), exec round
// trip (commands.run('true')) and a file read. min / median / p95 in ms and the added median.
// Needs root and `npm run build`; run it under the shared lock:
//   flock /tmp/aenv-roottests.lock node scripts/bench/gateway-bench.mjs [--creates 10] [--execs 100] [--json]
import { mkdirSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { URL } from 'node:url';
import { register } from 'tsx/esm/api';
import { Sandbox } from 'e2b';

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

const port = await harness.freePort();
const sched = await startSchedulerProcess({
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
const gw = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, KEY);
const via = {
  node: { apiUrl: node.url, sandboxUrl: node.url, apiKey: KEY, debug: false },
  gateway: { apiUrl: gw.url, sandboxUrl: gw.url, apiKey: KEY, debug: false },
};
/** @type {{place: number[], record: number[]}} */
const phases = { place: [], record: [] };
const samples = {
  create: { node: [], gateway: [] },
  exec: { node: [], gateway: [] },
  read: { node: [], gateway: [] },
};
try {
  // Warm-up: one create and a few execs each way (connections, caches).
  for (const o of Object.values(via)) {
    const s = await Sandbox.create({ ...o, timeoutMs: 120_000 });
    await s.commands.run('true');
    await s.kill();
  }
  for (let i = 0; i < CREATES; i++)
    for (const [k, o] of Object.entries(via)) {
      /** @type {Sandbox[]} */
      const made = [];
      samples.create[k].push(
        await time(async () => made.push(await Sandbox.create({ ...o, timeoutMs: 120_000 }))),
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
  const handles = {
    node: await Sandbox.connect(sbx.sandboxId, via.node),
    gateway: await Sandbox.connect(sbx.sandboxId, via.gateway),
  };
  for (let i = 0; i < EXECS; i++)
    for (const [k, h] of Object.entries(handles)) {
      samples.exec[k].push(await time(() => h.commands.run('true')));
      samples.read[k].push(await time(() => h.files.read('/tmp/bench.txt')));
    }
  await sbx.kill();
} finally {
  await gw.stop();
  await node.shutdown();
  await sched.stop();
}

const rows = Object.entries(samples).map(([op, s]) => {
  const n = stats(s.node);
  const g = stats(s.gateway);
  return { op, node: n, gateway: g, addedMedianMs: g.median - n.median };
});
const gatewayPhases = Object.fromEntries(
  Object.entries(phases).map(([k, v]) => [k, v.length > 0 ? stats(v) : undefined]),
);
if (asJson) process.stdout.write(JSON.stringify({ rows, gatewayPhases }, null, 2) + '\n');
else {
  const f = (x) => x.toFixed(2);
  console.log('gateway overhead (ms): node min/median/p95 | gateway min/median/p95 | added median');
  for (const r of rows)
    console.log(
      `${r.op.padEnd(7)} n=${r.node.n}  ${f(r.node.min)}/${f(r.node.median)}/${f(r.node.p95)} | ` +
        `${f(r.gateway.min)}/${f(r.gateway.median)}/${f(r.gateway.p95)} | ${f(r.addedMedianMs)}`,
    );
  for (const [k, st] of Object.entries(gatewayPhases))
    if (st)
      console.log(
        `create, gateway ${k} (Server-Timing) n=${st.n}  ${f(st.min)}/${f(st.median)}/${f(st.p95)}`,
      );
}
