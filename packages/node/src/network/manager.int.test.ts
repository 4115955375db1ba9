// Needs root, iproute2, nftables, util-linux. All traffic stays on this machine: between the test
// process, slot namespaces and a fake "internet" namespace with documentation-range addresses.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../util/exec.js';
import { NetworkManager, type NetworkManagerOptions } from './manager.js';
import { mountPointsUnder } from './plumbing.js';
import { DEFAULT_EGRESS_POLICY, parseNetworkPolicy } from './policy.js';
import type { NetworkSlot } from './types.js';

const PID = process.pid;
const WAN_NS = `aenv-test-wan-${PID}`;
const WAN_HOST_IF = `atw${PID % 1_000_000}`;
const HOST_WAN_IP = '198.51.100.1';
const WAN_A = '198.51.100.10';
const WAN_B = '198.51.100.200';
const WAN_DNS = '198.51.100.53';
// Only 198.51.100.0/24 is usable here: 192.0.2.0/24 is this host's own LAN and the package mirror answers
// in 203.0.113.0/24, so the test must never route either. The host link is .0/26; .64/26 and .128/25 are
// "far" upstream ranges the host routes through WAN_A.
const WAN_FAR = '198.51.100.100';
const FAR_CIDR = '198.51.100.64/26';
const HTTP_PORT = 8080;
/** UDP and TCP echo on every upstream host (port 53 echoes only on the resolvers). */
const ECHO_PORT = 9000;
/** Alibaba Cloud's metadata address, one of the built-in denies: played by the fake upstream. */
const BUILTIN_DENIED = '100.100.100.200';
const ENVD_PORT = 49983;
const PREFIX = `aet${PID % 100_000}`;
const CRASH_PREFIX = `aec${PID % 100_000}`;

let scratch = '';
const children: ChildProcess[] = [];

// ---- helpers: processes in namespaces ----

const inSlot = (slot: NetworkSlot) => ['nsenter', `--net=${slot.netnsPath}`];
let wanNetns = '';
const inWan = () => ['nsenter', `--net=${wanNetns}`];

/** Starts a long-running node script in a namespace and waits for it to print "ready". */
async function startServer(prefix: string[], script: string, args: string[] = []): Promise<ChildProcess> {
  const [cmd, ...rest] = [...prefix, process.execPath, '-e', script, ...args] as [string, ...string[]];
  const child = spawn(cmd, rest, { stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      if (out.includes('ready')) resolve();
    });
    child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
    child.on('exit', (code) => reject(new Error(`server exited ${code}: ${err}`)));
  });
  return child;
}

// HTTP: "peer=<remote address>", or at /seen the source addresses of all UDP datagrams received.
// ECHO_PORT on every host and port 53 on the resolvers: echo UDP datagrams and TCP bytes.
const WAN_SERVER = `
const http = require('http'), net = require('net'), dgram = require('dgram');
const [httpHosts, dnsHosts] = JSON.parse(process.argv[1]);
const seen = [];
let pending = httpHosts.length * 3 + dnsHosts.length * 2;
const up = () => { if (--pending === 0) console.log('ready'); };
const echo = (h, port) => {
  const u = dgram.createSocket('udp4');
  u.on('message', (m, r) => { seen.push(r.address); u.send(m, r.port, r.address); });
  u.bind(port, h, up);
  net.createServer((s) => { s.on('error', () => {}); s.pipe(s); }).listen(port, h, up);
};
for (const h of httpHosts) {
  http.createServer((q, r) =>
    r.end(q.url === '/seen' ? JSON.stringify(seen) : 'peer=' + q.socket.remoteAddress)).listen(${HTTP_PORT}, h, up);
  echo(h, ${ECHO_PORT});
}
for (const h of dnsHosts) echo(h, 53);`;

const SLOT_SERVER = `
require('http').createServer((q, r) => r.end('slot-envd')).listen(${ENVD_PORT}, '0.0.0.0', () => console.log('ready'));`;

interface Target {
  kind: 'http' | 'tcp' | 'udp';
  host: string;
  port: number;
  path?: string;
  localAddress?: string;
  localPort?: number;
}
interface ProbeResult {
  ok: boolean;
  body?: string;
  code?: string;
}

// Connects to each target; ok with the reply, or the error code ("TIMEOUT" when nothing came back).
const PROBE = `
const net = require('net'), dgram = require('dgram');
const targets = JSON.parse(process.argv[1]);
const one = (t) => new Promise((resolve) => {
  const done = (r) => { clearTimeout(timer); resolve(r); try { s.destroy ? s.destroy() : s.close(); } catch {} };
  const timer = setTimeout(() => done({ ok: false, code: 'TIMEOUT' }), 3000);
  let s;
  if (t.kind === 'udp') {
    s = dgram.createSocket('udp4');
    s.on('error', (e) => done({ ok: false, code: e.code }));
    s.on('message', (m) => done({ ok: true, body: m.toString() }));
    s.bind({ address: t.localAddress, port: t.localPort }, () => s.connect(t.port, t.host, () => s.send('ping')));
    return;
  }
  s = net.connect({ host: t.host, port: t.port, localAddress: t.localAddress, localPort: t.localPort });
  let body = '';
  s.on('error', (e) => done({ ok: false, code: e.code }));
  s.on('data', (b) => { body += b; if (t.kind === 'tcp') done({ ok: true, body }); });
  s.on('end', () => done({ ok: true, body }));
  s.on('connect', () => s.write(t.kind === 'http' ? 'GET ' + (t.path || '/') + ' HTTP/1.0\\r\\n\\r\\n' : 'ping'));
});
(async () => { const out = []; for (const t of targets) out.push(await one(t)); console.log(JSON.stringify(out)); })();`;

