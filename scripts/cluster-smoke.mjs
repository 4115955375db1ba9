#!/usr/bin/env node
// A smoke run of a cluster through its gateway with the e2b SDK, as a user would make it: sandboxes on every
// node, commands, files, the merged list, pause and connect, fork, kill. Reads E2B_API_URL / E2B_SANDBOX_URL /
// E2B_API_KEY (what `scripts/local-cluster.sh up` prints, or the Compose gateway: `scripts/cluster-compose.sh
// smoke`). Prints each step and exits 1 at the first that fails; kills what it created either way.
//
//   node scripts/cluster-smoke.mjs [--sandboxes N]   (default: 2 per node)
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Sandbox } from 'e2b';

const { values: args } = parseArgs({ options: { sandboxes: { type: 'string' } } });
const url = process.env.E2B_API_URL;
const key = process.env.E2B_API_KEY;
if (!url || !key) {
  console.error('cluster-smoke: set E2B_API_URL (the gateway), E2B_SANDBOX_URL and E2B_API_KEY');
  process.exit(2);
}
const api = async (method, path, body) => {
  const r = await globalThis.fetch(url + path, {
    method,
    headers: { 'x-api-key': key, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined };
};
const created = [];
const step = async (name, fn) => {
  const t0 = performance.now();
  const out = await fn();
  console.log(`ok   ${name} (${(performance.now() - t0).toFixed(0)} ms)`);
  return out;
};
const check = (cond, what) => {
  if (!cond) throw new Error(what);
};

let failed = false;
try {
  const nodes = await step('GET /nodes', async () => {
    const r = await api('GET', '/nodes');
    check(r.status === 200 && r.body.length > 0, `GET /nodes answered ${r.status}`);
    const ready = r.body.filter((n) => n.status === 'ready').map((n) => n.id ?? n.nodeID);
    check(
      ready.length === r.body.length,
      `not every node is ready: ${JSON.stringify(r.body.map((n) => n.status))}`,
    );
    return ready;
  });
  const count = Number(args.sandboxes ?? nodes.length * 2);
  const sandboxes = await step(`create ${count} sandboxes from base`, async () => {
    const out = [];
    for (let i = 0; i < count; i++) {
      const sbx = await Sandbox.create({ timeoutMs: 600_000 });
      created.push(sbx.sandboxId);
      out.push(sbx);
    }
    return out;
  });
  await step(
    'every node holds some of them (GET /nodes sandboxCount, after the next heartbeats)',
    async () => {
      let counts = [];
      for (let i = 0; i < 30; i++) {
        const r = await api('GET', '/nodes');
        counts = r.body.map((n) => [n.id, n.sandboxCount]);
        if (count < nodes.length || counts.every(([, c]) => c > 0)) break;
        await new Promise((resolve) => globalThis.setTimeout(resolve, 1000));
      }
      const shown = counts.map(([id, c]) => `${id}: ${c}`).join(', ');
      console.log(`     (${shown})`);
      if (count >= nodes.length)
        check(
          counts.every(([, c]) => c > 0),
          `a node holds none: ${shown}`,
        );
    },
  );
  await step('exec in each', async () => {
    for (const sbx of sandboxes) {
      const r = await sbx.commands.run(`echo hello-${sbx.sandboxId}`);
      check(r.stdout.trim() === `hello-${sbx.sandboxId}`, `exec in ${sbx.sandboxId} printed ${r.stdout}`);
    }
  });
  await step('write and read a file in each', async () => {
    for (const sbx of sandboxes) {
      await sbx.files.write('/tmp/smoke.txt', sbx.sandboxId);
      check((await sbx.files.read('/tmp/smoke.txt')) === sbx.sandboxId, `file in ${sbx.sandboxId}`);
    }
  });
  await step('the list merges every node', async () => {
    const listed = new Set((await Sandbox.list().nextItems()).map((s) => s.sandboxId));
    for (const id of created) check(listed.has(id), `${id} is not in the list`);
  });
  const first = sandboxes[0];
  await step('pause, then connect (resume) with the memory kept', async () => {
    await first.commands.run('sleep 100000', { background: true });
    // (The background command is a login shell until it execs sleep.)
    const findSleep = 'for i in $(seq 50); do pgrep -x sleep && exit 0; sleep 0.1; done; exit 1';
    const before = (await first.commands.run(findSleep)).stdout.trim();
    await first.pause();
    const back = await Sandbox.connect(first.sandboxId, { timeoutMs: 600_000 });
    const after = (await back.commands.run('pgrep -x sleep')).stdout.trim();
    check(before !== '' && before === after, `the sleep process was ${before}, is ${after}`);
  });
  await step('fork x2 (children usable)', async () => {
    const r = await api('POST', `/sandboxes/${first.sandboxId}/fork`, { count: 2, timeout: 600 });
    check(r.status === 200 || r.status === 201, `fork answered ${r.status}: ${JSON.stringify(r.body)}`);
    const children = (Array.isArray(r.body) ? r.body : (r.body.sandboxes ?? []))
      .map((c) => c.sandboxID ?? c.sandbox?.sandboxID)
      .filter(Boolean);
    check(children.length === 2, `fork gave ${JSON.stringify(r.body)}`);
    for (const id of children) {
      created.push(id);
      const child = await Sandbox.connect(id, { timeoutMs: 600_000 });
      check(
        (await child.files.read('/tmp/smoke.txt')) === first.sandboxId,
        `child ${id} lacks the parent's file`,
      );
    }
  });
} catch (e) {
  failed = true;
  console.error(`FAIL ${e instanceof Error ? e.message : String(e)}`);
} finally {
  let killed = 0;
  for (const id of created) if (await Sandbox.kill(id).catch(() => false)) killed++;
  console.log(`killed ${killed} of ${created.length} sandboxes`);
}
process.exit(failed ? 1 : 0);
