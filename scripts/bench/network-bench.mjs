#!/usr/bin/env node
// Network slot benchmark (root): NetworkManager create / destroy / policy apply next to the raw
// `ip -batch` + `nft -f` doing the same work, n runs each, min / median / p95 in ms.
// Sends no packets; everything it creates is named aebench* / bench* and removed at the end.
//
//   node scripts/bench/network-bench.mjs [--n 20] [--json]

import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { register } from 'tsx/esm/api';

register();
const { NetworkManager } = await import('../../packages/node/src/network/manager.ts');
const { parseNetworkPolicy } = await import('../../packages/node/src/network/policy.ts');

const args = process.argv.slice(2);
const N = Number(args[args.indexOf('--n') + 1] ?? 20) || 20;
const asJson = args.includes('--json');
const PREFIX = 'aebench';
const RAW_TABLE = 'benchraw';

function sh(cmd, argv, input) {
  return new Promise(
    /** @param {(v?: unknown) => void} resolve */ (resolve, reject) => {
      const child = spawn(cmd, argv, { stdio: ['pipe', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (b) => (err += b));
      child.on('error', reject);
      child.on('close', (code) =>
        code === 0 ? resolve() : reject(new Error(`${cmd} ${argv.join(' ')}: ${err}`)),
      );
      child.stdin.end(input);
    },
  );
}

function summary(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
  return { n: s.length, min: s[0], median: at(0.5), p95: at(0.95) };
}

async function timeIt(fn) {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const results = {};
function record(name, samples) {
  results[name] = summary(samples);
}

// `ip netns add` (the raw twin) bind-mounts /run/netns on first use; undo that if we were first.
const ipForwardBefore = await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8');
const runNetnsWasMounted = (await readFile('/proc/self/mountinfo', 'utf8')).includes(' /run/netns ');
const scratch = await mkdtemp(join(tmpdir(), 'aenv-net-bench-'));
await writeFile(join(scratch, 'resolv.conf'), 'nameserver 198.51.100.53\n');
const options = (pool) => ({
  runtimePath: join(scratch, 'run'),
  namePrefix: PREFIX,
  internal: { hostInteractionCidr: '10.221.0.0/16', vethCidr: '10.222.0.0/16' },
  egress: {
    alwaysDeniedCidrs: [
      '10.0.0.0/8',
      '100.64.0.0/10',
      '127.0.0.0/8',
      '169.254.0.0/16',
      '172.16.0.0/12',
      '192.168.0.0/16',
    ],
  },
  pool,
  controlPlanePort: 49983,
  resolvConfPaths: [join(scratch, 'resolv.conf')],
});
const policy = parseNetworkPolicy({
  allowOut: ['198.51.100.0/24', '203.0.113.10'],
  denyOut: ['198.51.100.128/25'],
  allowInternetAccess: false,
});

// The raw twins: the same host objects written directly (docs/networking.md#how-a-slot-is-made).
function rawCreate(i) {
  const [ns, veth, hostLink, sbLink, hi] = [
    `benchns${i}`,
    `benchv${i}`,
    `10.232.${i}.2`,
    `10.232.${i}.3`,
    `10.231.0.${i}`,
  ];
  return sh(
    'ip',
    ['-batch', '-'],
    `netns add ${ns}\nlink add ${veth} type veth peer name eth0 netns ${ns}\naddr add ${hostLink}/31 dev ${veth}\nlink set ${veth} up\nroute add ${hi}/32 via ${sbLink} dev ${veth}\n`,
  ).then(() =>
    sh(
      'ip',
      ['-n', ns, '-batch', '-'],
      `addr add ${sbLink}/31 dev eth0\naddr add ${hi}/32 dev lo\nlink set lo up\nlink set eth0 up\nroute add default via ${hostLink}\n`,
    ),
  );
}
const rawDestroy = (i) => sh('ip', ['-batch', '-'], `link del benchv${i}\nnetns del benchns${i}\n`);
const rawPolicy = (i) =>
  `add chain inet ${RAW_TABLE} s${i}\nadd rule inet ${RAW_TABLE} s${i} ip daddr { 198.51.100.0/24, 203.0.113.10 } accept\nadd rule inet ${RAW_TABLE} s${i} ip daddr { 198.51.100.128/25 } goto deny\nadd rule inet ${RAW_TABLE} s${i} goto deny\nadd element inet ${RAW_TABLE} egress { "benchv${i}" : jump s${i} }\n`;
const rawPolicyDelete = (i) =>
  `delete element inet ${RAW_TABLE} egress { "benchv${i}" }\ndelete chain inet ${RAW_TABLE} s${i}\n`;

const nm = new NetworkManager(
  options({ lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false }),
);
try {
  await nm.init();

  // --- create / policy / release, each manager step next to its raw twin in the same iteration ---
  // (interleaved so both see the same background load)
  await sh(
    'nft',
    ['-f', '-'],
    `table inet ${RAW_TABLE} {\n map egress { type ifname : verdict ; }\n chain deny { }\n}\n`,
  );
  /** @type {Record<string, number[]>} */
  const m = { create: [], apply: [], reapply: [], releaseWithPolicy: [], releasePlain: [] };
  /** @type {Record<string, number[]>} */
  const raw = { create: [], destroy: [], nftAdd: [], nftDel: [] };
  for (let i = 1; i <= N; i++) {
    let slot;
    m.create.push(await timeIt(async () => (slot = await nm.acquire())));
    raw.create.push(await timeIt(() => rawCreate(i)));
    m.apply.push(await timeIt(() => nm.applyPolicy(slot, policy)));
    raw.nftAdd.push(await timeIt(() => sh('nft', ['-f', '-'], rawPolicy(i))));
    m.reapply.push(await timeIt(() => nm.applyPolicy(slot, { ...policy, denyOut: [] })));
    m.releaseWithPolicy.push(await timeIt(() => nm.release(slot)));
    raw.nftDel.push(await timeIt(() => sh('nft', ['-f', '-'], rawPolicyDelete(i))));
    raw.destroy.push(await timeIt(() => rawDestroy(i)));
    const plain = await nm.acquire();
    m.releasePlain.push(await timeIt(() => nm.release(plain)));
  }
  record('manager: create slot (pool miss)', m.create);
  record('raw: 2x ip -batch create (ip netns add)', raw.create);
  record('manager: applyPolicy (new chain)', m.apply);
  record('raw: nft -f add chain + 3 rules + vmap element', raw.nftAdd);
  record('manager: applyPolicy (replace)', m.reapply);
  record('manager: release (with policy chain)', m.releaseWithPolicy);
  record('raw: nft -f delete element + chain', raw.nftDel);
  record('raw: ip -batch link del + netns del', raw.destroy);
  record('manager: release (no policy)', m.releasePlain);

  // --- batching: 10 sandboxes get their policy at the same moment ---
  const slots = [];
  for (let i = 0; i < 10; i++) slots.push(await nm.acquire());
  const before = nm.stats().nftInvocations;
  const parallel = await timeIt(() => Promise.all(slots.map((s) => nm.applyPolicy(s, policy))));
  const invocations = nm.stats().nftInvocations - before;
  results['manager: 10 concurrent applyPolicy (total)'] = {
    n: 1,
    min: parallel,
    median: parallel,
    p95: parallel,
    nftInvocations: invocations,
  };
  await Promise.all(slots.map((s) => nm.release(s)));

  // --- policy apply with 200 other sandboxes' chains present ---
  const crowd = [];
  for (let i = 0; i < 200; i++)
    crowd.push(
      `add chain inet ${PREFIX} slot${30000 + i}\nadd rule inet ${PREFIX} slot${30000 + i} ip daddr 198.51.100.${i % 250}/32 accept\n`,
    );
  await sh('nft', ['-f', '-'], crowd.join(''));
  const crowded = [];
  const s = await nm.acquire();
  for (let i = 0; i < N; i++)
    crowded.push(await timeIt(() => nm.applyPolicy(s, i % 2 ? policy : { ...policy, denyOut: [] })));
  record('manager: applyPolicy with 200 chains in table', crowded);
  await nm.release(s);

  // --- warm pool hit ---
  const pooled = new NetworkManager(
    options({ lowWatermark: N, highWatermark: N, maintenanceEnabled: false, startupPrewarm: true }),
  );
  await nm.shutdown({ destroyAll: true });
  await pooled.init();
  const hits = [];
  const taken = [];
  for (let i = 0; i < N; i++) {
    let slot;
    hits.push(await timeIt(async () => (slot = await pooled.acquire())));
    taken.push(slot);
  }
  record('manager: acquire from warm pool', hits);
  await pooled.shutdown({ destroyAll: true });
} finally {
  await nm.shutdown({ destroyAll: true }).catch(() => undefined);
  const sweeper = new NetworkManager(
    options({ lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false }),
  );
  await sweeper
    .init()
    .then(() => sweeper.shutdown({ destroyAll: true }))
    .catch((e) => console.error('sweep failed', e));
  await sh('nft', ['-f', '-'], `add table inet ${RAW_TABLE}\ndelete table inet ${RAW_TABLE}\n`).catch(
    () => undefined,
  );
  for (let i = 1; i <= N; i++) await sh('ip', ['netns', 'del', `benchns${i}`]).catch(() => undefined);
  await rm(scratch, { recursive: true, force: true });
  await writeFile('/proc/sys/net/ipv4/ip_forward', ipForwardBefore);
  if (!runNetnsWasMounted && (await readdir('/run/netns').catch(() => ['?'])).length === 0) {
    await sh('umount', ['/run/netns']).catch(() => undefined);
  }
}

if (asJson) {
  console.log(JSON.stringify(results, null, 2));
} else {
  const f = (x) => x.toFixed(1).padStart(7);
  console.log(`${'operation'.padEnd(52)}    min  median     p95   (ms, n=${N})`);
  for (const [name, r] of Object.entries(results)) {
    const extra = r.nftInvocations !== undefined ? `   nft runs: ${r.nftInvocations}` : '';
    console.log(`${name.padEnd(52)}${f(r.min)} ${f(r.median)} ${f(r.p95)}${extra}`);
  }
}