async function probe(prefix: string[], targets: Target[]): Promise<ProbeResult[]> {
  const argv = [...prefix, process.execPath, '-e', PROBE, JSON.stringify(targets)];
  const [cmd, ...rest] = argv as [string, ...string[]];
  const { stdout } = await run(cmd, rest, { timeoutMs: 60_000 });
  return JSON.parse(stdout) as ProbeResult[];
}

const http = (host: string, port = HTTP_PORT): Target => ({ kind: 'http', host, port });

// Holds one TCP connection to each host (ECHO_PORT; port 53 for the last, a resolver); for every line on stdin it
// sends a byte on each and prints a JSON array: "ok" when it came back, else the error ("TIMEOUT" after 3 s).
const CONNECTION_HOLDER = `
const net = require('net');
const hosts = JSON.parse(process.argv[1]);
const socks = hosts.map((h, i) => {
  const s = net.connect({ host: h, port: i === hosts.length - 1 ? 53 : ${ECHO_PORT} });
  s.state = 'connecting';
  s.on('connect', () => { s.state = 'ok'; if (socks.every((x) => x.state === 'ok')) console.log('ready'); });
  s.on('error', (e) => { s.state = e.code; });
  s.on('close', () => { if (s.state === 'ok') s.state = 'CLOSED'; });
  return s;
});
const one = (s) => new Promise((resolve) => {
  if (s.state !== 'ok') return resolve(s.state);
  const timer = setTimeout(() => resolve('TIMEOUT'), 3000);
  s.once('data', () => { clearTimeout(timer); resolve('ok'); });
  s.once('error', (e) => { clearTimeout(timer); resolve(e.code); });
  s.write('x');
});
require('readline').createInterface({ input: process.stdin }).on('line', async () => {
  console.log(JSON.stringify(await Promise.all(socks.map(one))));
});`;

/** One exchange on every connection of a CONNECTION_HOLDER. */
async function ask(holder: ChildProcess): Promise<string[]> {
  return new Promise((resolve) => {
    let out = '';
    const onData = (b: Buffer) => {
      out += b.toString();
      const line = out.split('\n').find((l) => l.startsWith('['));
      if (line) {
        holder.stdout!.off('data', onData);
        resolve(JSON.parse(line) as string[]);
      }
    };
    holder.stdout!.on('data', onData);
    holder.stdin!.write('go\n');
  });
}
const refused = { ok: false, code: 'ECONNREFUSED' };
const dropped = { ok: false, code: 'TIMEOUT' };
/** A refused UDP datagram (ICMP admin-prohibited). */
const unreachable = { ok: false, code: 'EHOSTUNREACH' };

