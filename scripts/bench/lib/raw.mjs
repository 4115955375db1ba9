// The raw twins: the same work aenv does, done by hand with the host tools — a netns + veth made with two
// `ip -batch` calls, an overlay over the same cached image layers, `runc run -d` of the live sandbox's own
// OCI config (only per-instance fields changed), and `runc checkpoint|restore` with the same CRIU, CRIU
// config and environment the runtime driver uses. Everything lives under fixed names so a crashed run can
// be cleaned up later (see removeRawLeftovers).
import { spawn } from 'node:child_process';
import { constants, existsSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, chown, mkdir, rm, rmdir, writeFile } from 'node:fs/promises';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { clearTimeout, setTimeout } from 'node:timers';
import { runDetached } from './host.mjs';
import { criu, overlayOptions, run } from './product.mjs';

export const RAW_BASE = '/var/tmp/aenv-bench-raw';
export const RAW_CGROUP_PARENT = 'aenv-bench-raw';
const RUN_NETNS_MARKER = join(RAW_BASE, 'made-run-netns-mount');
const NETNS_PREFIX = 'aebench-ns';
const VETH_PREFIX = 'aebv';
/** Raw twins' addresses: 10.243.<k>.0/30 per netns (host .1, sandbox .2); no traffic is sent. */
const NET_OCTET = 243;

async function sh(cmd, args, opts = {}) {
  return run(cmd, args, { timeoutMs: 120_000, ...opts });
}

