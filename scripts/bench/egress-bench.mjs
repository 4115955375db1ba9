#!/usr/bin/env node
// Egress proxy benchmark (root): from inside a real network slot, HTTP to a host of a fake internet namespace
// (documentation addresses, on this machine only) once directly (allowOut names its CIDR) and once through the
// node's transparent egress proxy (allowOut names its domain), in the same run, interleaved:
//   - request round trip on a new connection (connect + one small GET; through the proxy this includes the
//     sniff, the node's DNS lookup and the upstream connect), n runs;
//   - throughput of one download of --mb MiB;
//   - the proxy's memory for 1,000 open proxied connections (RSS and heap of this process, which runs it).
// Everything it creates is named aebeg* / aebw* and removed at the end.
//
//   node --expose-gc scripts/bench/egress-bench.mjs [--n 200] [--mb 512] [--json]

import { spawn, execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, URL } from 'node:url';
import { register } from 'tsx/esm/api';

register();
const { NetworkManager } = await import('../../packages/node/src/network/manager.ts');
const { parseNetworkPolicy } = await import('../../packages/node/src/network/policy.ts');

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
const NAME = 'bench.test';

const sh = (cmd, argv, input) =>
  execFileSync(cmd, argv, {
    encoding: 'utf8',
    input,
    stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });

// Runs in the slot's netns: `node -e CLIENT MODE ...`; prints one JSON line.
const CLIENT = `
const net = require('net');
const [mode, host, name, count] = process.argv.slice(1);
const get = (path, onData) => new Promise((resolve, reject) => {
  const t0 = process.hrtime.bigint();
  const s = net.connect(80, host, () => s.write('GET ' + path + ' HTTP/1.1\\r\\nHost: ' + name + '\\r\\nConnection: close\\r\\n\\r\\n'));
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
    let open = 0;
    const socks = [];
    for (let i = 0; i < Number(count); i++) {
      const s = net.connect(80, host, () => s.write('GET /hold HTTP/1.1\\r\\nHost: ' + name + '\\r\\n\\r\\n'));
      s.once('data', () => { if (++open === Number(count)) console.log(JSON.stringify({ open })); });
      s.on('error', (e) => { console.log(JSON.stringify({ error: e.message })); process.exit(1); });
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
    `addr add ${WEB}/24 dev wan0\naddr add ${DNS}/32 dev wan0\nlink set wan0 up\nlink set lo up\n`,
  );
  for (const ip of [WEB, DNS]) {
    if (!/ dev aebw0 /.test(sh('ip', ['route', 'get', ip])))
      throw new Error(`${ip} would not stay on this machine`);
  }
  const hosts = spawn(
    'nsenter',
    [
      `--net=${netns}`,
      process.execPath,
      join(REPO, 'test/e2e/fixtures/egress-upstream.mjs'),
      JSON.stringify({ dns: DNS, records: { [NAME]: WEB }, web: WEB, echo: DNS }),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.push(hosts);
  await /** @type {Promise<void>} */ (
    new Promise((resolve) => hosts.stdout.on('data', (b) => b.toString().includes('ready') && resolve()))
  );

  nm = new NetworkManager({
    runtimePath: join(scratch, 'run'),
    internal: { hostInteractionCidr: '10.231.0.0/16', vethCidr: '10.232.0.0/16' },
    egress: { alwaysDeniedCidrs: [] },
    nameserver: DNS,
    pool: { lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false },
    controlPlanePort: 49983,
    namePrefix: 'aebeg',
    domainEgress: { proxyPorts: [80, 443], proxyListenPort: 0, dnsListenPort: 0, resolvers: [DNS] },
  });
  await nm.init();
  const direct = await nm.acquire();
  await nm.applyPolicy(direct, parseNetworkPolicy({ allowOut: [WEB], allowInternetAccess: false }));
  const proxied = await nm.acquire();
  await nm.applyPolicy(proxied, parseNetworkPolicy({ allowOut: [NAME], allowInternetAccess: false }));

  // Warm both paths, then interleave rounds so both see the same load.
  await inSlot(direct, ['rtt', WEB, NAME, '5']);
  await inSlot(proxied, ['rtt', WEB, NAME, '5']);
  /** @type {{ direct: number[]; proxied: number[] }} */
  const rtt = { direct: [], proxied: [] };
  const rounds = 4;
  for (let r = 0; r < rounds; r++) {
    rtt.direct.push(...(await inSlot(direct, ['rtt', WEB, NAME, String(N / rounds)])));
    rtt.proxied.push(...(await inSlot(proxied, ['rtt', WEB, NAME, String(N / rounds)])));
  }
  results['new connection + small GET, direct (ms)'] = summary(rtt.direct);
  results['new connection + small GET, through the proxy (ms)'] = summary(rtt.proxied);

  const mbps = { direct: [], proxied: [] };
  for (let r = 0; r < 3; r++) {
    for (const [k, slot] of [
      ['direct', direct],
      ['proxied', proxied],
    ]) {
      const got = await inSlot(slot, ['big', WEB, NAME, String(MB)]);
      mbps[k].push(got.bytes / 2 ** 20 / (got.ms / 1000));
    }
  }
  results[`download ${MB} MiB, direct (MiB/s)`] = summary(mbps.direct);
  results[`download ${MB} MiB, through the proxy (MiB/s)`] = summary(mbps.proxied);

  globalThis.gc?.();
  const before = process.memoryUsage();
  const holder = spawn(
    'nsenter',
    [`--net=${proxied.netnsPath}`, process.execPath, '-e', CLIENT, 'hold', WEB, NAME, String(HOLD)],
    {
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  children.push(holder);
  const held = await new Promise((resolve) =>
    holder.stdout.once('data', (b) => resolve(JSON.parse(b.toString()))),
  );
  if (held.open !== HOLD) throw new Error(`holder: ${JSON.stringify(held)}`);
  globalThis.gc?.();
  const after = process.memoryUsage();
  results['proxy memory per 1,000 open connections'] = {
    openProxied: nm.egressConnections,
    rssMiB: +((after.rss - before.rss) / 2 ** 20).toFixed(1),
    heapMiB: +((after.heapUsed - before.heapUsed) / 2 ** 20).toFixed(1),
    gc: globalThis.gc !== undefined,
  };
  holder.stdin.end('x');
  await nm.release(direct);
  await nm.release(proxied);
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
  for (const [k, v] of Object.entries(results)) {
    const fmt = (x) => (typeof x === 'number' ? x.toFixed(3) : x);
    console.log(
      `${k.padEnd(56)} ${Object.entries(v)
        .map(([a, b]) => `${a}=${fmt(b)}`)
        .join('  ')}`,
    );
  }
}