/** Polls `check` (bounded) until it returns true. */
async function eventually(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A TCP port p with p+1 also free on every address (the egress proxy takes listen_port and the next one). */
async function freePortPair(): Promise<number> {
  const { createServer } = await import('node:net');
  const tryListen = (port: number) =>
    new Promise<number | null>((resolve) => {
      const srv = createServer();
      srv.once('error', () => resolve(null));
      srv.listen(port, '0.0.0.0', () => {
        const got = (srv.address() as { port: number }).port;
        srv.close(() => resolve(got));
      });
    });
  for (let i = 0; i < 20; i++) {
    const p = await tryListen(0);
    if (p !== null && p < 65534 && (await tryListen(p + 1)) !== null) return p;
  }
  throw new Error('no free port pair');
}

// ---- helpers: what exists on the host ----

async function hostLeftovers(prefix: string, runtimePath: string) {
  const links = JSON.parse((await run('ip', ['-j', 'link', 'show'])).stdout) as { ifname: string }[];
  const netnsDir = join(runtimePath, 'netns');
  const files = await readdir(netnsDir).catch(() => [] as string[]);
  const mounts = (await mountPointsUnder(netnsDir)).filter((m) => m !== netnsDir);
  const table = await run('nft', ['-j', 'list', 'table', 'inet', prefix], { allowFailure: true });
  const nft =
    table.code === 0 ? (JSON.parse(table.stdout) as { nftables: Record<string, unknown>[] }).nftables : [];
  const chains = nft.flatMap((o) => (o['chain'] ? [(o['chain'] as { name: string }).name] : []));
  const elements = nft.flatMap(
    (o) => ((o['map'] as { elem?: unknown[] } | undefined)?.elem ?? []) as unknown[],
  );
  const routes = (await run('ip', ['route', 'show'])).stdout
    .split('\n')
    .filter((l) => l.includes(`${prefix}-v`));
  return {
    links: links.map((l) => l.ifname).filter((n) => n.startsWith(`${prefix}-`)),
    files: files.filter((f) => f.startsWith(`${prefix}-`)),
    mounts,
    slotChains: chains.filter((c) => c.startsWith('slot')),
    elements,
    routes,
  };
}

const NOTHING = { links: [], files: [], mounts: [], slotChains: [], elements: [], routes: [] };

function options(overrides: Partial<NetworkManagerOptions>): NetworkManagerOptions {
  return {
    runtimePath: join(scratch, 'run'),
    namePrefix: PREFIX,
    internal: { hostInteractionCidr: '10.211.0.0/24', vethCidr: '10.212.0.0/24' },
    // 198.51.100.48/28 holds the fake resolver: DNS must still pass, other ports must not.
    // No 10.0.0.0/8 here, so only the internal-CIDR rule keeps sandboxes apart.
    egress: { alwaysDeniedCidrs: [FAR_CIDR, '198.51.100.48/28'] },
    pool: { lowWatermark: 2, highWatermark: 8, maintenanceEnabled: true, startupPrewarm: true },
    controlPlanePort: ENVD_PORT,
    resolvConfPaths: [join(scratch, 'missing.conf'), join(scratch, 'resolv.conf')],
    ...overrides,
  };
}

// ---- fixture: the fake internet ----

const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';
let ipForwardBefore = '';

beforeAll(async () => {
  ipForwardBefore = await readFile(IP_FORWARD, 'utf8');
  scratch = await mkdtemp(join(tmpdir(), 'aenv-net-int-'));
  await writeFile(join(scratch, 'resolv.conf'), `# test\nnameserver 127.0.0.53\nnameserver ${WAN_DNS}\n`);
  // A file-bound netns like the slots' (not `ip netns add`, which leaves a /run/netns mount behind).
  wanNetns = join(scratch, WAN_NS);
  await writeFile(wanNetns, '');
  await run('unshare', [`--net=${wanNetns}`, 'true']);
  const host = [
    `link add ${WAN_HOST_IF} type veth peer name wan0 netns ${wanNetns}`,
    `addr add ${HOST_WAN_IP}/26 dev ${WAN_HOST_IF}`,
    `link set ${WAN_HOST_IF} up`,
  ];
  await run('ip', ['-batch', '-'], { input: host.join('\n') + '\n' });
  const wan = [
    ...[WAN_A, WAN_B, WAN_DNS].map((a) => `addr add ${a}/24 dev wan0`),
    `addr add ${WAN_FAR}/24 dev wan0`,
    `addr add ${BUILTIN_DENIED}/32 dev wan0`,
    'link set wan0 up',
    'link set lo up',
    // Lets the ingress test play a LAN host that routes sandbox addresses through this machine.
    `route add 10.211.0.0/16 via ${HOST_WAN_IP}`,
  ];
  await run('nsenter', [`--net=${wanNetns}`, 'ip', '-batch', '-'], { input: wan.join('\n') + '\n' });
  await run('ip', ['route', 'add', FAR_CIDR, 'via', WAN_A, 'dev', WAN_HOST_IF]);
  await run('ip', ['route', 'add', '198.51.100.128/25', 'via', WAN_A, 'dev', WAN_HOST_IF]);
  // Goes with WAN_HOST_IF when the test ends.
  await run('ip', ['route', 'add', `${BUILTIN_DENIED}/32`, 'via', WAN_A, 'dev', WAN_HOST_IF]);
  await startServer(inWan(), WAN_SERVER, [
    JSON.stringify([
      [WAN_A, WAN_B, WAN_DNS, WAN_FAR, BUILTIN_DENIED],
      [WAN_DNS, WAN_A],
    ]),
  ]);
});

afterAll(async () => {
  for (const c of children) {
    if (c.pid && c.exitCode === null && c.signalCode === null) process.kill(c.pid, 'SIGKILL');
  }
  await run('ip', ['link', 'del', WAN_HOST_IF], { allowFailure: true });
  if (wanNetns) await run('umount', [wanNetns], { allowFailure: true });
  for (const prefix of [PREFIX, CRASH_PREFIX]) {
    // Last resort if a test failed half-way: a throwaway manager sweeps the prefix.
    for (const runtime of ['run', 'crash-run']) {
      const m = new NetworkManager(
        options({
          namePrefix: prefix,
          runtimePath: join(scratch, runtime),
          pool: { lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false },
        }),
      );
      await m.init().then(
        () => m.shutdown({ destroyAll: true }),
        () => undefined,
      );
    }
  }
  if (scratch) await rm(scratch, { recursive: true, force: true });
  // The manager turns forwarding on for good; the test puts back what it found.
  if (ipForwardBefore) await writeFile(IP_FORWARD, ipForwardBefore);
});

// ---- the tests ----

describe('network slots against a fake upstream namespace', () => {
  let nm: NetworkManager;
  let a: NetworkSlot;
  let b: NetworkSlot;

  beforeAll(async () => {
    nm = new NetworkManager(options({}));
    const report = await nm.init();
    expect(report.adopted).toEqual([]);
    a = await nm.acquire();
    b = await nm.acquire();
    // Before any policy, a slot is denied everything (here: before its "sandbox" ran anything).
    expect(await probe(inSlot(a), [http(WAN_A), { kind: 'udp', host: WAN_DNS, port: 53 }])).toEqual([
      refused,
      unreachable,
    ]);
    await Promise.all([nm.applyPolicy(a, DEFAULT_EGRESS_POLICY), nm.applyPolicy(b, DEFAULT_EGRESS_POLICY)]);
    await startServer(inSlot(a), SLOT_SERVER);
    await startServer(inSlot(b), SLOT_SERVER);
  });

  afterAll(async () => {
    await nm?.shutdown({ destroyAll: true });
  });

  it('prewarms the pool and grows the refill target geometrically as acquisitions drain it', async () => {
    // Two acquisitions left 0 < low=2 ready: target doubled 2 → 4, then 8 (capped at high).
    await eventually(() => nm.stats().ready >= 4, 'pool refill');
    expect(nm.stats().target).toBeGreaterThanOrEqual(4);
    expect(nm.stats().target).toBeLessThanOrEqual(8);
    expect(nm.stats().inUse).toBe(2);
  });

  it('gives each slot its addresses, routes and DNS server, and no IPv6', async () => {
    expect(a.dnsServer).toBe(WAN_DNS);
    expect(a.envdUrl).toBe(`http://${a.hostInteractionIp}:${ENVD_PORT}`);
    expect(new Set([a.hostInteractionIp, b.hostInteractionIp]).size).toBe(2);
    const addrs = (await run('nsenter', [`--net=${a.netnsPath}`, 'ip', '-o', 'addr'])).stdout;
    expect(addrs).toContain(`${a.sandboxLinkIp}/31`);
    expect(addrs).toContain(`${a.hostInteractionIp}/32`);
    expect(addrs).not.toMatch(/eth0\s+inet6/);
    const route = (await run('nsenter', [`--net=${a.netnsPath}`, 'ip', 'route', 'show', 'default'])).stdout;
    expect(route).toContain(`via ${a.hostLinkIp}`);
  });

  it('lets the server reach a listener in the slot through hostInteractionIp', async () => {
    const res = await fetch(`${a.envdUrl}/`);
    expect(await res.text()).toBe('slot-envd');
    expect(await (await fetch(`${b.envdUrl}/`)).text()).toBe('slot-envd');
  });

  it('reaches services bound to the sandbox loopback through hostInteractionIp', async () => {
    await startServer(
      inSlot(a),
      `require('http').createServer((q, r) => r.end('loopback-only')).listen(3000, '127.0.0.1', () => console.log('ready'));`,
    );
    expect(await (await fetch(`http://${a.hostInteractionIp}:3000/`)).text()).toBe('loopback-only');
    // ...and only from outside: the other slot still cannot reach it.
    const [fromB] = await probe(inSlot(b), [{ kind: 'http', host: a.hostInteractionIp, port: 3000 }]);
    expect(fromB?.ok).toBe(false);
  });

  it('allows egress by default and masquerades it behind the host address', async () => {
    const [r1, r2] = await probe(inSlot(a), [http(WAN_A), http(WAN_B)]);
    expect(r1).toMatchObject({ ok: true });
    expect(r1?.body).toContain(`peer=${HOST_WAN_IP}`);
    expect(r2?.ok).toBe(true);
  });

  it('rejects denyOut CIDRs at once and reopens them when the policy is removed', async () => {
    await nm.applyPolicy(a, parseNetworkPolicy({ denyOut: [WAN_B] }));
    expect(await probe(inSlot(a), [http(WAN_A), http(WAN_B)])).toEqual([
      expect.objectContaining({ ok: true }),
      refused,
    ]);
    // The other slot is unaffected.
    expect((await probe(inSlot(b), [http(WAN_B)]))[0]?.ok).toBe(true);
    await nm.applyPolicy(a, DEFAULT_EGRESS_POLICY);
    expect((await probe(inSlot(a), [http(WAN_B)]))[0]?.ok).toBe(true);
  });

  it('treats allowOut as an allowlist only with allow_internet_access=false', async () => {
    await nm.applyPolicy(a, parseNetworkPolicy({ allowOut: [WAN_A] }));
    expect((await probe(inSlot(a), [http(WAN_B)]))[0]?.ok).toBe(true);
    await nm.applyPolicy(a, parseNetworkPolicy({ allowOut: [WAN_A], allowInternetAccess: false }));
    expect(await probe(inSlot(a), [http(WAN_A), http(WAN_B)])).toEqual([
      expect.objectContaining({ ok: true }),
      refused,
    ]);
  });

  it('keeps always_denied_cidrs closed even when allowOut names them', async () => {
    // Reachable from the host itself, so the path works and only the policy stops the sandbox.
    expect((await probe([], [http(WAN_FAR)]))[0]?.ok).toBe(true);
    await nm.applyPolicy(a, parseNetworkPolicy({ allowOut: [FAR_CIDR, WAN_FAR] }));
    expect(await probe(inSlot(a), [http(WAN_FAR)])).toEqual([refused]);
  });

  it('passes DNS to the slot nameserver only, and only when the policy allows it', async () => {
    const dnsProbes: Target[] = [
      { kind: 'udp', host: WAN_DNS, port: 53 },
      { kind: 'tcp', host: WAN_DNS, port: 53 },
      http(WAN_DNS),
      { kind: 'udp', host: WAN_A, port: 53 },
      { kind: 'tcp', host: WAN_A, port: 53 },
    ];
    const pinged = { ok: true, body: 'ping' };
    // Internet on: the resolver (in an always-denied range) on port 53 only, no other resolver.
    await nm.applyPolicy(a, DEFAULT_EGRESS_POLICY);
    expect(await probe(inSlot(a), dnsProbes)).toEqual([pinged, pinged, refused, unreachable, refused]);
    // Internet off: no DNS at all, it would be a tunnel out.
    await nm.applyPolicy(a, parseNetworkPolicy({ allowInternetAccess: false }));
    expect(await probe(inSlot(a), dnsProbes)).toEqual([unreachable, refused, refused, unreachable, refused]);
    // ...unless allowOut names the resolver; allowOut naming a host opens its port 53 too.
    await nm.applyPolicy(a, parseNetworkPolicy({ allowInternetAccess: false, allowOut: [WAN_DNS, WAN_A] }));
    expect(await probe(inSlot(a), dnsProbes)).toEqual([pinged, pinged, refused, pinged, pinged]);
    // denyOut naming the resolver takes DNS away with internet on.
    await nm.applyPolicy(a, parseNetworkPolicy({ denyOut: [WAN_DNS] }));
    expect(await probe(inSlot(a), dnsProbes.slice(0, 2))).toEqual([unreachable, refused]);
    await nm.applyPolicy(a, DEFAULT_EGRESS_POLICY);
  });

  it('keeps the built-in denies closed though always_denied_cidrs leaves them out, even for allowOut', async () => {
    expect((await probe([], [http(BUILTIN_DENIED)]))[0]?.ok).toBe(true);
    expect(await probe(inSlot(a), [http(BUILTIN_DENIED)])).toEqual([refused]);
    await nm.applyPolicy(a, parseNetworkPolicy({ allowOut: [BUILTIN_DENIED] }));
    expect(await probe(inSlot(a), [http(BUILTIN_DENIED)])).toEqual([refused]);
    await nm.applyPolicy(a, DEFAULT_EGRESS_POLICY);
  });

  it('cuts the open connections a stricter policy denies, and only those', async () => {
    const holder = await startServer(inSlot(a), CONNECTION_HOLDER, [JSON.stringify([WAN_A, WAN_B, WAN_DNS])]);
    try {
      const exchange = () => ask(holder);
      expect(await exchange()).toEqual(['ok', 'ok', 'ok']);
      await nm.applyPolicy(a, parseNetworkPolicy({ denyOut: [WAN_B] }));
      const [toA, toB, toResolver] = await exchange();
      expect(toA).toBe('ok');
      expect(toB).not.toBe('ok');
      expect(toResolver).toBe('ok');
      // Internet off: the DNS connection goes too.
      await nm.applyPolicy(a, parseNetworkPolicy({ allowInternetAccess: false, allowOut: [WAN_A] }));
      const [stillA, , dns] = await exchange();
      expect(stillA).toBe('ok');
      expect(dns).not.toBe('ok');
    } finally {
      holder.kill('SIGKILL');
      await nm.applyPolicy(a, DEFAULT_EGRESS_POLICY);
    }
  });

  it('blocks a sandbox from other sandboxes', async () => {
    const results = await probe(inSlot(a), [
      http(b.hostInteractionIp, ENVD_PORT),
      http(b.sandboxLinkIp, ENVD_PORT),
      http(b.hostLinkIp, ENVD_PORT),
    ]);
    expect(results).toEqual([refused, refused, refused]);
  });

  it('blocks a sandbox from services on the host', async () => {
    const hostServer = `
      const http = require('http'); const hosts = JSON.parse(process.argv[1]); let n = hosts.length;
      for (const h of hosts) http.createServer((q, r) => r.end('host')).listen(18080, h, () => { if (--n === 0) console.log('ready'); });`;
    await startServer([], hostServer, [JSON.stringify([HOST_WAN_IP, a.hostLinkIp])]);
    // Positive controls: the same listeners answer the fake WAN and the host itself.
    expect((await probe(inWan(), [http(HOST_WAN_IP, 18080)]))[0]?.ok).toBe(true);
    expect((await probe([], [http(a.hostLinkIp, 18080)]))[0]?.ok).toBe(true);
    expect(await probe(inSlot(a), [http(HOST_WAN_IP, 18080), http(a.hostLinkIp, 18080)])).toEqual([
      refused,
      refused,
    ]);
  });

  it('drops connections routed in from outside toward a sandbox', async () => {
    const [fromWan] = await probe(inWan(), [http(a.hostInteractionIp, ENVD_PORT)]);
    expect(fromWan).toEqual({ ok: false, code: 'TIMEOUT' });
  });

  it('drops packets whose source address the slot does not own', async () => {
    // Root in the sandbox could do this with a raw socket; an extra local address is the same on the wire.
    await run('nsenter', [`--net=${a.netnsPath}`, 'ip', 'addr', 'add', '198.51.100.77/32', 'dev', 'lo']);
    try {
      const [spoofed, honest] = await probe(inSlot(a), [
        { kind: 'udp', host: WAN_A, port: ECHO_PORT, localAddress: '198.51.100.77' },
        { kind: 'udp', host: WAN_A, port: ECHO_PORT },
      ]);
      expect(spoofed).toEqual({ ok: false, code: 'TIMEOUT' });
      expect(honest).toEqual({ ok: true, body: 'ping' });
      const [seen] = await probe([], [{ ...http(WAN_A), path: '/seen' }]);
      const sources = JSON.parse((seen?.body ?? '').split('\r\n\r\n')[1] ?? '[]') as string[];
      expect(sources).toContain(HOST_WAN_IP);
      expect(sources).not.toContain('198.51.100.77');
    } finally {
      await run('nsenter', [`--net=${a.netnsPath}`, 'ip', 'addr', 'del', '198.51.100.77/32', 'dev', 'lo']);
    }
  });

  it('release removes the netns, veth, route, nft rules and conntrack entries of the slot', async () => {
    const c = await nm.acquire();
    await nm.applyPolicy(c, parseNetworkPolicy({ denyOut: [WAN_B] }));
    expect((await probe(inSlot(c), [http(WAN_A)]))[0]?.ok).toBe(true);
    const tracked = async () =>
      (await run('conntrack', ['-L', '-s', c.sandboxLinkIp])).stdout.split('\n').filter(Boolean);
    expect(await tracked()).not.toEqual([]);
    let now = await hostLeftovers(PREFIX, join(scratch, 'run'));
    expect(now.links).toContain(c.hostIfName);
    expect(now.slotChains).toContain(`slot${c.index}`);
    await nm.release(c);
    now = await hostLeftovers(PREFIX, join(scratch, 'run'));
    expect(now.links).not.toContain(c.hostIfName);
    expect(now.files).not.toContain(`${PREFIX}-ns-${c.index}`);
    expect(now.mounts).not.toContain(c.netnsPath);
    expect(now.slotChains).not.toContain(`slot${c.index}`);
    expect(now.routes.join('\n')).not.toContain(c.hostInteractionIp);
    // The address may be handed out again: no flow of this sandbox may be waiting for it.
    expect(await tracked()).toEqual([]);
    await expect(nm.applyPolicy(c, DEFAULT_EGRESS_POLICY)).rejects.toThrow(/not in use/);
    await expect(nm.release(c)).rejects.toThrow(/not in use/);
  });

  it('shutdown without destroyAll keeps slots in use and removes the pool', async () => {
    // Checked on a second manager so the fixture above stays intact.
    const m = new NetworkManager(
      options({
        namePrefix: CRASH_PREFIX,
        runtimePath: join(scratch, 'crash-run'),
        internal: { hostInteractionCidr: '10.213.0.0/24', vethCidr: '10.214.0.0/24' },
      }),
    );
    await m.init();
    const kept = await m.acquire();
    await eventually(() => m.stats().ready >= 2, 'pool refill');
    await m.shutdown();
    const now = await hostLeftovers(CRASH_PREFIX, join(scratch, 'crash-run'));
    expect(now.links).toEqual([kept.hostIfName]);
    expect(now.files).toEqual([`${CRASH_PREFIX}-ns-${kept.index}`]);
    const sweeper = new NetworkManager(
      options({
        namePrefix: CRASH_PREFIX,
        runtimePath: join(scratch, 'crash-run'),
        internal: { hostInteractionCidr: '10.213.0.0/24', vethCidr: '10.214.0.0/24' },
        pool: { lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false },
      }),
    );
    await sweeper.init();
    await sweeper.shutdown({ destroyAll: true });
    expect(await hostLeftovers(CRASH_PREFIX, join(scratch, 'crash-run'))).toEqual(NOTHING);
  });
});

describe('the egress proxy ports on the host', () => {
  it('are closed to other hosts while the node runs, and swallow no loopback or outgoing traffic once it stops', async () => {
    const proxyPort = await freePortPair();
    const dnsPort = await freePortPair();
    const egressOptions = (domainEgress: NetworkManagerOptions['domainEgress']) =>
      options({
        namePrefix: `aeg${PID % 100_000}`,
        runtimePath: join(scratch, 'egress-run'),
        internal: { hostInteractionCidr: '10.215.0.0/24', vethCidr: '10.216.0.0/24' },
        pool: { lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false },
        domainEgress,
      });
    const m = new NetworkManager(
      egressOptions({
        proxyPorts: [80, 443],
        proxyListenPort: proxyPort,
        dnsListenPort: dnsPort,
        resolvers: [],
      }),
    );
    let echo: ChildProcess | undefined;
    try {
      await m.init();
      // The proxy listens on every address; from another host its ports are dropped, as is the resolver's.
      expect(
        await probe(inWan(), [
          { kind: 'tcp', host: HOST_WAN_IP, port: proxyPort },
          { kind: 'tcp', host: HOST_WAN_IP, port: proxyPort + 1 },
          { kind: 'udp', host: HOST_WAN_IP, port: dnsPort },
        ]),
      ).toEqual([dropped, dropped, dropped]);
      // A stop with a sandbox's slot in use keeps the table (sandboxes outlive the node) and frees the ports: the
      // kernel may now give them to any listener, or as the source port of an outgoing connection. Neither may be
      // swallowed.
      await m.acquire();
      await m.shutdown();
      expect((await hostLeftovers(`aeg${PID % 100_000}`, join(scratch, 'egress-run'))).links).toHaveLength(1);
      echo = await startServer(
        [],
        `require('net').createServer((s) => s.pipe(s)).listen(${proxyPort}, '127.0.0.1', () => console.log('ready'));`,
      );
      expect(
        await probe(
          [],
          [
            { kind: 'tcp', host: '127.0.0.1', port: proxyPort },
            { kind: 'tcp', host: WAN_A, port: ECHO_PORT, localPort: proxyPort + 1 },
            { kind: 'udp', host: WAN_A, port: ECHO_PORT, localPort: dnsPort },
          ],
        ),
      ).toEqual([
        { ok: true, body: 'ping' },
        { ok: true, body: 'ping' },
        { ok: true, body: 'ping' },
      ]);
    } finally {
      echo?.kill();
      await m.shutdown();
      const sweeper = new NetworkManager(egressOptions(undefined));
      await sweeper.init();
      await sweeper.shutdown({ destroyAll: true });
    }
  });
});

describe('a stop with no slot in use', () => {
  it('leaves no nft table, netns file or netns directory mount behind', async () => {
    const prefix = `aen${PID % 100_000}`;
    const runtimePath = join(scratch, 'empty-run');
    const m = new NetworkManager(
      options({
        namePrefix: prefix,
        runtimePath,
        internal: { hostInteractionCidr: '10.217.0.0/24', vethCidr: '10.218.0.0/24' },
        pool: { lowWatermark: 2, highWatermark: 2, maintenanceEnabled: true, startupPrewarm: true },
      }),
    );
    await m.init();
    const slot = await m.acquire();
    await m.release(slot);
    await m.shutdown();
    expect((await run('nft', ['list', 'table', 'inet', prefix], { allowFailure: true })).code).not.toBe(0);
    expect(await hostLeftovers(prefix, runtimePath)).toEqual(NOTHING);
    expect(await mountPointsUnder(join(runtimePath, 'netns'))).toEqual([]);
  });
});

describe('a stale host route to a slot address', () => {
  it('does not stop the slot from being made: its route replaces the stale one', async () => {
    // What a torn-down slot's veth leaves while the kernel has not unregistered it yet (its netns is freed in
    // the background), or a crashed node's slot on the same addresses: a /32 route to the address, elsewhere.
    const prefix = `aes${PID % 100_000}`;
    const dummy = `${prefix}-stale`;
    const m = new NetworkManager(
      options({
        namePrefix: prefix,
        runtimePath: join(scratch, 'stale-run'),
        internal: { hostInteractionCidr: '10.219.0.0/24', vethCidr: '10.220.0.0/24' },
        pool: { lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false },
      }),
    );
    await run('ip', ['link', 'add', dummy, 'type', 'veth', 'peer', 'name', `${prefix}-stalp`]);
    try {
      await run('ip', ['link', 'set', dummy, 'up']);
      const stale = Array.from({ length: 256 }, (_, i) => `route add 10.219.0.${i}/32 dev ${dummy}`);
      await run('ip', ['-batch', '-'], { input: stale.join('\n') + '\n' });
      await m.init();
      const slot = await m.acquire();
      const route = await run('ip', ['-j', 'route', 'show', `${slot.hostInteractionIp}/32`]);
      expect((JSON.parse(route.stdout) as { dev: string }[]).map((r) => r.dev)).toEqual([slot.hostIfName]);
      await m.release(slot);
    } finally {
      await m.shutdown({ destroyAll: true }).catch(() => undefined);
      await run('ip', ['link', 'del', dummy], { allowFailure: true });
    }
  });
});

describe('crash recovery', () => {
  const runtimePath = () => join(scratch, 'crash-run');
  const crashOptions = (pool: Partial<NetworkManagerOptions['pool']> = {}) =>
    options({
      namePrefix: CRASH_PREFIX,
      runtimePath: runtimePath(),
      internal: { hostInteractionCidr: '10.213.0.0/24', vethCidr: '10.214.0.0/24' },
      pool: { lowWatermark: 2, highWatermark: 4, maintenanceEnabled: true, startupPrewarm: true, ...pool },
    });
  const quiet = { lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false };

  it('a new manager removes everything a dropped one left, including half-made slots', async () => {
    // No background refill: nothing may run on behalf of the dropped manager once it is abandoned.
    const dropped = new NetworkManager(crashOptions({ lowWatermark: 3, maintenanceEnabled: false }));
    await dropped.init();
    const s1 = await dropped.acquire();
    const s2 = await dropped.acquire();
    await dropped.applyPolicy(s1, parseNetworkPolicy({ allowInternetAccess: false }));
    await dropped.applyPolicy(s2, parseNetworkPolicy({ denyOut: [WAN_B] }));
    // Half-made leftovers a crash mid-create or mid-release could leave.
    const dir = join(runtimePath(), 'netns');
    await writeFile(join(dir, `${CRASH_PREFIX}-ns-77`), '');
    await writeFile(join(dir, `${CRASH_PREFIX}-ns-78`), '');
    await run('unshare', [`--net=${join(dir, `${CRASH_PREFIX}-ns-78`)}`, 'true']);
    await run('ip', [
      'link',
      'add',
      `${CRASH_PREFIX}-v79`,
      'type',
      'veth',
      'peer',
      'name',
      `${CRASH_PREFIX}x79`,
    ]);
    const t = `inet ${CRASH_PREFIX}`;
    await run('nft', ['-f', '-'], {
      input: [
        `add chain ${t} slot80`,
        `add element ${t} egress { "${CRASH_PREFIX}-v80" : jump slot80 }`,
        `add chain ${t} stray`,
        // As if an older version had hooked forward at another priority.
        `delete chain ${t} forward`,
        `add chain ${t} forward { type filter hook forward priority 5 ; policy accept ; }`,
        '',
      ].join('\n'),
    });
    const before = await hostLeftovers(CRASH_PREFIX, runtimePath());
    expect(before.links.length).toBeGreaterThanOrEqual(4);
    expect(before.slotChains).toEqual(
      expect.arrayContaining([`slot${s1.index}`, `slot${s2.index}`, 'slot80']),
    );
    expect(dropped.stats().ready).toBe(1);
    // `dropped` is abandoned here without shutdown, as after a crash.

    const fresh = new NetworkManager(crashOptions(quiet));
    const report = await fresh.init([]);
    expect(report.failed).toEqual([]);
    expect(report.removed.slots).toEqual(expect.arrayContaining([s1.index, s2.index, 77, 78, 79]));
    expect(await hostLeftovers(CRASH_PREFIX, runtimePath())).toEqual(NOTHING);
    const chains = (await run('nft', ['list', 'table', 'inet', CRASH_PREFIX])).stdout;
    expect(chains).not.toContain('stray');
    expect(chains).toContain('type filter hook forward priority filter - 10');
    await fresh.shutdown({ destroyAll: true });
    expect(await run('nft', ['list', 'table', 'inet', CRASH_PREFIX], { allowFailure: true })).toMatchObject({
      code: 1,
    });
    expect(await mountPointsUnder(runtimePath())).toEqual([]);
  });

  it('keeps and re-attaches a slot whose sandbox survived, with its policy still enforced', async () => {
    const first = new NetworkManager(crashOptions({ maintenanceEnabled: false }));
    await first.init();
    const survivor = await first.acquire();
    const other = await first.acquire();
    await first.applyPolicy(survivor, parseNetworkPolicy({ allowOut: [WAN_A], allowInternetAccess: false }));
    const envd = await startServer(inSlot(survivor), SLOT_SERVER);

    const second = new NetworkManager(crashOptions(quiet));
    const report = await second.init([survivor.index, 99]);
    expect(report.adopted.map((s) => s.index)).toEqual([survivor.index]);
    expect(report.missing).toEqual([99]);
    expect(report.removed.slots).toContain(other.index);
    const again = second.attach(survivor.index);
    expect(again).toEqual(survivor);
    expect(await (await fetch(`${again.envdUrl}/`)).text()).toBe('slot-envd');
    expect(await probe(inSlot(again), [http(WAN_A), http(WAN_B)])).toEqual([
      expect.objectContaining({ ok: true }),
      refused,
    ]);
    // The adopted slot's policy is replaceable and its teardown complete.
    await second.applyPolicy(again, DEFAULT_EGRESS_POLICY);
    expect((await probe(inSlot(again), [http(WAN_B)]))[0]?.ok).toBe(true);
    const envdExit = new Promise((r) => envd.once('exit', r));
    process.kill(envd.pid!, 'SIGKILL');
    await envdExit;
    await second.release(again);
    expect(() => second.attach(survivor.index)).toThrow(/not attached/);
    await second.shutdown({ destroyAll: true });
    expect(await hostLeftovers(CRASH_PREFIX, runtimePath())).toEqual(NOTHING);
  });

  it('with pool.network disabled keeps no warm slots and tolerates low > high', async () => {
    const m = new NetworkManager(
      crashOptions({ enabled: false, lowWatermark: 5, highWatermark: 2, maintenanceEnabled: false }),
    );
    await m.init();
    expect(m.stats()).toMatchObject({ ready: 0, target: 0 });
    const s = await m.acquire();
    expect(m.stats()).toMatchObject({ ready: 0, inUse: 1 });
    expect((await hostLeftovers(CRASH_PREFIX, runtimePath())).links).toEqual([s.hostIfName]);
    await m.release(s);
    await m.shutdown({ destroyAll: true });
    expect(await hostLeftovers(CRASH_PREFIX, runtimePath())).toEqual(NOTHING);
  });

  it('resolves a symlinked runtime_path and does not stack netns directory mounts across restarts', async () => {
    const link = join(scratch, 'crash-run-link');
    await mkdir(runtimePath(), { recursive: true });
    await symlink(runtimePath(), link);
    try {
      for (let restart = 0; restart < 2; restart++) {
        const m = new NetworkManager({ ...crashOptions(quiet), runtimePath: link });
        await m.init();
        const s = await m.acquire();
        expect(s.netnsPath).toBe(
          join(await realpath(runtimePath()), 'netns', `${CRASH_PREFIX}-ns-${s.index}`),
        );
        await m.shutdown();
      }
      const dir = join(await realpath(runtimePath()), 'netns');
      expect((await mountPointsUnder(dir)).filter((p) => p === dir)).toHaveLength(1);
      const sweeper = new NetworkManager({ ...crashOptions(quiet), runtimePath: link });
      await sweeper.init();
      await sweeper.shutdown({ destroyAll: true });
      expect(await mountPointsUnder(dir)).toEqual([]);
    } finally {
      await rm(link, { force: true });
    }
    expect(await hostLeftovers(CRASH_PREFIX, runtimePath())).toEqual(NOTHING);
  });

  it('a slot whose teardown failed is retried: by releaseIndex at once, else in the background', async () => {
    let failRemovals = false;
    const m = new NetworkManager({
      ...crashOptions(quiet),
      leakRetryMs: 200,
      nftRunner: async (script) => {
        if (failRemovals && script.includes('delete chain')) throw new Error('injected nft failure');
        await run('nft', ['-f', '-'], { input: script, timeoutMs: 30_000 });
      },
    });
    await m.init();
    const [s1, s2] = [await m.acquire(), await m.acquire()];
    for (const s of [s1, s2]) await m.applyPolicy(s, parseNetworkPolicy({ denyOut: [WAN_B] }));

    failRemovals = true;
    await expect(m.release(s1)).rejects.toThrow(/injected nft failure/);
    expect(() => m.attach(s1.index)).toThrow(/not attached/);
    expect(m.stats()).toMatchObject({ inUse: 1, leaked: 1 });
    expect((await hostLeftovers(CRASH_PREFIX, runtimePath())).slotChains).toContain(`slot${s1.index}`);
    failRemovals = false;
    await m.releaseIndex(s1.index);
    await m.releaseIndex(s1.index); // gone: nothing to do
    const left = await hostLeftovers(CRASH_PREFIX, runtimePath());
    expect(left.slotChains).toEqual([`slot${s2.index}`]);
    expect(left.links).toEqual([s2.hostIfName]);

    failRemovals = true;
    await expect(m.release(s2)).rejects.toThrow(/injected nft failure/);
    expect((await hostLeftovers(CRASH_PREFIX, runtimePath())).slotChains).toEqual([`slot${s2.index}`]);
    failRemovals = false;
    // The retry counts the slot released only after its teardown's last step (its conntrack entries), so wait
    // for both: the host objects gone and the count back to zero.
    await eventually(
      async () =>
        (await hostLeftovers(CRASH_PREFIX, runtimePath())).slotChains.length === 0 && m.stats().leaked === 0,
      'background retry of the leaked slot',
    );
    expect(await hostLeftovers(CRASH_PREFIX, runtimePath())).toEqual(NOTHING);
    expect(m.stats()).toMatchObject({ inUse: 0, leaked: 0 });
    await m.shutdown({ destroyAll: true });
  });

  it('cleans up after a server process killed with SIGKILL', async () => {
    const moduleUrl = new URL('./manager.ts', import.meta.url).href;
    const script = join(scratch, 'crashing-server.mts');
    await writeFile(
      script,
      `import { NetworkManager } from ${JSON.stringify(moduleUrl)};
       const m = new NetworkManager(JSON.parse(process.argv[2]));
       await m.init();
       const s = await m.acquire();
       await m.applyPolicy(s, { allowOut: [], denyOut: ['${WAN_B}/32'], allowInternetAccess: null });
       while (m.stats().ready < 2) await new Promise((r) => setTimeout(r, 20));
       console.log('ready');
       setInterval(() => {}, 1000);`,
    );
    const tsx = fileURLToPath(import.meta.resolve('tsx'));
    const crashing = spawn(process.execPath, ['--import', tsx, script, JSON.stringify(crashOptions())], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(crashing);
    await new Promise<void>((resolve, reject) => {
      let err = '';
      crashing.stdout!.on('data', (b: Buffer) => b.toString().includes('ready') && resolve());
      crashing.stderr!.on('data', (b: Buffer) => (err += b.toString()));
      crashing.on('exit', (code) => reject(new Error(`crashing server exited ${code}: ${err}`)));
    });
    const exited = new Promise((r) => crashing.once('exit', r));
    process.kill(crashing.pid!, 'SIGKILL');
    await exited;
    const before = await hostLeftovers(CRASH_PREFIX, runtimePath());
    // One acquired slot with a policy, two ready ones, maybe a third being created at the kill.
    expect(before.links.length).toBeGreaterThanOrEqual(3);
    expect(before.slotChains.length).toBe(1);

    const fresh = new NetworkManager(crashOptions(quiet));
    await fresh.init([]);
    expect(await hostLeftovers(CRASH_PREFIX, runtimePath())).toEqual(NOTHING);
    await fresh.shutdown({ destroyAll: true });
  });
});
