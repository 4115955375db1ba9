// Cost of the per-sandbox metrics sampler (docs/operations.md#per-sandbox-metrics): one aenv node sampling every
// second, idle and then with N running sandboxes; reads the pass wall time and CPU time the node exports.
// Run under the shared lock:  flock /tmp/aenv-roottests.lock node scripts/bench/sandbox-metrics-bench.mjs --n 24
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox } from 'e2b';
import { removeNode, startNode } from './lib/nodes.mjs';

const NODE = 'bmetr';
const { values } = parseArgs({
  options: { n: { type: 'string', default: '24' }, passes: { type: 'string', default: '30' } },
});
const n = Number(values.n);
const passes = Number(values.passes);

async function passTotals(server) {
  const text = await (await globalThis.fetch(`${server.url}/metrics`)).text();
  const num = (name) => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(text)?.[1] ?? NaN);
  return {
    count: num('aenv_sandbox_metrics_pass_seconds_count'),
    wall: num('aenv_sandbox_metrics_pass_seconds_sum'),
    cpu: num('aenv_sandbox_metrics_cpu_seconds_total'),
  };
}

/** Average wall and CPU ms of the passes made during `passes` seconds. */
async function measure(server) {
  const a = await passTotals(server);
  await sleep(passes * 1000);
  const b = await passTotals(server);
  const k = b.count - a.count;
  return { passes: k, wallMs: ((b.wall - a.wall) / k) * 1000, cpuMs: ((b.cpu - a.cpu) / k) * 1000 };
}

await removeNode(NODE);
const node = await startNode(NODE, '[observability.sandbox_metrics]\ninterval_secs = 1\n');
const { server, sdk } = node;
try {
  const idle = await measure(server);
  const sandboxes = [];
  for (let i = 0; i < n; i += 4) {
    sandboxes.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(4, n - i) }, () => Sandbox.create({ ...sdk, timeoutMs: 600_000 })),
      )),
    );
  }
  // A little of everything to read: each sandbox wrote a file.
  await Promise.all(sandboxes.map((s) => s.commands.run('head -c 1048576 /dev/urandom > /tmp/blob && sync')));
  const busy = await measure(server);
  const sample = await Sandbox.getMetrics(sandboxes[0].sandboxId, sdk);
  const out = {
    sandboxes: n,
    idle,
    busy,
    perSandbox: { wallMs: (busy.wallMs - idle.wallMs) / n, cpuMs: (busy.cpuMs - idle.cpuMs) / n },
    samplesOfFirst: sample.length,
  };
  console.log(JSON.stringify(out, null, 2));
} finally {
  await server.shutdown();
  await removeNode(NODE);
}
