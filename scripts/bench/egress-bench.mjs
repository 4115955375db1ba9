#!/usr/bin/env node
// Egress proxy benchmark (root): from inside a real network slot, HTTP to a host of a fake internet namespace
// (documentation addresses, on this machine only) once directly (allowOut names its CIDR) and once through the
// node's transparent egress proxy (allowOut names its domain), in the same run, interleaved; and three more
// paths through the proxy: tunneled through a SOCKS5 upstream (egressProxy; microsocks in the fake internet),
// intercepted for a network.rules header (plain HTTP), and intercepted with the upstream hop through SOCKS5.
// Then HTTPS to the same host (its certificate signed by a test CA the node trusts upstream, as
// upstream_ca_file), interleaved with the rest: direct, through the proxy as SNI passthrough (allowOut names the
// domain, no rule: never intercepted), and intercepted (a network.rules header: the node CA's leaf towards the
// sandbox, TLS verified against the test CA towards the host). The client is the same for every row.
//   - request round trip on a new connection (connect + one small GET; through the proxy this includes the
//     sniff, the node's DNS lookup and the upstream connect; for HTTPS the TLS handshake), n runs;
//   - throughput of one download of --mb MiB (median of 3);
//   - the proxy's memory for 1,000 open proxied connections (RSS and heap of this process, which runs it), for
//     plain HTTP, HTTPS passthrough and HTTPS intercepted connections.
// Everything it creates is named aebeg* / aebw* and removed at the end.
//
// Downloads through the proxy are copied in the kernel by the splice helper after their first 256 KiB;
// --no-splice measures Node's stream pipes instead (the helper's counts are printed either way).
//
//   node --expose-gc scripts/bench/egress-bench.mjs [--n 200] [--mb 512] [--no-splice] [--json]

import { spawn, execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, URL } from 'node:url';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { register } from 'tsx/esm/api';

register();
const { NetworkManager } = await import('../../packages/node/src/network/manager.ts');
const { parseNetworkPolicy } = await import('../../packages/node/src/network/policy.ts');
const { loadOrCreateNodeCa } = await import('../../packages/node/src/network/egress/node-ca.ts');
const { upstreamTrust } = await import('../../packages/node/src/network/egress/trust-store.ts');
const { makeTestCerts } = await import('../../test/e2e/fixtures/test-ca.ts');

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) || dflt : dflt);
const N = opt('--n', 200);
const MB = opt('--mb', 512);
const HOLD = 1000;
const asJson = args.includes('--json');
const REPO = fileURLToPath(new URL('../..', import.meta.url));
const HOST_WAN = '198.51.100.1';
const WEB = '198.51.100.30';
const DNS = '198.51.100.53';
const SOCKS = '198.51.100.40';
const NAME = 'bench.test';

const sh = (cmd, argv, input) =>
  execFileSync(cmd, argv, {
    encoding: 'utf8',
    input,
    stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });

