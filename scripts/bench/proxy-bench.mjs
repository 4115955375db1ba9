#!/usr/bin/env node
// Data-plane proxy overhead: the same requests sent to a local upstream directly and through SandboxProxy
// (in this process, in front of the same upstream), n sequential rounds each plus a concurrent round;
// min / median / p95 in ms and the added median. Needs no root and sends traffic on loopback only.
//
//   node scripts/bench/proxy-bench.mjs [--n 2000] [--concurrency 8] [--json]
//   PROXY_BENCH_IMPL=<dir holding proxy.ts> node scripts/bench/proxy-bench.mjs   (compare another version)
//
// The upstream mimics envd: a small unary JSON answer (an RPC such as process.List), and a server-streaming
// answer written in four pieces (what commands.run gets: start event, data, end event, trailer).
import { Agent, createServer, request } from 'node:http';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { register } from 'tsx/esm/api';

register();
// PROXY_BENCH_IMPL: another copy of packages/proxy/src (e.g. an older commit's) to compare with.
const impl = process.env.PROXY_BENCH_IMPL ?? '../../packages/proxy/src';
const { SandboxProxy } = await import(`${impl}/proxy.ts`);
const { createLogger } = await import('../../packages/node/src/util/log.ts');

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) || dflt : dflt;
};
const N = opt('--n', 2000);
const CONCURRENCY = opt('--concurrency', 8);
const asJson = args.includes('--json');
const ID = '01936f8e-72f5-7000-8000-0000000000b1';
const TOKEN = 'a'.repeat(64);

const listen = (server) =>
  new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));

const upstream = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (req.url === '/stream') {
      res.writeHead(200, { 'content-type': 'application/connect+json' });
      res.write('start-event'.padEnd(64, '.'));
      res.write('stdout-data'.padEnd(64, '.'));
      res.write('end-event'.padEnd(64, '.'));
      res.end('{}');
      return;
    }
    const body = JSON.stringify({ got: Buffer.concat(chunks).length, pad: 'x'.repeat(512) });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
});
const upstreamPort = await listen(upstream);

const target = {
  sandboxId: ID,
  state: 'running',
  secure: true,
  allowPublicTraffic: true,
  autoResume: false,
  createdAt: new Date().toISOString(),
  upstream: { host: '127.0.0.1', instanceId: 'bench-instance' },
};
const directory = {
  lookup: (id) => (id === ID ? target : undefined),
  settle: async (id) => (id === ID ? target : undefined),
  autoResume: async () => target,
  verifyEnvdToken: (_id, t) => t === TOKEN,
  verifyTrafficToken: () => false,
  verifyFilesSignature: () => false,
  findBySignedFilesUrl: () => undefined,
};
const silent = new Writable({ write: (_c, _e, cb) => cb() });
const proxy = new SandboxProxy({
  domains: [],
  // The upstream stands in for envd, so the proxy's envd port is the upstream's port.
  envdPort: upstreamPort,
  platformApiKey: 'e2b_' + '1'.repeat(40),
  directory,
  logger: createLogger('json', 'error', silent),
});
const front = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  if (proxy.claims(req)) proxy.handle(req, res);
  else res.writeHead(404).end();
});
const frontPort = await listen(front);

const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
const payload = Buffer.from(JSON.stringify({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'true'] } }));

function once(port, path, viaProxy) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const headers = { 'content-type': 'application/json', 'content-length': String(payload.length) };
    if (viaProxy) {
      headers['e2b-sandbox-id'] = ID;
      headers['e2b-sandbox-port'] = String(upstreamPort);
      headers['x-access-token'] = TOKEN;
    }
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers }, (res) => {
      res.on('data', () => {});
      res.on('end', () =>
        res.statusCode === 200
          ? resolve(performance.now() - t0)
          : reject(new Error(`status ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function summary(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
  return { n: s.length, min: s[0], median: at(0.5), p95: at(0.95) };
}

async function sequential(path, viaProxy) {
  const out = [];
  for (let i = 0; i < N; i++) out.push(await once(viaProxy ? frontPort : upstreamPort, path, viaProxy));
  return out;
}

async function concurrent(path, viaProxy) {
  const out = [];
  const per = Math.ceil(N / CONCURRENCY);
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = 0; i < per; i++) out.push(await once(viaProxy ? frontPort : upstreamPort, path, viaProxy));
    }),
  );
  return out;
}

const rows = [];
/** @type {[string, string, (path: string, viaProxy: boolean) => Promise<number[]>][]} */
const cases = [
  ['unary POST (1 KB answer)', '/rpc', sequential],
  ['server-streaming POST (4 writes)', '/stream', sequential],
  [`unary POST, ${CONCURRENCY} concurrent clients`, '/rpc', concurrent],
];
for (const [name, path, run] of cases) {
  await run(path, false);
  await run(path, true); // warm-up, dropped
  const direct = summary(await run(path, false));
  const proxied = summary(await run(path, true));
  rows.push({ op: name, direct, proxied, addedMedianMs: proxied.median - direct.median });
}

if (asJson) console.log(JSON.stringify({ n: N, concurrency: CONCURRENCY, rows }, null, 2));
else {
  const f = (x) => x.toFixed(3).padStart(7);
  console.log(
    `proxy overhead, n=${N} per row (ms): direct min/median/p95 | proxied min/median/p95 | added median`,
  );
  for (const r of rows)
    console.log(
      `${r.op.padEnd(40)} ${f(r.direct.min)} ${f(r.direct.median)} ${f(r.direct.p95)} | ` +
        `${f(r.proxied.min)} ${f(r.proxied.median)} ${f(r.proxied.p95)} | ${f(r.addedMedianMs)}`,
    );
}
proxy.closeAll();
agent.destroy();
front.close();
upstream.close();