/** Resolves when something is written into `fifo`; O_RDWR|O_NONBLOCK so the open itself never blocks. */
export function waitFifo(fifo, timeoutMs = 60_000) {
  const sock = new Socket({ fd: openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK), readable: true });
  return new Promise(
    /** @param {(v?: unknown) => void} resolve */ (resolve, reject) => {
      const timer = setTimeout(() => {
        sock.destroy();
        reject(new Error(`${fifo}: the raw container did not signal readiness within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      sock.once('data', () => {
        clearTimeout(timer);
        sock.destroy();
        resolve();
      });
    },
  );
}

export class RawLab {
  /**
   * @param {{ criuPath: string, template: object, lowerDirs: string[], layersOwner: number }} opts  template = a
   *   live sandbox's OCI config; lowerDirs = its image layers, bottom first; layersOwner = the host uid owning
   *   them. The twin runs in that one range over the layers themselves (no idmapped views, no range of its own):
   *   plain runc as a single-range container runtime does it.
   */
  constructor(opts) {
    this.criuPath = opts.criuPath;
    this.template = opts.template;
    this.lowerDirs = opts.lowerDirs;
    const map = opts.template.linux?.uidMappings?.[0];
    if (!map) throw new Error('the sandbox OCI config has no uid mapping; the raw twin cannot mirror it');
    this.uid = opts.layersOwner;
    this.idMap = [{ containerID: 0, hostID: opts.layersOwner, size: map.size }];
    this.runcRoot = join(RAW_BASE, 'runc');
    this.toolsDir = join(RAW_BASE, 'tools');
    this.criuConfig = join(RAW_BASE, 'criu.conf');
    this.seq = 0;
    this.netSeq = 0;
    this.netns = new Set();
  }

  async init() {
    if (existsSync(RAW_BASE)) {
      throw new Error(
        `${RAW_BASE} exists: an earlier run left raw containers behind; run with --cleanup first`,
      );
    }
    await mkdir(join(this.toolsDir, 'ready'), { recursive: true, mode: 0o755 });
    // `ip netns add` bind-mounts /run/netns on first use; undone at the end if we were first (the marker
    // lets --cleanup know that too, after a crash or --keep).
    if (!readFileSync('/proc/self/mountinfo', 'utf8').includes(' /run/netns '))
      await writeFile(RUN_NETNS_MARKER, '');
    await chmod(RAW_BASE, 0o755);
    await chmod(this.toolsDir, 0o755);
    await mkdir(this.runcRoot, { mode: 0o700 });
    // The driver's CRIU options (tcp-close, skip-in-flight, file-locks, ghost-limit), not its masked-dir
    // external mounts: those are aenv's own saving over a plain runc (docs/runtime.md, "Masked directories").
    await criu.writeCriuConfig(this.criuConfig);
  }

  nextId(kind) {
    return `raw-${kind}-${++this.seq}`;
  }

  /** netns + veth + addresses + routes with two `ip -batch` calls (docs/networking.md#how-a-slot-is-made). */
  async createNetns() {
    const k = ++this.netSeq;
    if (k > 250) throw new Error('raw twin netns counter exhausted (250)');
    const name = `${NETNS_PREFIX}${k}`;
    const veth = `${VETH_PREFIX}${k}`;
    const [host, peer] = [`10.${NET_OCTET}.${k}.1`, `10.${NET_OCTET}.${k}.2`];
    this.netns.add(name);
    await sh('ip', ['-batch', '-'], {
      input: `netns add ${name}\nlink add ${veth} type veth peer name eth0 netns ${name}\naddr add ${host}/30 dev ${veth}\nlink set ${veth} up\n`,
    });
    await sh('ip', ['-n', name, '-batch', '-'], {
      input: `addr add ${peer}/30 dev eth0\nlink set eth0 up\nlink set lo up\nroute add default via ${host}\n`,
    });
    return { name, veth, path: `/run/netns/${name}` };
  }

  async deleteNetns(ns) {
    await sh('ip', ['-batch', '-'], {
      input: `link del ${ns.veth}\nnetns del ${ns.name}\n`,
      allowFailure: true,
    });
    this.netns.delete(ns.name);
  }

  /** The live sandbox's config with this instance's rootfs, hostname, netns, cgroup, process and binds. */
  configFor(id, b, args) {
    const c = JSON.parse(JSON.stringify(this.template));
    c.hostname = id;
    c.root = { path: b.rootfs, readonly: false };
    // aenv's boot-id hook binds a file of the live sandbox's rootfs; the raw process needs no boot id of its own.
    delete c.hooks;
    c.process.args = args;
    c.process.env = [
      ...c.process.env.filter((e) => e.startsWith('PATH=') || e.startsWith('HOME=')),
      `AENV_READY=/agentenv/ready/${id}`,
    ];
    c.mounts = c.mounts.map((m) => {
      if (m.destination === '/sys') return { ...m, source: b.sys };
      // The tools mount point carries the readiness FIFOs instead of envd (the raw process needs no tools).
      if (m.destination === '/agentenv') return { ...m, source: this.toolsDir };
      return m;
    });
    c.linux.namespaces = c.linux.namespaces.map((n) =>
      n.type === 'network' ? { type: 'network', path: b.netns.path } : n,
    );
    c.linux.cgroupsPath = `/${RAW_CGROUP_PARENT}/${id}`;
    c.linux.uidMappings = this.idMap;
    c.linux.gidMappings = this.idMap;
    c.annotations = { ...(c.annotations ?? {}), [criuAnnotation]: this.criuConfig };
    return c;
  }

  /**
   * Makes a bundle: upper/work owned by the mapped root (optionally seeded from another upper, for a fork),
   * the overlay over the image layers, a sysfs from inside the netns, and config.json.
   */
  async createBundle(
    id,
    netns,
    args,
    /** @type {{ seedUpper?: string, memoryMb?: number }} */ { seedUpper, memoryMb } = {},
  ) {
    const dir = join(RAW_BASE, 'sb', id);
    const b = {
      id,
      dir,
      upper: join(dir, 'upper'),
      work: join(dir, 'work'),
      rootfs: join(dir, 'rootfs'),
      sys: join(dir, 'sys'),
      netns,
    };
    for (const d of [b.upper, b.work, b.rootfs, b.sys]) await mkdir(d, { recursive: true });
    if (seedUpper) await sh('cp', ['-a', '--reflink=auto', `${seedUpper}/.`, b.upper]);
    await chown(b.upper, this.uid, this.uid);
    await chown(b.work, this.uid, this.uid);
    const { options, cwd } = overlayOptions(this.lowerDirs, b.upper, b.work);
    await sh('mount', ['-t', 'overlay', 'overlay', '-o', options, b.rootfs], cwd ? { cwd } : {});
    await sh('nsenter', [
      `--net=${netns.path}`,
      '--',
      'mount',
      '-t',
      'sysfs',
      '-o',
      'ro,nosuid,nodev,noexec',
      'sysfs',
      b.sys,
    ]);
    const config = this.configFor(id, b, args);
    // A memory limit of its own (the template's is the live sandbox's): the resume suite's 1 GB workload.
    if (memoryMb) {
      const memory = config.linux.resources?.memory ?? {};
      const limit = memoryMb * 1024 * 1024;
      config.linux.resources = {
        ...config.linux.resources,
        memory: { ...memory, limit, ...(memory.swap !== undefined ? { swap: limit } : {}) },
      };
    }
    await writeFile(join(dir, 'config.json'), JSON.stringify(config));
    return b;
  }

  readyFifo(id) {
    return join(this.toolsDir, 'ready', id);
  }

  async makeFifo(id) {
    const f = this.readyFifo(id);
    await sh('mkfifo', ['-m', '0666', f]);
    return f;
  }

  /** `runc run -d`; the container's stdio is /dev/null, runc's errors go to <bundle>/runc.log. */
  async runcRun(b) {
    await runDetached('runc', [
      '--root',
      this.runcRoot,
      '--log',
      join(b.dir, 'runc.log'),
      'run',
      '--detach',
      '--bundle',
      b.dir,
      b.id,
    ]).catch((e) => {
      throw new Error(`${e.message}: ${tail(join(b.dir, 'runc.log'))}`);
    });
  }

  /**
   * runc + CRIU exactly as the driver calls them: from inside the sandbox's netns (so CRIU inherits it),
   * with the driver's CRIU environment (no hardware breakpoints on this PVM host).
   */
  criuRunc(b, argv, { detached = false } = {}) {
    const args = [
      `--net=${b.netns.path}`,
      '--',
      'runc',
      '--root',
      this.runcRoot,
      '--log',
      join(b.dir, 'runc.log'),
      '--criu',
      this.criuPath,
      ...argv,
    ];
    const env = { ...process.env, ...criu.CRIU_NO_BREAKPOINTS_ENV };
    const p = detached ? runDetached('nsenter', args, { env }) : sh('nsenter', args, { env });
    return p.catch((e) => {
      throw new Error(`${e.message}: ${tail(join(b.dir, 'runc.log'))}`);
    });
  }

  async imageDir(name) {
    const d = join(RAW_BASE, 'img', name);
    await rm(d, { recursive: true, force: true });
    await mkdir(d, { recursive: true, mode: 0o711 });
    await chmod(d, 0o711);
    return d;
  }

  async checkpoint(b, img, { leaveRunning = false } = {}) {
    const work = `${img}.work`;
    await this.criuRunc(b, [
      'checkpoint',
      ...(leaveRunning ? ['--leave-running'] : []),
      '--image-path',
      img,
      '--work-path',
      work,
      b.id,
    ]);
  }

  async restore(b, img) {
    const work = `${img}.rwork-${b.id}`;
    await this.criuRunc(
      b,
      ['restore', '--detach', '--bundle', b.dir, '--image-path', img, '--work-path', work, b.id],
      { detached: true },
    );
  }

  /**
   * `runc restore --lazy-pages` with its `criu lazy-pages` daemon (docs/runtime.md#lazy-restore). Resolves
   * when runc returns, with `allIn`: resolves when the daemon has copied every page and exited.
   */
  async restoreLazy(b, img) {
    const work = `${img}.lwork-${b.id}`;
    await rm(work, { recursive: true, force: true });
    await mkdir(work, { recursive: true, mode: 0o700 });
    const daemon = spawn(
      this.criuPath,
      ['lazy-pages', '--images-dir', img, '--work-dir', work, '-o', 'lazy-pages.log'],
      { stdio: 'ignore' },
    );
    const allIn = new Promise(
      /** @param {(v?: unknown) => void} resolve */ (resolve, reject) => {
        daemon.on('error', reject);
        daemon.on('exit', (code) =>
          code === 0
            ? resolve()
            : reject(new Error(`criu lazy-pages exited with ${code}: ${tail(join(work, 'lazy-pages.log'))}`)),
        );
      },
    );
    allIn.catch(() => {});
    for (let i = 0; !existsSync(join(work, 'lazy-pages.socket')); i++) {
      if (i > 2000) throw new Error('criu lazy-pages made no socket within 10 s');
      await new Promise((r) => setTimeout(r, 5));
    }
    await this.criuRunc(
      b,
      [
        'restore',
        '--lazy-pages',
        '--detach',
        '--bundle',
        b.dir,
        '--image-path',
        img,
        '--work-path',
        work,
        b.id,
      ],
      { detached: true },
    ).catch((e) => {
      daemon.kill('SIGKILL');
      throw e;
    });
    return { allIn };
  }

  /** The raw container's first command: /bin/true in all its namespaces, as its root. */
  async firstCommand(b) {
    const pid = JSON.parse((await sh('runc', ['--root', this.runcRoot, 'state', b.id])).stdout).pid;
    await sh('nsenter', [
      '-t',
      String(pid),
      '-U',
      '-m',
      '-p',
      '-i',
      '-u',
      '-n',
      '--preserve-credentials',
      '/bin/true',
    ]);
  }

  async pause(b) {
    await sh('runc', ['--root', this.runcRoot, 'pause', b.id]);
  }

  async resume(b) {
    await sh('runc', ['--root', this.runcRoot, 'resume', b.id]);
  }

  /** runc's status of the container ('running', 'paused', 'stopped'), or 'absent'. */
  async state(b) {
    const r = await sh('runc', ['--root', this.runcRoot, 'state', b.id], { allowFailure: true });
    return r.code === 0 ? JSON.parse(r.stdout).status : 'absent';
  }

  async deleteContainer(b) {
    await sh('runc', ['--root', this.runcRoot, 'delete', '--force', b.id], { allowFailure: true });
  }

  /** Container, mounts, dir and netns of one raw instance. */
  async destroy(b, { keepNetns = false } = {}) {
    await this.deleteContainer(b);
    await sh('umount', [b.sys], { allowFailure: true });
    await sh('umount', [b.rootfs], { allowFailure: true });
    await rm(b.dir, { recursive: true, force: true });
    await rm(this.readyFifo(b.id), { force: true });
    if (!keepNetns) await this.deleteNetns(b.netns);
  }

  /** Removes everything this lab made (also what a failed step left half made). */
  async close() {
    return removeRawLeftovers();
  }

  /** Memory the raw container's cgroup is charged (bytes). */
  memoryUsage(b) {
    return Number(
      readFileSync(`/sys/fs/cgroup/memory/${RAW_CGROUP_PARENT}/${b.id}/memory.usage_in_bytes`, 'utf8').trim(),
    );
  }
}

const criuAnnotation = 'org.criu.config';

function tail(file) {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').slice(-3).join(' | ');
  } catch {
    return '(no runc log)';
  }
}

/** What raw twins (of this or an earlier run) left on the host. */
export async function rawLeftovers() {
  const netns = existsSync('/run/netns')
    ? readdirSync('/run/netns').filter((n) => n.startsWith(NETNS_PREFIX))
    : [];
  const links = JSON.parse((await run('ip', ['-j', 'link', 'show'], { allowFailure: true })).stdout || '[]')
    .map((l) => l.ifname)
    .filter((n) => new RegExp(`^${VETH_PREFIX}\\d+$`).test(n));
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(`${RAW_BASE}/`));
  const cgroups = readdirSync('/sys/fs/cgroup').filter((c) =>
    existsSync(`/sys/fs/cgroup/${c}/${RAW_CGROUP_PARENT}`),
  );
  const dirs = existsSync(RAW_BASE) ? [RAW_BASE] : [];
  return { dirs, mounts, netns, links, cgroups };
}

/** Removes every raw twin object by its fixed names: containers, mounts, netns, veths, cgroups, files. */
export async function removeRawLeftovers() {
  const runcRoot = join(RAW_BASE, 'runc');
  if (existsSync(runcRoot)) {
    for (const id of readdirSync(runcRoot))
      await run('runc', ['--root', runcRoot, 'delete', '--force', id], { allowFailure: true });
  }
  let left = await rawLeftovers();
  for (const m of [...left.mounts].sort((a, b) => b.split('/').length - a.split('/').length)) {
    if ((await run('umount', [m], { allowFailure: true })).code !== 0)
      await run('umount', ['-l', m], { allowFailure: true });
  }
  for (const l of left.links) await run('ip', ['link', 'del', l], { allowFailure: true });
  for (const n of left.netns) await run('ip', ['netns', 'del', n], { allowFailure: true });
  for (const ctrl of left.cgroups) {
    const parent = `/sys/fs/cgroup/${ctrl}/${RAW_CGROUP_PARENT}`;
    for (const e of readdirSync(parent, { withFileTypes: true }))
      if (e.isDirectory()) await rmdir(join(parent, e.name)).catch(() => {});
    await rmdir(parent).catch(() => {});
  }
  if (existsSync(RUN_NETNS_MARKER) && existsSync('/run/netns') && readdirSync('/run/netns').length === 0) {
    await run('umount', ['/run/netns'], { allowFailure: true });
  }
  left = await rawLeftovers();
  if (left.mounts.length === 0) await rm(RAW_BASE, { recursive: true, force: true });
  return rawLeftovers();
}