// Runs in the slot's netns: `node -e CLIENT MODE HOST NAME COUNT [CA_FILE]`; prints one JSON line. With CA_FILE
// it speaks HTTPS (port 443, SNI NAME, a full handshake on every connection, the server verified against CA_FILE).
const CLIENT = `
const net = require('net');
const tls = require('tls');
const [mode, host, name, count, caFile] = process.argv.slice(1);
const secureContext = caFile ? tls.createSecureContext({ ca: require('fs').readFileSync(caFile) }) : null;
const open = (onOpen) => secureContext
  ? tls.connect({ host, port: 443, servername: name, secureContext, ALPNProtocols: ['http/1.1'] }, onOpen)
  : net.connect(80, host, onOpen);
const get = (path, onData) => new Promise((resolve, reject) => {
  const t0 = process.hrtime.bigint();
  const s = open(() => s.write('GET ' + path + ' HTTP/1.1\\r\\nHost: ' + name + '\\r\\nConnection: close\\r\\n\\r\\n'));
  let bytes = 0;
  s.on('data', (b) => { bytes += b.length; if (onData) onData(s); });
  s.on('error', reject);
  s.on('close', () => resolve({ ms: Number(process.hrtime.bigint() - t0) / 1e6, bytes }));
});
(async () => {
  if (mode === 'rtt') {
    const ms = [];
    for (let i = 0; i < Number(count); i++) ms.push((await get('/small')).ms);
    console.log(JSON.stringify(ms));
  } else if (mode === 'big') {
    console.log(JSON.stringify(await get('/big?mb=' + count)));
  } else if (mode === 'hold') {
    let opened = 0;
    const socks = [];
    for (let i = 0; i < Number(count); i++) {
      const s = open(() => s.write('GET /hold HTTP/1.1\\r\\nHost: ' + name + '\\r\\n\\r\\n'));
      s.once('data', () => { if (++opened === Number(count)) console.log(JSON.stringify({ open: opened })); });
      s.on('error', (e) => { console.log(JSON.stringify({ error: e.message, open: opened })); process.exit(1); });
      socks.push(s);
    }
    process.stdin.on('data', () => process.exit(0));
  }
})().catch((e) => { console.log(JSON.stringify({ error: e.message })); process.exit(1); });
`;

function inSlot(slot, argv) {
  return new Promise((resolve, reject) => {
    const c = spawn('nsenter', [`--net=${slot.netnsPath}`, process.execPath, '-e', CLIENT, ...argv], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    c.stdout.on('data', (b) => (out += b));
    c.stderr.on('data', (b) => (err += b));
    c.on('close', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`client: ${out}${err}`)),
    );
  });
}

const summary = (samples) => {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
  return { n: s.length, min: s[0], median: at(0.5), p95: at(0.95) };
};

