import { readFileSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, readdir, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SandboxStats } from '../../driver.js';
import { RuntimeError } from '../../driver.js';
import type { MountEntry } from './mountinfo.js';
import { exists } from '../../../util/fs.js';

const V1_CONTROLLERS = new Set([
  'cpu',
  'cpuacct',
  'cpuset',
  'memory',
  'devices',
  'freezer',
  'blkio',
  'pids',
  'hugetlb',
  'net_cls',
  'net_prio',
  'perf_event',
  'rdma',
  'misc',
]);

/** Where the cgroup hierarchies are mounted: v1 (legacy), hybrid (v1 + an unused unified mount) or v2. */
export interface CgroupLayout {
  mode: 'v1' | 'hybrid' | 'v2';
  /** v1 hierarchy mount points keyed by controller (and `name=<x>` for named hierarchies). */
  v1: Map<string, string>;
  /** The cgroup2 mount point (the only hierarchy in v2 mode; present but controller-less in hybrid). */
  unified: string | null;
}

export function detectCgroupLayout(mounts: MountEntry[]): CgroupLayout {
  const v1 = new Map<string, string>();
  let unified: string | null = null;
  for (const m of mounts) {
    if (m.fsType === 'cgroup2') {
      if (unified === null || m.mountPoint === '/sys/fs/cgroup') unified = m.mountPoint;
    } else if (m.fsType === 'cgroup') {
      for (const opt of m.superOptions) {
        if (V1_CONTROLLERS.has(opt) || opt.startsWith('name=')) {
          if (!v1.has(opt)) v1.set(opt, m.mountPoint);
        }
      }
    }
  }
  if (v1.size === 0) {
    if (!unified)
      throw new RuntimeError('HostSetup', 'no cgroup hierarchy is mounted (looked for cgroup and cgroup2)');
    return { mode: 'v2', v1, unified };
  }
  for (const c of ['memory', 'cpu', 'cpuacct', 'pids', 'freezer']) {
    if (!v1.has(c))
      throw new RuntimeError('HostSetup', `cgroup v1 layout without the ${c} controller mounted`);
  }
  return { mode: unified ? 'hybrid' : 'v1', v1, unified };
}

async function readTrim(path: string): Promise<string> {
  return (await readFile(path, 'utf8')).trim();
}

async function readNumber(path: string): Promise<number> {
  const text = await readTrim(path);
  if (text === 'max') return Number.POSITIVE_INFINITY;
  return Number(text);
}

function keyedValue(text: string, key: string): number {
  for (const line of text.split('\n')) {
    const [k, v] = line.split(' ');
    if (k === key) return Number(v);
  }
  return 0;
}

/**
 * The cgroups of one parent (`/aenv`) in every hierarchy: runc creates `<mount>/<parent>/<id>` from the
 * absolute cgroupsPath, which keeps sandboxes out of the server's own memory cgroup.
 */
/** ENOENT on a sandbox's cgroup file means it has no cgroup (it is not running); other errors pass through. */
function missingCgroup(e: unknown, id: string): unknown {
  if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
    return new RuntimeError('NotFound', `sandbox ${id} has no cgroup (not running)`);
  }
  return e;
}

export class Cgroups {
  constructor(
    readonly layout: CgroupLayout,
    readonly parent: string,
  ) {}

  /** Absolute cgroupsPath for the OCI config. */
  cgroupsPath(id: string): string {
    return `/${this.parent}/${id}`;
  }

  /** Every directory that may hold a part of this sandbox's cgroup (one per distinct hierarchy). */
  dirs(id: string): string[] {
    return this.hierarchyRoots().map((root) => join(root, this.parent, id));
  }

  private hierarchyRoots(): string[] {
    const roots = new Set<string>(this.layout.v1.values());
    if (this.layout.unified) roots.add(this.layout.unified);
    return [...roots];
  }

  private v2(): boolean {
    return this.layout.mode === 'v2';
  }

  private dir(controller: string, id: string): string {
    if (this.v2()) return join(this.layout.unified as string, this.parent, id);
    const root = this.layout.v1.get(controller);
    if (!root) throw new RuntimeError('HostSetup', `cgroup controller ${controller} is not mounted`);
    return join(root, this.parent, id);
  }

