#!/usr/bin/env node
// The gateway's own cost per request (docs/benchmarks.md#gateway), without sandboxes: one real `aenv scheduler`
// and one real `aenv gateway` process in front of a stand-in node (a child process answering as a node does: a
// create, a Connect server stream like an exec's, a 4 KiB file read), beside the floor relay (lib/floor-relay.mjs)
// and straight to the stand-in. Blocks of requests, interleaved and rotated; per path the median over blocks of
// the time per request and of the CPU the relaying process spent per request (every thread, from
// /proc/<pid>/task/*/schedstat), and the scheduler round trips from this process. The CPU per request is the
// number that does not depend on how busy the machine is; the times do. No root, no lock needed
// (`npm run build` first):
//   node scripts/bench/gateway-relay-bench.mjs [--blocks 12] [--per-block 200] [--json]
import { fork } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { performance } from 'node:perf_hooks';
import { setImmediate } from 'node:timers';
import { fileURLToPath, URL } from 'node:url';
import { Agent } from 'undici';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) || dflt : dflt;
};

// ---- role: the stand-in node ---------------------------------------------------------------------------
if (args.includes('--role')) {
  let made = 0;
  const envelope = (json) => {
    const b = Buffer.from(JSON.stringify(json));
    const p = Buffer.alloc(5);
    p.writeUInt32BE(b.length, 1);
    return Buffer.concat([p, b]);
  };
  const file = Buffer.alloc(4096, 'x');
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const path = (req.url ?? '/').replace(/^\/proxy(?=\/)/, '');
      if (req.method === 'GET' && path.startsWith('/templates/')) {
        const b = JSON.stringify({ templateID: 'base', aliases: ['base'], buildID: 'b1' });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b) });
        return res.end(b);
      }
      if (req.method === 'POST' && path === '/v2/sandboxes') {
        const b = JSON.stringify({
          sandboxID: `relay${made++}`,
          templateID: 'base',
          clientID: 'stand-in',
          envdVersion: '0.2.0',
          envdAccessToken: 'token',
          domain: null,
        });
        res.writeHead(201, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(b),
          'server-timing': 'total;dur=1',
        });
        return res.end(b);
      }
      if (req.method === 'POST' && path === '/process.Process/Start') {
        // A process start as envd streams it: the start event at once, the end a tick later.
        res.writeHead(200, { 'content-type': 'application/connect+json' });
        res.write(envelope({ event: { start: { pid: 42 } } }));
        setImmediate(() => {
          res.write(envelope({ event: { end: { exitCode: 0, exited: true, status: 'exit status 0' } } }));
          res.end(Buffer.concat([Buffer.from([2, 0, 0, 0, 2]), Buffer.from('{}')]));
        });
        return;
      }
      if (req.method === 'GET' && path.startsWith('/files')) {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': file.length });
        return res.end(file);
      }
      res.writeHead(404, { 'content-length': '0' }).end();
    });
  });
  server.keepAliveTimeout = 65_000;
  server.listen(0, '127.0.0.1', () =>
    process.send?.({ port: /** @type {import('node:net').AddressInfo} */ (server.address()).port }),
  );
  process.on('disconnect', () => process.exit(0));
} else await main();