const scratch = await mkdtemp(join(tmpdir(), 'aenv-egress-bench-'));
const netns = join(scratch, 'wan');
const children = [];
let nm;
const results = {};
try {
  await writeFile(netns, '');
  sh('unshare', [`--net=${netns}`, 'true']);
  sh(
    'ip',
    ['-batch', '-'],
    `link add aebw0 type veth peer name wan0 netns ${netns}\naddr add ${HOST_WAN}/24 dev aebw0\nlink set aebw0 up\n`,
  );
  sh(
    'nsenter',
    [`--net=${netns}`, 'ip', '-batch', '-'],
    `addr add ${WEB}/24 dev wan0\naddr add ${DNS}/32 dev wan0\naddr add ${SOCKS}/32 dev wan0\nlink set wan0 up\nlink set lo up\n`,
  );
  // The connected route can take a moment to be used (a busy host): wait for it, never send before it is.
  for (const ip of [WEB, DNS, SOCKS]) {
    let route = '';
    for (let i = 0; i < 30 && !/ dev aebw0 /.test((route = sh('ip', ['route', 'get', ip]))); i++)
      await sleep(100);
    if (!/ dev aebw0 /.test(route)) throw new Error(`${ip} would not stay on this machine: ${route.trim()}`);
  }
  // The fake internet's "public" CA; the clients trust it and the node CA alike (one CA file for every row).
  const certs = makeTestCerts(scratch, 'aenv egress bench public CA', [NAME]);
  const hosts = spawn(
    'nsenter',
    [
      `--net=${netns}`,
      process.execPath,
      join(REPO, 'test/e2e/fixtures/egress-upstream.mjs'),
      JSON.stringify({
        dns: DNS,
        records: { [NAME]: WEB },
        web: WEB,
        echo: DNS,
        cert: certs.cert,
        key: certs.key,
      }),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.push(hosts);
  await /** @type {Promise<void>} */ (
    new Promise((resolve) => hosts.stdout.on('data', (b) => b.toString().includes('ready') && resolve()))
  );

  // The SOCKS5 upstream, resolving names through its own hosts file (a private mount namespace).
  await writeFile(join(scratch, 'hosts'), `${WEB} ${NAME}\n`);
  const socks = spawn(
    'nsenter',
    [
      `--net=${netns}`,
      'unshare',
      '--mount',
      'sh',
      '-c',
      `mount --bind ${join(scratch, 'hosts')} /etc/hosts && exec microsocks -i ${SOCKS} -p 1080`,
    ],
    { stdio: 'ignore' },
  );
  children.push(socks);
  for (let i = 0; i < 50 && !sh('nsenter', [`--net=${netns}`, 'ss', '-ltn']).includes(`${SOCKS}:1080`); i++)
    await sleep(100);

  await mkdir(join(scratch, 'home'), { mode: 0o700 });
  const ca = await loadOrCreateNodeCa({ homePath: join(scratch, 'home') });
  const clientCa = join(scratch, 'client-ca.pem');
  await writeFile(clientCa, `${await readFile(certs.ca, 'utf8')}${ca.certPem}`);
  nm = new NetworkManager({
    runtimePath: join(scratch, 'run'),
    internal: { hostInteractionCidr: '10.231.0.0/16', vethCidr: '10.232.0.0/16' },
    egress: { alwaysDeniedCidrs: [] },
    nameserver: DNS,
    pool: { lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false },
    controlPlanePort: 49983,
    namePrefix: 'aebeg',
    domainEgress: {
      proxyPorts: [80, 443],
      proxyListenPort: 0,
      dnsListenPort: 0,
      resolvers: [DNS],
      // As a node with upstream_ca_file set: the host's bundle and the test CA.
      intercept: { ca, upstreamCa: upstreamTrust(certs.ca) },
      splice: !args.includes('--no-splice'),
    },
  });
  await nm.init();
  const closed = { allowOut: [NAME], allowInternetAccess: false };
  const rules = { [NAME]: [{ transform: { headers: { Authorization: 'Bearer bench' } } }] };
  const egressProxy = { address: `${SOCKS}:1080` };
  /** Path → the policy of its slot. */
  const paths = {
    direct: { allowOut: [WEB], allowInternetAccess: false },
    'through the proxy': closed,
    'tunneled through SOCKS5': { ...closed, egressProxy },
    'intercepted (rules)': { ...closed, rules },
    'intercepted, through SOCKS5': { ...closed, rules, egressProxy },
  };
  const slots = {};
  for (const [path, policy] of Object.entries(paths)) {
    slots[path] = await nm.acquire();
    await nm.applyPolicy(slots[path], parseNetworkPolicy(policy));
  }
  const proxied = slots['through the proxy'];
  /** What is measured: every plain-HTTP path, then HTTPS on the direct, proxied and intercepted slots. */
  const rows = [
    ...Object.keys(paths).map((path) => ({ path, slot: slots[path], tls: [] })),
    { path: 'HTTPS direct', slot: slots.direct, tls: [clientCa] },
    { path: 'HTTPS passthrough (domain)', slot: proxied, tls: [clientCa] },
    { path: 'HTTPS intercepted (rules)', slot: slots['intercepted (rules)'], tls: [clientCa] },
  ];
  const client = (row, mode, count) => inSlot(row.slot, [mode, WEB, NAME, String(count), ...row.tls]);

  // Warm every path (the intercepted HTTPS one mints its leaf here), then interleave rounds so all see the same
  // load.
  for (const row of rows) await client(row, 'rtt', 5);
  /** @type {Record<string, number[]>} */
  const rtt = Object.fromEntries(rows.map((r) => [r.path, []]));
  const rounds = 4;
  for (let r = 0; r < rounds; r++)
    for (const row of rows) rtt[row.path].push(...(await client(row, 'rtt', N / rounds)));
  const directRtt = summary(rtt['HTTPS direct']).median;
  for (const row of rows) {
    const s = summary(rtt[row.path]);
    if (row.tls.length === 0) results[`new connection + small GET, ${row.path} (ms)`] = s;
    else
      results[`new connection + TLS handshake + small GET, ${row.path} (ms)`] =
        row.path === 'HTTPS direct' ? s : { ...s, addedMs: +(s.median - directRtt).toFixed(3) };
  }

  /** @type {Record<string, number[]>} */
  const mbps = Object.fromEntries(rows.map((r) => [r.path, []]));
  for (let r = 0; r < 3; r++) {
    for (const row of rows) {
      const got = await client(row, 'big', MB);
      mbps[row.path].push(got.bytes / 2 ** 20 / (got.ms / 1000));
    }
  }
  const directMbps = summary(mbps['HTTPS direct']).median;
  for (const row of rows) {
    const s = summary(mbps[row.path]);
    results[`download ${MB} MiB, ${row.path} (MiB/s)`] =
      row.tls.length === 0 || row.path === 'HTTPS direct'
        ? s
        : { ...s, ofDirect: +(s.median / directMbps).toFixed(3) };
  }
  results['splice helper'] = nm.egressSplice ?? { off: 1 };

  /**
   * The proxy's memory growth while `row`'s slot holds HOLD connections, each with a response begun; `timed` adds
   * how long they took to open and the longest the proxy's event loop stalled meanwhile. A holder that fails is
   * reported (with how many it had open), not thrown: the rows before it are kept.
   */
  const held = async (row, timed) => {
    for (let i = 0; i < 100 && nm.egressConnections > 0; i++) await sleep(100);
    globalThis.gc?.();
    const before = process.memoryUsage();
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    const t0 = performance.now();
    const holder = spawn(
      'nsenter',
      [
        `--net=${row.slot.netnsPath}`,
        process.execPath,
        '-e',
        CLIENT,
        'hold',
        WEB,
        NAME,
        String(HOLD),
        ...row.tls,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    children.push(holder);
    const got = await new Promise((resolve) => {
      holder.stdout.once('data', (b) => resolve(JSON.parse(b.toString())));
      holder.once('exit', (code) => resolve({ error: `exited with ${code}` }));
    });
    const openMs = +(performance.now() - t0).toFixed(0);
    loop.disable();
    const stalls = { openMs, loopDelayMaxMs: +(loop.max / 1e6).toFixed(0) };
    if (got.open !== HOLD) {
      console.error(`holder of ${row.path}: ${JSON.stringify(got)}`);
      return { failedAfterOpen: got.open ?? 0, ...stalls };
    }
    globalThis.gc?.();
    const after = process.memoryUsage();
    const open = nm.egressConnections;
    holder.stdin.end('x');
    await new Promise((resolve) => (holder.exitCode === null ? holder.once('exit', resolve) : resolve(null)));
    return {
      openProxied: open,
      rssMiB: +((after.rss - before.rss) / 2 ** 20).toFixed(1),
      heapMiB: +((after.heapUsed - before.heapUsed) / 2 ** 20).toFixed(1),
      gc: globalThis.gc !== undefined,
      ...(timed ? stalls : {}),
    };
  };
  results['proxy memory per 1,000 open connections'] = await held(rows[1], false);
  results['proxy memory per 1,000 open connections, HTTPS passthrough (domain)'] = await held(
    rows.at(-2),
    true,
  );
  results['proxy memory per 1,000 open connections, HTTPS intercepted (rules)'] = await held(
    rows.at(-1),
    true,
  );
  for (const slot of Object.values(slots)) await nm.release(slot);
} finally {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await nm?.shutdown({ destroyAll: true }).catch((e) => console.error(`cleanup: ${e.message}`));
  try {
    sh('ip', ['link', 'del', 'aebw0']);
  } catch {
    // already gone
  }
  try {
    sh('umount', [netns]);
  } catch {
    // not mounted
  }
  await rm(scratch, { recursive: true, force: true });
}

if (asJson) console.log(JSON.stringify(results, null, 2));
else {
  const pad = Math.max(...Object.keys(results).map((k) => k.length));
  for (const [k, v] of Object.entries(results)) {
    const fmt = (x) => (typeof x === 'number' ? x.toFixed(3) : x);
    console.log(
      `${k.padEnd(pad)} ${Object.entries(v)
        .map(([a, b]) => `${a}=${fmt(b)}`)
        .join('  ')}`,
    );
  }
}
