// The aenv nodes the benchmark drives: real `aenv server` processes started by the e2e harness, each with
// its own state dir, resource prefix and CIDRs, and the removal of everything such a node leaves on the
// host (its state dir, CoW volume, netns mount, nft table, cgroup parent), found by the node's names.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { rm, rmdir } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { harness, run } from './product.mjs';
import { nameOrigin } from './trace.mjs';

/** Node names (harness: ≤ 7 chars). Chosen so their CIDRs (harness.cidrsFor) miss the e2e suites' nodes. */
export const MAIN_NODE = 'bench';
/** A second node whose paused sandboxes release their memory at once: resume from disk. */
export const DISK_NODE = 'bdisk';
/** A node with the warm sandbox pool on (the product default): creates take a pre-started sandbox. */
export const WARM_NODE = 'bwarm';
/** A node without the warm pool whose creates restore the base template's start capture (the product default). */
export const START_NODE = 'bstart';
/** The resume suite's nodes: like DISK_NODE with 2 GiB sandboxes; the second restores lazily. */
export const EAGER_NODE = 'breag';
export const LAZY_NODE = 'blazy';

/** Where the harness puts a node named `name` (test/e2e/harness.ts conventions). */
export function nodePaths(name) {
  return {
    home: `/var/lib/aenv-e2e/${name}`,
    runtimePath: `/run/aenv-e2e-${name}`,
    prefix: `e${name}`,
    configPath: `/var/lib/aenv-e2e/${name}/test-config.toml`,
  };
}

/**
 * The harness derives a node's internal CIDRs from its name (40 possible /16 pairs): refuse to start when
 * another node on this host already has addresses or routes there, instead of breaking both.
 */
async function assertCidrsFree(name) {
  const { hi, veth } = harness.cidrsFor(name);
  const prefixes = [hi, veth].map((c) => c.split('.').slice(0, 2).join('.') + '.');
  const own = `${nodePaths(name).prefix}-`;
  const lines = [
    ...(await sh('ip', ['-4', '-o', 'addr', 'show'])).stdout.split('\n'),
    ...(await sh('ip', ['-4', 'route', 'show'])).stdout.split('\n'),
  ];
  const clash = lines.find(
    (l) => !l.includes(own) && prefixes.some((p) => l.includes(` ${p}`) || l.startsWith(p)),
  );
  if (clash) {
    throw new Error(
      `node "${name}" would use ${hi} and ${veth}, but another node on this host uses them: ${clash.trim()}`,
    );
  }
}

/**
 * Starts a node; `toml` is appended to the harness config; `warm` = `[pool].warm_sandboxes` (default 0);
 * `extra.runtime` = lines for the harness's own `[runtime]` table, `extra.pool` = other `[pool]` keys over the
 * harness's, `extra.startCaptures` = `[pool].start_captures` (the harness's default: off).
 * @param {string} name
 * @param {string} [toml]
 * @param {number} [warm]
 * @param {{runtime?: string[], pool?: Record<string, number>, startCaptures?: boolean}} [extra]
 */
export async function startNode(name, toml = '', warm = 0, extra = {}) {
  await assertCidrsFree(name);
  const server = await harness.startServer({
    name,
    toml,
    warm,
    ...(extra.runtime ? { runtime: extra.runtime } : {}),
    ...(extra.pool ? { pool: extra.pool } : {}),
    ...(extra.startCaptures !== undefined ? { startCaptures: extra.startCaptures } : {}),
  });
  nameOrigin(server.url, name);
  return {
    name,
    server,
    /** Connection options for every e2b SDK call aimed at this node. */
    sdk: { apiUrl: server.url, sandboxUrl: server.url, apiKey: server.apiKey, debug: false },
  };
}

/** PIDs of `aenv server` processes running with this node's config (a crashed bench run's orphans). */
export function serverPids(configPath) {
  const pids = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let argv;
    try {
      argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (argv.includes('server') && argv.includes(configPath)) pids.push(Number(entry));
  }
  return pids;
}

async function sh(cmd, args) {
  return run(cmd, args, { allowFailure: true, timeoutMs: 60_000 });
}

/** What a node named `name` has on the host right now (empty lists = nothing). */
export async function nodeLeftovers(name) {
  const p = nodePaths(name);
  const links = JSON.parse((await sh('ip', ['-j', 'link', 'show'])).stdout || '[]')
    .map((l) => l.ifname)
    .filter((n) => n.startsWith(`${p.prefix}-`));
  const nft = (await sh('nft', ['list', 'table', 'inet', p.prefix])).code === 0 ? [`inet ${p.prefix}`] : [];
  const cgroups = readdirSync('/sys/fs/cgroup').filter((c) => existsSync(`/sys/fs/cgroup/${c}/${p.prefix}`));
  const mounts = mountsUnder([p.home, p.runtimePath]);
  const dirs = [p.home, p.runtimePath].filter((d) => existsSync(d));
  return { servers: serverPids(p.configPath), dirs, mounts, links, nft, cgroups };
}

export function isEmpty(leftovers) {
  return Object.values(leftovers).every((v) => v.length === 0);
}

function mountsUnder(dirs) {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => dirs.some((d) => m === d || m.startsWith(`${d}/`)))
    .sort((a, b) => b.split('/').length - a.split('/').length);
}

/**
 * Removes everything a stopped (or crashed) node left: its server process if still running (found by its
 * exact config path), runc containers, mounts (CoW volume, netns files), veths, the nft table, the cgroup
 * parent, and the state and runtime dirs. Returns what it could not remove.
 */
export async function removeNode(name) {
  const p = nodePaths(name);
  for (const pid of serverPids(p.configPath)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  for (let i = 0; i < 50 && serverPids(p.configPath).length > 0; i++) await sleep(100);
  const runcRoot = `${p.runtimePath}/runc`;
  if (existsSync(runcRoot)) {
    for (const id of readdirSync(runcRoot)) await sh('runc', ['--root', runcRoot, 'delete', '--force', id]);
  }
  for (const m of mountsUnder([p.home, p.runtimePath])) {
    if ((await sh('umount', [m])).code !== 0) await sh('umount', ['-l', m]);
  }
  const left = await nodeLeftovers(name);
  for (const link of left.links) await sh('ip', ['link', 'del', link]);
  if (left.nft.length) await sh('nft', ['delete', 'table', 'inet', p.prefix]);
  for (const ctrl of left.cgroups) {
    const parent = `/sys/fs/cgroup/${ctrl}/${p.prefix}`;
    for (const child of readdirSync(parent, { withFileTypes: true })) {
      if (child.isDirectory()) await rmdir(`${parent}/${child.name}`).catch(() => {});
    }
    await rmdir(parent).catch(() => {});
  }
  if (mountsUnder([p.home, p.runtimePath]).length === 0) {
    await rm(p.home, { recursive: true, force: true });
    await rm(p.runtimePath, { recursive: true, force: true });
  }
  return nodeLeftovers(name);
}