  /**
   * Caps the tasks of all sandboxes together at `max` (`pids.max` of the parent cgroup: the kernel counts
   * every task of every child against it), so sandboxes at their own limits cannot use up the host's PIDs.
   * Made at every start: the parent is created if needed, and the value replaces an older one.
   */
  async limitParentPids(max: number): Promise<void> {
    const root = this.v2() ? (this.layout.unified as string) : this.layout.v1.get('pids');
    if (!root) throw new RuntimeError('HostSetup', 'cgroup controller pids is not mounted');
    if (this.v2()) {
      // The parent's own pids.max only exists when its parent delegates the controller.
      const enabled = await readTrim(join(root, 'cgroup.subtree_control'));
      if (!enabled.split(' ').includes('pids'))
        await writeFile(join(root, 'cgroup.subtree_control'), '+pids');
    }
    const dir = join(root, this.parent);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'pids.max'), String(max));
  }

  /** Tasks of all sandboxes together (`pids.current` of the parent cgroup). */
  async parentPids(): Promise<number> {
    const root = this.v2() ? (this.layout.unified as string) : this.layout.v1.get('pids');
    return readNumber(join(root as string, this.parent, 'pids.current'));
  }

  /** memsw (RAM+swap) limits exist only when the kernel accounts swap; v2 always has memory.swap.max. */
  async hasSwapAccounting(): Promise<boolean> {
    if (this.v2()) return exists(join(this.layout.unified as string, 'cgroup.controllers'));
    return exists(join(this.layout.v1.get('memory') as string, 'memory.memsw.limit_in_bytes'));
  }

  async exists(id: string): Promise<boolean> {
    for (const d of this.dirs(id)) if (await exists(d)) return true;
    return false;
  }

  /** Names of the child cgroups of the parent in any hierarchy. */
  async listIds(): Promise<string[]> {
    const ids = new Set<string>();
    for (const root of this.hierarchyRoots()) {
      let entries;
      try {
        entries = await readdir(join(root, this.parent), { withFileTypes: true });
      } catch {
        continue;
      }
      for (const e of entries) if (e.isDirectory()) ids.add(e.name);
    }
    return [...ids];
  }

  async isFrozen(id: string): Promise<boolean> {
    if (this.v2()) {
      const events = await readFile(join(this.dir('', id), 'cgroup.events'), 'utf8');
      return keyedValue(events, 'frozen') === 1;
    }
    return (await readTrim(join(this.dir('freezer', id), 'freezer.state'))) === 'FROZEN';
  }

  /**
   * Freezes every task of the sandbox. A single FROZEN write can leave a v1 cgroup stuck in FREEZING
   * (a task in kernel_clone races the freezer), so the write is repeated until the state settles.
   */
  async freeze(id: string, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    if (this.v2()) {
      const d = this.dir('', id);
      await this.writeOrNotFound(join(d, 'cgroup.freeze'), '1', id);
      while (!(await this.isFrozen(id))) {
        if (Date.now() > deadline) throw new RuntimeError('Internal', `sandbox ${id}: cgroup did not freeze`);
        await sleep(1);
      }
      return;
    }
    const stateFile = join(this.dir('freezer', id), 'freezer.state');
    for (;;) {
      await this.writeOrNotFound(stateFile, 'FROZEN', id);
      for (let i = 0; i < 10; i++) {
        if ((await readTrim(stateFile)) === 'FROZEN') return;
        await sleep(1);
      }
      if (Date.now() > deadline) {
        throw new RuntimeError(
          'Internal',
          `sandbox ${id}: cgroup freezer stuck in ${await readTrim(stateFile)}`,
        );
      }
    }
  }

  /**
   * Thaws with one synchronous write: it is a resume's critical path (the kernel takes ~2 ms to wake the tasks
   * either way), and three thread-pool hops for open/write/close cost almost as much again.
   */
  async thaw(id: string): Promise<void> {
    const [file, value] = this.v2()
      ? [join(this.dir('', id), 'cgroup.freeze'), '0']
      : [join(this.dir('freezer', id), 'freezer.state'), 'THAWED'];
    try {
      writeFileSync(file, value);
    } catch (e) {
      throw missingCgroup(e, id);
    }
  }

  private async writeOrNotFound(path: string, value: string, id: string): Promise<void> {
    try {
      await writeFile(path, value);
    } catch (e) {
      throw missingCgroup(e, id);
    }
  }

  async stats(id: string): Promise<SandboxStats> {
    try {
      if (this.v2()) {
        const d = this.dir('', id);
        const [current, max, stat, events, cpu, pids, frozen] = await Promise.all([
          readNumber(join(d, 'memory.current')),
          readNumber(join(d, 'memory.max')),
          readFile(join(d, 'memory.stat'), 'utf8'),
          readFile(join(d, 'memory.events'), 'utf8'),
          readFile(join(d, 'cpu.stat'), 'utf8'),
          readNumber(join(d, 'pids.current')),
          this.isFrozen(id),
        ]);
        return {
          memoryUsageBytes: current,
          memoryRssBytes: keyedValue(stat, 'anon'),
          memoryLimitBytes: max,
          oomKills: keyedValue(events, 'oom_kill'),
          cpuUsageNs: keyedValue(cpu, 'usage_usec') * 1000,
          pids,
          frozen,
        };
      }
      const mem = this.dir('memory', id);
      const [usage, limit, stat, oom, cpu, pids, frozen] = await Promise.all([
        readNumber(join(mem, 'memory.usage_in_bytes')),
        readNumber(join(mem, 'memory.limit_in_bytes')),
        readFile(join(mem, 'memory.stat'), 'utf8'),
        readFile(join(mem, 'memory.oom_control'), 'utf8'),
        readNumber(join(this.dir('cpuacct', id), 'cpuacct.usage')),
        readNumber(join(this.dir('pids', id), 'pids.current')),
        this.isFrozen(id),
      ]);
      return {
        memoryUsageBytes: usage,
        memoryRssBytes: keyedValue(stat, 'total_rss'),
        memoryLimitBytes: limit,
        oomKills: keyedValue(oom, 'oom_kill'),
        cpuUsageNs: cpu,
        pids,
        frozen,
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new RuntimeError('NotFound', `sandbox ${id} has no cgroup (not running)`);
      }
      throw e;
    }
  }

  /** Memory charged to the sandbox's cgroup, bytes (one file read; `stats` reads seven). */
  async memoryUsageBytes(id: string): Promise<number> {
    return this.v2()
      ? readNumber(join(this.dir('', id), 'memory.current'))
      : readNumber(join(this.dir('memory', id), 'memory.usage_in_bytes'));
  }

  /** PIDs of every task in the sandbox's cgroup (empty when the cgroup is gone). */
  async pids(id: string): Promise<number[]> {
    const controller = this.v2() ? '' : 'pids';
    try {
      const text = await readFile(join(this.dir(controller, id), 'cgroup.procs'), 'utf8');
      return text
        .split('\n')
        .filter(Boolean)
        .map((s) => Number(s));
    } catch {
      return [];
    }
  }

  /**
   * Kills whatever still runs in the sandbox's cgroup and removes the cgroup from every hierarchy.
   * Everything in `/<parent>/<id>` belongs to that sandbox, so killing by cgroup membership is exact.
   */
  async remove(id: string): Promise<boolean> {
    const dirs: string[] = [];
    for (const d of this.dirs(id)) if (await exists(d)) dirs.push(d);
    if (dirs.length === 0) return false;
    await this.killAll(id);
    for (const d of dirs) await removeCgroupDir(d);
    return true;
  }

  private async killAll(id: string): Promise<void> {
    for (let attempt = 0; attempt < 200; attempt++) {
      const pids = await this.pids(id);
      if (pids.length === 0) return;
      // Frozen v1 tasks cannot act on SIGKILL until thawed.
      await this.thaw(id).catch(() => {});
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await sleep(attempt < 20 ? 2 : 20);
    }
    throw new RuntimeError('Internal', `sandbox ${id}: processes in its cgroup survive SIGKILL`);
  }
}