async function main() {
  const { register } = await import('tsx/esm/api');
  register();
  const here = (p) => new URL(p, import.meta.url).href;
  const { startSchedulerProcess } = await import(
    here('../../packages/scheduler/src/testing/scheduler-process.ts')
  );
  const { startGatewayProcess } = await import(here('../../packages/gateway/src/testing/gateway-process.ts'));
  const { createSchedulerClient } = await import('@aenv/protocol');

  const BLOCKS = Math.min(100, opt('--blocks', 12));
  const PER_BLOCK = Math.min(5000, opt('--per-block', 200));
  const asJson = args.includes('--json');
  const KEY = `e2b_${'5ee1a7'.repeat(10)}`;
  const SANDBOX = 'relay-sbx';

  /** @returns {Promise<{ child: import('node:child_process').ChildProcess, url: string }>} */
  const forked = (file, argv) =>
    new Promise((resolve, reject) => {
      const child = fork(file, argv, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      child.once('message', (m) =>
        resolve({ child, url: `http://127.0.0.1:${/** @type {{port: number}} */ (m).port}` }),
      );
      child.once('exit', (code) => reject(new Error(`${file} exited (${code})`)));
    });
  const stop = async (child) => {
    const exited = new Promise((r) => child.once('exit', r));
    child.disconnect();
    await exited;
  };
  /** On-CPU ns of every thread of a process. */
  const cpuNs = (pid) => {
    let all = 0;
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      try {
        all += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // a thread that ended between the listing and the read
      }
    }
    return all;
  };
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

  const node = await forked(fileURLToPath(import.meta.url), ['--role', 'node']);
  const sched = await startSchedulerProcess({
    log_level: 'info',
    scheduler: { nodes: [{ id: 'stand-in', endpoint: node.url }] },
  });
  const gw = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, KEY);
  const floor = await forked(fileURLToPath(here('./lib/floor-relay.mjs')), [node.url, sched.grpcAddress]);
  const sc = createSchedulerClient(sched.grpcAddress);
  const standIn = { nodeId: 'stand-in', endpoint: node.url };
  await sc.recordAssignment({ sandboxId: SANDBOX, node: standIn });

  const agent = new Agent({ keepAliveTimeout: 60_000 });
  const dataHeaders = {
    'e2b-sandbox-id': SANDBOX,
    'e2b-sandbox-port': '49983',
    'x-access-token': 'token',
    'user-agent': 'e2b-js-sdk/2',
    'connect-protocol-version': '1',
  };
  /** @type {Record<string, (url: string) => Promise<import('undici').Dispatcher.ResponseData>>} */
  const ops = {
    exec: (url) =>
      agent.request({
        origin: url,
        path: '/process.Process/Start',
        method: 'POST',
        headers: { ...dataHeaders, 'content-type': 'application/connect+json' },
        body: Buffer.concat([
          Buffer.from([0, 0, 0, 0, 40]),
          Buffer.from(JSON.stringify({ cmd: '/bin/true' }).padEnd(40)),
        ]),
      }),
    read: (url) =>
      agent.request({
        origin: url,
        path: '/files?path=%2Ftmp%2Fbench.txt',
        method: 'GET',
        headers: dataHeaders,
      }),
    create: (url) =>
      agent.request({
        origin: url,
        path: '/v2/sandboxes',
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: JSON.stringify({ templateID: 'base', timeout: 60 }),
      }),
  };
  const paths = {
    node: { url: node.url, pid: node.child.pid },
    floor: { url: floor.url, pid: floor.child.pid },
    gateway: { url: gw.url, pid: gw.pid },
  };
  const names = Object.keys(paths);
  /** @type {Record<string, Record<string, { ms: number[], cpuUs: number[] }>>} */
  const blocks = Object.fromEntries(
    Object.keys(ops).map((op) => [op, Object.fromEntries(names.map((k) => [k, { ms: [], cpuUs: [] }]))]),
  );
  const once = async (op, url) => {
    const r = await ops[op](url);
    await r.body.arrayBuffer();
    if (r.statusCode >= 300) throw new Error(`${op} via ${url}: ${r.statusCode}`);
  };
  /** @type {number[]} */
  const grpcMs = [];
  try {
    for (let b = 0; b < BLOCKS; b++)
      for (const op of Object.keys(ops))
        for (let j = 0; j < names.length; j++) {
          const k = names[(b + j) % names.length];
          const p = paths[k];
          for (let i = 0; i < 20; i++) await once(op, p.url);
          const cpu0 = cpuNs(p.pid);
          const t0 = performance.now();
          for (let i = 0; i < PER_BLOCK; i++) await once(op, p.url);
          blocks[op][k].ms.push((performance.now() - t0) / PER_BLOCK);
          blocks[op][k].cpuUs.push((cpuNs(p.pid) - cpu0) / PER_BLOCK / 1e3);
          if (op === 'create')
            for (let i = 0; i < 20; i++) {
              const t = performance.now();
              await sc.schedule({});
              await sc.recordAssignment({ sandboxId: SANDBOX, node: standIn });
              grpcMs.push(performance.now() - t);
            }
        }
  } finally {
    await gw.stop();
    await stop(floor.child);
    await sched.stop();
    await stop(node.child);
    await agent.close();
  }
  /** @typedef {{ ms: number, cpuUs: number }} Cell */
  /** @type {{ op: string, node: Cell, floor: Cell, gateway: Cell }[]} */
  const rows = Object.entries(blocks).map(([op, by]) => ({
    op,
    .../** @type {any} */ (
      Object.fromEntries(
        Object.entries(by).map(([k, v]) => [k, { ms: median(v.ms), cpuUs: median(v.cpuUs) }]),
      )
    ),
  }));
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const scheduleAndRecordMs = median(grpcMs);
  if (asJson) process.stdout.write(JSON.stringify({ load, rows, scheduleAndRecordMs }, null, 2) + '\n');
  else {
    console.log(`load average at the end: ${load}; ${BLOCKS} blocks of ${PER_BLOCK} per path and operation`);
    console.log('median per request: ms (CPU µs of the answering / relaying process)');
    for (const r of rows)
      console.log(
        `${r.op.padEnd(7)} node ${r.node.ms.toFixed(3)} (${r.node.cpuUs.toFixed(0)}) | floor ${r.floor.ms.toFixed(3)} ` +
          `(${r.floor.cpuUs.toFixed(0)}) | gateway ${r.gateway.ms.toFixed(3)} (${r.gateway.cpuUs.toFixed(0)})`,
      );
    console.log(
      `Schedule + RecordAssignment from this process: ${scheduleAndRecordMs.toFixed(3)} ms (median)`,
    );
  }
}
