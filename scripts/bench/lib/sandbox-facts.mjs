// What the host sees of one running aenv sandbox: its bundle config, overlay layers, cgroup and envd
// process. The raw twins are built from these, so they run the same rootfs with the same OCI config.
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

export function sandboxHostPaths(node, id) {
  const dir = `${node.server.home}/sandboxes/${id}`;
  return {
    dir,
    config: `${dir}/bundle/config.json`,
    memoryCgroup: `/sys/fs/cgroup/memory/${node.server.prefix}/${id}`,
  };
}

function need(path, what) {
  if (!existsSync(path)) {
    throw new Error(
      `${what} not found at ${path}: the runtime's host layout changed; update scripts/bench/lib/sandbox-facts.mjs`,
    );
  }
  return path;
}

/** The sandbox's OCI config as runc got it. */
export function sandboxOciConfig(node, id) {
  return JSON.parse(readFileSync(need(sandboxHostPaths(node, id).config, 'sandbox OCI config'), 'utf8'));
}

/**
 * The image layers (bottom first) and the host uid that owns them on disk, as the runtime recorded them: the
 * sandbox's overlay itself stacks idmapped views of them, which are its own (docs/runtime.md).
 */
export function sandboxLayers(node, id) {
  const file = `${sandboxHostPaths(node, id).dir}/bundle/layers.json`;
  const rec = JSON.parse(readFileSync(need(file, 'sandbox layer record'), 'utf8'));
  return { lowerDirs: rec.lowerDirs, owner: rec.layersIdRange.hostStart };
}

/** PIDs in the sandbox's memory cgroup. */
export function sandboxPids(node, id) {
  const procs = `${sandboxHostPaths(node, id).memoryCgroup}/cgroup.procs`;
  return readFileSync(need(procs, 'sandbox memory cgroup'), 'utf8').split('\n').filter(Boolean).map(Number);
}

function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

/** The host PID of the sandbox's envd (node running envd.cjs from the tools mount). */
export function envdPid(node, id) {
  const pid = sandboxPids(node, id).find((p) => cmdline(p).some((a) => /\/envd\/envd\.c?js$/.test(a)));
  if (!pid) throw new Error(`no envd process in sandbox ${id}'s cgroup`);
  return pid;
}

const kbField = (text, name) =>
  Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024;

/**
 * One process's memory: RSS (every resident page it maps, shared ones counted in full), anonymous RSS
 * (its own heap/stack), and PSS (shared pages divided by the number of processes mapping them).
 */
export async function processMemory(pid) {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rollup = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8');
  return {
    rss: kbField(status, 'VmRSS'),
    rssAnon: kbField(status, 'RssAnon'),
    rssFile: kbField(status, 'RssFile'),
    pss: kbField(rollup, 'Pss'),
  };
}

/**
 * The sandbox's memory cgroup (v1): usage_in_bytes is what the kernel charges to it — the anonymous memory
 * of every process inside (envd included), page cache first touched from inside, tmpfs/shm pages and some
 * kernel memory. memory.stat splits it (total_rss = anonymous, total_cache = page cache + tmpfs).
 */
export async function cgroupMemory(node, id) {
  const dir = sandboxHostPaths(node, id).memoryCgroup;
  const usage = Number(
    (await readFile(need(`${dir}/memory.usage_in_bytes`, 'memory cgroup'), 'utf8')).trim(),
  );
  const stat = Object.fromEntries(
    (await readFile(`${dir}/memory.stat`, 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => {
        const [k, v] = l.split(' ');
        return [k, Number(v)];
      }),
  );
  return {
    usage,
    anon: stat.total_rss ?? NaN,
    cache: stat.total_cache ?? NaN,
    shmem: stat.total_shmem ?? NaN,
  };
}

/**
 * The sandbox's root as the host reaches it: through its envd's `/proc/<pid>/root` (a started sandbox's root is
 * mounted in its own mount namespace only, docs/runtime.md "Mounts and density").
 */
export function sandboxRoot(node, id) {
  return `/proc/${envdPid(node, id)}/root`;
}