/** rmdir a cgroup dir and any child cgroups (deepest first); EBUSY right after the last task exits is retried. */
async function removeCgroupDir(dir: string): Promise<void> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  for (const e of entries) if (e.isDirectory()) await removeCgroupDir(join(dir, e.name));
  for (let attempt = 0; ; attempt++) {
    try {
      await rmdir(dir);
      return;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY' || attempt >= 100) throw e;
      await sleep(attempt < 10 ? 2 : 20);
    }
  }
}

/** What the per-sandbox metrics need from one sandbox's cgroup (`GET /sandboxes/{id}/metrics`). */
export interface CgroupUsage {
  /** CPU time used since the cgroup was made, nanoseconds. */
  cpuUsageNs: number;
  /** Memory charged to the cgroup, page cache included, bytes. */
  memoryUsageBytes: number;
  /** Page cache part of it, bytes. */
  memoryCacheBytes: number;
  memoryLimitBytes: number;
}

/**
 * Reads CPU and memory use of sandbox `id` under `cgroups` (read only; 4 small files, no process spawned).
 * Synchronous reads: cgroupfs files are generated in memory, and a thread-pool hop per file costs more than the
 * read (the sampler reads them for every running sandbox each pass). Throws RuntimeError NotFound when the
 * sandbox has no cgroup.
 */
export async function readCgroupUsage(cgroups: Cgroups, id: string): Promise<CgroupUsage> {
  const { layout, parent } = cgroups;
  const at = (controller: string) => {
    const root = layout.mode === 'v2' ? layout.unified : layout.v1.get(controller);
    if (!root) throw new RuntimeError('HostSetup', `cgroup controller ${controller} is not mounted`);
    return join(root, parent, id);
  };
  const text = (path: string) => readFileSync(path, 'utf8');
  const num = (path: string) => {
    const t = text(path).trim();
    return t === 'max' ? Number.POSITIVE_INFINITY : Number(t);
  };
  try {
    if (layout.mode === 'v2') {
      const d = at('');
      return {
        cpuUsageNs: keyedValue(text(join(d, 'cpu.stat')), 'usage_usec') * 1000,
        memoryUsageBytes: num(join(d, 'memory.current')),
        memoryCacheBytes: keyedValue(text(join(d, 'memory.stat')), 'file'),
        memoryLimitBytes: num(join(d, 'memory.max')),
      };
    }
    const mem = at('memory');
    return {
      cpuUsageNs: num(join(at('cpuacct'), 'cpuacct.usage')),
      memoryUsageBytes: num(join(mem, 'memory.usage_in_bytes')),
      memoryCacheBytes: keyedValue(text(join(mem, 'memory.stat')), 'total_cache'),
      memoryLimitBytes: num(join(mem, 'memory.limit_in_bytes')),
    };
  } catch (e) {
    throw missingCgroup(e, id);
  }
}
