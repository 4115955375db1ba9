#!/usr/bin/env node
// Network slot benchmark (root): NetworkManager create / destroy / policy apply next to the raw
// `ip -batch` + `nft -f` doing the same work, n runs each, min / median / p95 in ms.
// Sends no packets; everything it creates is named aebench* / bench* and removed at the end.
//
//   node scripts/bench/network-bench.mjs [--n 20] [--json]

import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { register } from 'tsx/esm/api';

register();
const { NetworkManager } = await import('../../packages/server/src/network/manager.ts');
const { parseNetworkPolicy } = await import('../../packages/server/src/network/policy.ts');

const args = process.argv.slice(2);
const N = Number(args[args.indexOf('--n') + 1] ?? 20) || 20;
const asJson = args.includes('--json');
const PREFIX = 'aebench';
const RAW_TABLE = 'benchraw';

function sh(cmd, argv, input) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (b) => (err += b));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`${cmd} ${argv.join(' ')}: ${err}`)),
    );
    child.stdin.end(input);
  });
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

const nm = new NetworkManager(
  options({ lowWatermark: 0, highWatermark: 0, maintenanceEnabled: false, startupPrewarm: false }),
);
try {
  await nm.init();

  // --- manager: create on demand (pool empty), apply policy, release ---
  const create = [];
  const apply = [];
  const reapply = [];
  const releaseWithPolicy = [];
  const releasePlain = [];
  for (let i = 0; i < N; i++) {
    let slot;
    create.push(await timeIt(async () => (slot = await nm.acquire())));
    apply.push(await timeIt(() => nm.applyPolicy(slot, policy)));
    reapply.push(await timeIt(() => nm.applyPolicy(slot, { ...policy, denyOut: [] })));
    releaseWithPolicy.push(await timeIt(() => nm.release(slot)));
    const plain = await nm.acquire();
    releasePlain.push(await timeIt(() => nm.release(plain)));
  }
  record('manager: create slot (pool miss)', create);
  record('manager: applyPolicy (new chain)', apply);
  record('manager: applyPolicy (replace)', reapply);
  record('manager: release (with policy chain)', releaseWithPolicy);
  record('manager: release (no policy)', releasePlain);

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

  // --- raw: the same kernel objects with ip -batch / nft -f, no manager ---
  const rawCreate = [];
  const rawDestroy = [];
  for (let i = 1; i <= N; i++) {
    const ns = `benchns${i}`;
    const veth = `benchv${i}`;
    const hostLink = `10.232.${i}.2`;
    const sbLink = `10.232.${i}.3`;
    const hi = `10.231.0.${i}`;
    rawCreate.push(
      await timeIt(async () => {
        await sh(
          'ip',
          ['-batch', '-'],
          `netns add ${ns}\nlink add ${veth} type veth peer name eth0 netns ${ns}\naddr add ${hostLink}/31 dev ${veth}\nlink set ${veth} up\nroute add ${hi}/32 via ${sbLink} dev ${veth}\n`,
        );
        await sh(
          'ip',
          ['-n', ns, '-batch', '-'],
          `addr add ${sbLink}/31 dev eth0\naddr add ${hi}/32 dev lo\nlink set lo up\nlink set eth0 up\nroute add default via ${hostLink}\n`,
        );
      }),
    );
    rawDestroy.push(await timeIt(() => sh('ip', ['-batch', '-'], `link del ${veth}\nnetns del ${ns}\n`)));
  }
  record('raw: 2x ip -batch create (ip netns add)', rawCreate);
  record('raw: ip -batch link del + netns del', rawDestroy);

  await sh(
    'nft',
    ['-f', '-'],
    `table inet ${RAW_TABLE} {\n map egress { type ifname : verdict ; }\n chain deny { }\n}\n`,
  );
  const rawAdd = [];
  const rawDel = [];
  for (let i = 1; i <= N; i++) {
    rawAdd.push(
      await timeIt(() =>
        sh(
          'nft',
          ['-f', '-'],
          `add chain inet ${RAW_TABLE} s${i}\nadd rule inet ${RAW_TABLE} s${i} ip daddr { 198.51.100.0/24, 203.0.113.10 } accept\nadd rule inet ${RAW_TABLE} s${i} ip daddr { 198.51.100.128/25 } goto deny\nadd rule inet ${RAW_TABLE} s${i} goto deny\nadd element inet ${RAW_TABLE} egress { "benchv${i}" : jump s${i} }\n`,
        ),
      ),
    );
    rawDel.push(
      await timeIt(() =>
        sh(
          'nft',
          ['-f', '-'],
          `delete element inet ${RAW_TABLE} egress { "benchv${i}" }\ndelete chain inet ${RAW_TABLE} s${i}\n`,
        ),
      ),
    );
  }
  record('raw: nft -f add chain + 3 rules + vmap element', rawAdd);
  record('raw: nft -f delete element + chain', rawDel);
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
