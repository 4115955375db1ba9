import { chmodSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { chmod, chown, lstat, mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { run } from '../../../util/exec.js';
import type {
  CheckpointOptions,
  CheckpointResult,
  CreateOptions,
  DiskRef,
  DriveSpec,
  IdRange,
  ListedSandbox,
  ReconcileReport,
  RestoreOptions,
  RuntimeDriver,
  SandboxHandle,
  SandboxSpec,
  SandboxStats,
  ToolsMount,
  VolumeDisks,
} from '../../driver.js';
import { containerRecordCodec } from './record-codec.js';
import { RuntimeError } from '../../driver.js';
import { Cgroups, detectCgroupLayout } from './cgroups.js';
import type { CowKind, CowVolumeMode } from './cow-volume.js';
import { CowVolume, mountOf } from './cow-volume.js';
import {
  CRIU_NO_BREAKPOINTS_ENV,
  criuLogErrors,
  criuVersion,
  versionAtLeast,
  writeCriuConfig,
  primeKerndatCache,
  type MaskedDirs,
} from './criu.js';
import { writeBootId } from './boot-id.js';
import { imagesForRange, USERNS_VIEW_PREFIX } from './criu-userns.js';
import {
  checkpointPageBytes,
  lazyRestoreUnavailable,
  startLazyPages,
  stopLazyPages,
  waitLazyPages,
} from './lazy-pages.js';
import { rewriteHostnameFiles, writeEtcFiles } from './etc-files.js';
import { HostnameSetter } from './hostname-setter.js';
import { phase } from '../../../util/phases.js';
import { writeTrustFiles } from './trust-files.js';
import type { IdLayout } from './id-ranges.js';
import {
  assertLayout,
  assertNoSubidCollision,
  assertSandboxRange,
  blockOf,
  imageRange,
  rangeOfBlock,
  spanEnd,
  SUBID_FILES,
} from './id-ranges.js';
import { buildIdmapHelper, idmappedMountArgv, shiftOwnership } from './idmap-helper.js';
import { buildWriteBackHelper, startWriteBack, type WriteBack } from './write-back.js';
import { KeyedMutex } from '../../../util/keyed-mutex.js';
import { mountsUnder, readMounts } from './mountinfo.js';
import { mountSandbox, sandboxFstab, unmountTree } from './mounts.js';
import { assertDriveSources, driveFstabLines, drivePaths, prepareDriveDirs } from './drives.js';
import {
  buildOciConfig,
  INIT_PATH,
  MASKED_PATHS,
  sandboxCapabilities,
  TOOLS_MOUNT_POINT,
} from './oci-config.js';
import { Runc, RuncError } from './runc.js';
import { SpareDirs, Trash } from './spare-dirs.js';
import { DiskCopies } from './disk-copies.js';
import type { OciSeccomp, SeccompSource } from './seccomp.js';
import { loadSeccompProfile } from './seccomp.js';
import { assertHostPath, assertSandboxId, isSandboxId, validateSpec } from './validate.js';
import { exists } from '../../../util/fs.js';
import { privatizeTree } from '../../../util/private-tree.js';
import type { Logger as NodeLogger } from '../../../util/log.js';

/**
 * Mode of a sandbox dir (owner root, group the sandbox's mapped root): runc, running as that uid inside the
 * user namespace, must pass through it to the rootfs and sysfs mount points; nobody else may (the overlay
 * honours setuid for sudo inside, so a host user must never reach a sandbox's files). docs/security.md.
 */
const SANDBOX_DIR_MODE = 0o710;
/** The volume root: searchable by the sandbox uids on their way to their own dir, not listable. */
const SANDBOXES_ROOT_MODE = 0o711;
/** Memory a sandbox holds before a durable checkpoint of it runs the write-back helper (see startWriteBack). */
const WRITE_BACK_MIN_BYTES = 64 * 1024 * 1024;
/** `<homePath>/<this>`: see makeMaskedEmptyDir. */
export const MASKED_EMPTY_DIR = '.masked-empty';
/**
 * Mount flags a user namespace may not clear on a bind of a host directory: CRIU's remount of the bind with
 * the masks' own flags (read-only, relatime) fails where the directory's filesystem carries one of them.
 */
const LOCKED_MOUNT_FLAGS = ['nosuid', 'nodev', 'noexec', 'noatime', 'nodiratime', 'strictatime'];

/**
 * The masked paths that are directories on this host (runc covers those with a tmpfs; files with /dev/null).
 * /proc is the host kernel's; /sys is a fresh sysfs in the sandbox, the same tree as the host's.
 */
async function maskedDirectories(): Promise<string[]> {
  const dirs: string[] = [];
  for (const p of MASKED_PATHS) {
    if ((await stat(p).catch(() => undefined))?.isDirectory()) dirs.push(p);
  }
  return dirs;
}

export const CHECKPOINT_META_FILE = 'aenv-checkpoint.json';
/** RLIMIT_NOFILE of sandbox processes when `[runtime].nofile_limit` is not given. */
export const DEFAULT_NOFILE_LIMIT = 65536;
/** Per-uid inotify limits inside a sandbox when not given (the kernel's defaults for a host user). */
export const DEFAULT_INOTIFY_INSTANCES = 128;
export const DEFAULT_INOTIFY_WATCHES = 65536;
// 4.2: CRIU 4.1 fails to dump any TCP socket on recent kernels (getsockopt SO_PASSCRED -> EOPNOTSUPP).
const MIN_CRIU_VERSION = '4.2';
const MAX_DUMP_ATTEMPTS = 3;
/** How long a dump waits for a lazy restore of the same container to fetch its last pages. */
const LAZY_SETTLE_TIMEOUT_MS = 120_000;
// compel loses a race with a signal (SIGCHLD of a child that exited as the dump began) while curing a task.
const TRANSIENT_DUMP_ERROR_RE = /is in unexpected state|Task stopped with/;

/** The part of the node's logger the driver uses. */
export type Logger = Pick<NodeLogger, 'info' | 'warn'>;

export interface ContainerDriverOptions {
  /** `$AENV_HOME`: the CoW volume image and `sandboxes/` live here. */
  homePath: string;
  /** `$AENV_RUNTIME`: runc state, CRIU work dirs and config. */
  runtimePath: string;
  /** `[runtime].runc_path`. */
  runcPath: string;
  /** `[runtime].criu_path` resolved (see `defaultCriuPath`); null: checkpoint/restore unavailable. */
  criuPath: string | null;
  /**
   * `[runtime].uid_map_host_start` / `uid_map_size` / `uid_ranges`: the host uid/gid span. Its first
   * `uidMapSize` ids own the image layers; then come `uidRanges` sandbox ranges of `uidMapSize` ids, one per
   * sandbox (`SandboxSpec.idRange`). See docs/security.md, "uid isolation".
   */
  uidMapHostStart: number;
  uidMapSize: number;
  uidRanges: number;
  /** Files whose entries the span must not overlap (default /etc/subuid and /etc/subgid). */
  subidFiles?: string[];
  /** `[runtime].cow_volume` and `cow_volume_size_gb`. */
  cowVolume: CowVolumeMode;
  cowVolumeSizeGb: number;
  /** `[runtime].disk_limits`: enforce `resources.diskMB` (see CowVolumeOptions.diskLimits). */
  diskLimits?: boolean;
  /**
   * Cgroup (relative to each hierarchy root) under which sandboxes get theirs. Everything below it belongs
   * to this driver and is removed by `reconcile`: servers sharing a host need distinct values.
   */
  cgroupParent?: string;
  /** `[runtime].seccomp_profile`: a Moby-format profile file; empty or absent: aenv's built-in profile. */
  seccompProfilePath?: string;
  /** `[runtime].nested_containers`: user namespaces and mounts inside them (see seccomp.ts). */
  nestedContainers?: boolean;
  /** `[runtime].cap_net_raw`: give sandboxes CAP_NET_RAW (raw sockets, classic ping). */
  capNetRaw?: boolean;
  /** `[runtime].no_new_privileges`: setuid binaries (sudo) stop working inside. */
  noNewPrivileges?: boolean;
  /** `[runtime].nofile_limit`: RLIMIT_NOFILE of sandbox processes (at most the server's own hard limit). */
  nofileLimit?: number;
  /** `[runtime].inotify_max_instances` / `inotify_max_watches`: per uid inside each sandbox. */
  inotifyMaxInstances?: number;
  inotifyMaxWatches?: number;
  /**
   * `[runtime].node_pids_limit` resolved (see resolvePidsBudget): pids.max of the cgroup parent of all
   * sandboxes. Absent: not limited.
   */
  nodePidsLimit?: number;
  /**
   * Let CRIU use hardware breakpoints (faster with many threads). Off by default: on hosts whose debug
   * registers do not fire (PVM guests) every dump hangs with them. See CRIU_NO_BREAKPOINTS_ENV.
   */
  criuHardwareBreakpoints?: boolean;
  /** Empty sandbox dirs kept ready so a create only renames one (default 2; 0 = none). */
  spareDirs?: number;
  /**
   * `[runtime].lazy_restore_min_mib`: restore checkpoints holding more memory pages than this lazily (see
   * lazy-pages.ts). 0 or absent: every restore reads all pages before the sandbox runs.
   */
  lazyRestoreMinMib?: number;
  logger?: Logger;
  /** A CA certificate (PEM) added to the sandbox's CA bundles at every boot (trust-files.ts). */
  trustedCaPem?: string;
}

/** A sandbox as the container driver hands it back: with its dir and overlay upper, as the host sees them. */
export interface ContainerSandboxHandle extends SandboxHandle {
  /** Directory holding the sandbox's upper, rootfs mount point and bundle. */
  sandboxDir: string;
  /** The overlay upper dir: every file the sandbox changed. */
  upperDir: string;
}

interface CheckpointMeta {
  version: 1;
  virtualizationMode: 'container';
  sourceId: string;
  hostname: string;
  toolsVersion: string;
  /** The range the dumped user namespace mapped to (the sandbox's own). */
  uidMapHostStart: number;
  uidMapSize: number;
  lowerDirs: string[];
  criuVersion: string | null;
  createdAt: string;
}

interface SandboxPaths {
  dir: string;
  upper: string;
  work: string;
  rootfs: string;
  sys: string;
  bundle: string;
  config: string;
  fstab: string;
  /** Mount points of the idmapped views of the image layers (`l/<n>`, bottom layer first). */
  lowers: string;
  /** The layers and uid range the mounts were made for. */
  layers: string;
  /** Mount points of the idmapped views of the sandbox's persistent volumes (`v/<n>`). */
  volumes: string;
  /** Mount points of the sandbox's attached drives (`d/<n>/...`) and their work dirs (`dw/<n>`). */
  drives: string;
  driveWork: string;
  pidFile: string;
  runcLog: string;
}

const silentLogger: Logger = { info() {}, warn() {} };

/** The parts of a sandbox's bundle config.json the driver reads back. */
interface OciConfigView {
  hostname: string;
  linux: {
    namespaces: { type: string; path?: string }[];
    uidMappings: { containerID: number; hostID: number; size: number }[];
  };
}

function rangeOfConfig(config: OciConfigView): IdRange {
  const m = config.linux.uidMappings[0];
  if (!m) throw new RuntimeError('Internal', 'sandbox config has no uid mapping');
  return { hostStart: m.hostID, size: m.size };
}

function dirBytes(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += dirBytes(p);
    else if (e.isFile()) total += statSync(p).size;
  }
  return total;
}

async function nofileHardLimit(): Promise<number> {
  const text = await readFile('/proc/self/limits', 'utf8');
  const m = /^Max open files\s+\S+\s+(\S+)/m.exec(text);
  const hard = m && m[1] !== 'unlimited' ? Number(m[1]) : 1048576;
  return Math.min(hard, 1048576);
}

/** Seccomp mode of a process (2 = filter); what proves a sandbox runs under its filter. */
async function seccompMode(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^Seccomp:\s+(\d+)/m.exec(status)?.[1] ?? -1);
}

/**
 * runc prepares the rootfs and bind mounts inside the sandbox's user namespace, as the mapped root (an
 * unprivileged host uid): every directory above them must be searchable by "others".
 */
async function assertSearchable(what: string, path: string): Promise<void> {
  const parts = path.split('/').filter(Boolean);
  for (let i = 0; i <= parts.length; i++) {
    const dir = '/' + parts.slice(0, i).join('/');
    const st = await stat(dir);
    if (st.isDirectory() && (st.mode & 0o001) === 0) {
      throw new RuntimeError(
        'HostSetup',
        `${what} ${path}: ${dir} (mode ${(st.mode & 0o777).toString(8)}) is not searchable by the sandbox uid range; chmod o+x it`,
      );
    }
  }
}

/**
 * CRIU reads some images from inside the restored user namespace (as the sandbox's root, an "other" to
 * them): readable by others, like the dir's search bit. Only the 0700 dirs above keep host users out
 * (docs/security.md); the server's umask would have made them owner-only.
 */
function makeImagesReadable(imagesDir: string): void {
  // Synchronous: ~70 small files, a few µs each; awaited one by one through the thread pool they took ms each.
  for (const e of readdirSync(imagesDir, { withFileTypes: true })) {
    if (e.isFile()) chmodSync(join(imagesDir, e.name), 0o644);
  }
}

function describe(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * Sandboxes as runc containers: an overlay over the image's cached layers with a per-sandbox upper on a
 * copy-on-write volume, a user namespace, Docker's capability set and a seccomp filter, cgroup limits, a
 * pre-created netns, and CRIU for checkpoint/restore/fork. See docs/runtime.md.
 */
export class ContainerDriver implements RuntimeDriver {
  readonly virtualizationMode = 'container';
  readonly sandboxesDir: string;
  readonly cgroupParent: string;
  private readonly log: Logger;
  private readonly lock = new KeyedMutex();
  private readonly runc: Runc;
  private readonly cow: CowVolume;
  private readonly criuConfigPath: string;
  private cgroups: Cgroups | null = null;
  private seccomp: OciSeccomp | null = null;
  private readonly capabilities: string[];
  private seccompSourceValue: SeccompSource | null = null;
  private swapAccounting = false;
  private nofile = 1024;
  private criuVersionValue: string | null = null;
  private spares: SpareDirs | null = null;
  private copies: DiskCopies | null = null;
  private trash: Trash | null = null;
  readonly idLayout: IdLayout;
  private idmapHelper: string | null = null;
  /** null: it could not be built (durable checkpoints are then synced whole). */
  private writeBackHelper: string | null = null;
  private hostnameSetter: HostnameSetter | undefined;
  /** Restores of checkpoints with more page bytes than this are lazy; 0: none (off, or the host cannot). */
  private lazyMinBytes = 0;

  constructor(readonly opts: ContainerDriverOptions) {
    assertHostPath('homePath', opts.homePath);
    assertHostPath('runtimePath', opts.runtimePath);
    this.idLayout = { start: opts.uidMapHostStart, size: opts.uidMapSize, count: opts.uidRanges };
    assertLayout(this.idLayout);
    const parent = opts.cgroupParent ?? 'aenv';
    if (
      !/^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/.test(parent) ||
      parent.split('/').some((s) => s === '..' || s === '.')
    ) {
      throw new RuntimeError(
        'InvalidSpec',
        `cgroup parent ${JSON.stringify(parent)} must be a relative cgroup path`,
      );
    }
    this.cgroupParent = parent;
    this.sandboxesDir = join(opts.homePath, 'sandboxes');
    this.log = opts.logger ?? silentLogger;
    this.runc = new Runc({
      runcPath: opts.runcPath,
      root: join(opts.runtimePath, 'runc'),
      criuPath: opts.criuPath,
      criuEnv: opts.criuHardwareBreakpoints ? {} : { ...CRIU_NO_BREAKPOINTS_ENV },
    });
    this.cow = new CowVolume({
      homePath: opts.homePath,
      sandboxesDir: this.sandboxesDir,
      mode: opts.cowVolume,
      sizeGb: opts.cowVolumeSizeGb,
      diskLimits: opts.diskLimits ?? false,
    });
    this.criuConfigPath = join(opts.runtimePath, 'criu', 'runc.conf');
    this.capabilities = sandboxCapabilities(opts.capNetRaw ?? false);
    if (opts.nofileLimit !== undefined && !(Number.isInteger(opts.nofileLimit) && opts.nofileLimit >= 64)) {
      throw new RuntimeError(
        'InvalidSpec',
        `runtime.nofile_limit = ${opts.nofileLimit}: must be an integer >= 64`,
      );
    }
  }

  /** Filesystem kind of the sandbox volume (after init). */
  get cowKind(): CowKind {
    return this.cow.kind;
  }

  get seccompSource(): SeccompSource | null {
    return this.seccompSourceValue;
  }

  get criuVersion(): string | null {
    return this.criuVersionValue;
  }

  /**
   * The masked directories CRIU is to treat as external mounts (criu.ts, MaskedDirs), or undefined when the
   * empty directory's filesystem is mounted with a flag a sandbox's restore could not keep off its bind: then
   * CRIU archives the masks as before (correct, ≈ 10 ms slower each way).
   */
  private async maskedDirs(): Promise<MaskedDirs | undefined> {
    const emptyDir = await this.makeMaskedEmptyDir();
    const flags = (await mountOf(emptyDir)).mountOptions.filter((f) => LOCKED_MOUNT_FLAGS.includes(f));
    if (flags.length) {
      this.log.info(
        { dir: emptyDir, flags },
        'masked directories are archived by CRIU at every dump (their empty stand-in is on a mount with these flags)',
      );
      return undefined;
    }
    return { dirs: await maskedDirectories(), emptyDir };
  }

  /**
   * `<homePath>/.masked-empty`: the empty, read-only directory a restore binds over each masked directory
   * (criu.ts, MaskedDirs). On the host's filesystem, not the sandbox volume, which is mounted nosuid,nodev.
   * Root's, 0555, emptied at every start; reachable by every sandbox's root (home is 0711) and written by none.
   * Never removed: a sandbox that outlives a server restart has it mounted over its masked dirs, and removing
   * a mount point detaches those mounts.
   */
  private async makeMaskedEmptyDir(): Promise<string> {
    const dir = join(this.opts.homePath, MASKED_EMPTY_DIR);
    await mkdir(dir, { mode: 0o555 }).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
    });
    const st = await lstat(dir);
    if (!st.isDirectory()) throw new RuntimeError('HostSetup', `${dir} is not a directory`);
    for (const e of await readdir(dir)) await rm(join(dir, e), { recursive: true, force: true });
    await chown(dir, 0, 0);
    await chmod(dir, 0o555);
    return dir;
  }

  /** Where persistent volumes live: `.volumes/<id>` on the sandbox volume (docs/volumes.md). */
  get volumesRoot(): string {
    return join(this.sandboxesDir, '.volumes');
  }

  /** Persistent volumes on the sandbox volume, each its own subvolume with a quota where limits are enforced. */
  volumeDisks(): VolumeDisks {
    const root = this.volumesRoot;
    const cow = this.cow;
    const owner = imageRange(this.idLayout);
    const dirOf = (id: string) => {
      assertSandboxId(id);
      return join(root, id);
    };
    return {
      get enforcesLimits() {
        return cow.enforcesLimits;
      },
      ownerRange: owner,
      dirOf,
      async create(id, mb) {
        const dir = dirOf(id);
        await mkdir(root, { recursive: true, mode: 0o700 });
        await cow.removeDir(dir);
        await cow.createDir(dir);
        await cow.limitDir(dir, mb);
        // Like /tmp: every user of every sandbox may make files; only a file's owner (or root) removes it.
        await chown(dir, owner.hostStart, owner.hostStart);
        await chmod(dir, 0o1777);
        return dir;
      },
      async remove(id) {
        const dir = dirOf(id);
        await cow.unlimitDir(dir).catch(() => {});
        await cow.removeDir(dir);
      },
      async list() {
        const names = await readdir(root).catch(() => [] as string[]);
        return names.filter(isSandboxId);
      },
    };
  }

  /** A place on the sandbox volume for other modules' CoW-friendly data (disk snapshots, checkpoint images). */
  get captureRoot(): string {
    return join(this.sandboxesDir, '.store');
  }

  readonly recordCodec = containerRecordCodec;

  readonly memoryMediaTypes = {
    capture: 'application/vnd.aenv.criu-images.tar',
    paused: 'application/vnd.aenv.paused-criu-images.tar',
  };

  /** A saved disk is a directory holding the sandbox's overlay upper as `upper/`. */
  diskFilesDir(disk: DiskRef): string {
    return join(disk, 'upper');
  }

  async init(): Promise<void> {
    // First: a profile that cannot be loaded stops the start before anything is made on the host.
    const hardNofile = await nofileHardLimit();
    const wantNofile = this.opts.nofileLimit ?? DEFAULT_NOFILE_LIMIT;
    // A user namespace cannot raise a hard limit above the one runc inherits from this server.
    this.nofile = Math.min(wantNofile, hardNofile);
    if (this.opts.nofileLimit !== undefined && this.nofile < wantNofile) {
      this.log.info(
        { nofileLimit: wantNofile, serverHardLimit: hardNofile },
        "runtime.nofile_limit is above the server's own hard limit of open files: sandboxes get the server's",
      );
    }
    const { profile, source } = await loadSeccompProfile(
      this.capabilities,
      this.opts.seccompProfilePath ?? '',
      { nestedContainers: this.opts.nestedContainers ?? false },
    );
    this.seccomp = profile;
    this.seccompSourceValue = source;
    let runcVersion: string;
    try {
      runcVersion = await this.runc.version();
    } catch (e) {
      throw new RuntimeError(
        'HostSetup',
        `runtime.runc_path = ${this.opts.runcPath}: runc does not run: ${describe(e)}`,
      );
    }
    this.cgroups = new Cgroups(detectCgroupLayout(await readMounts()), this.cgroupParent);
    this.swapAccounting = await this.cgroups.hasSwapAccounting();
    await assertNoSubidCollision(this.idLayout, this.opts.subidFiles ?? SUBID_FILES);
    this.idmapHelper = await buildIdmapHelper(join(this.opts.runtimePath, 'native'));
    this.cow.useHelper(this.idmapHelper);
    this.writeBackHelper = await buildWriteBackHelper(join(this.opts.runtimePath, 'native')).catch(
      (e: unknown) => {
        this.log.warn({ err: describe(e) }, 'durable pauses will sync their images whole');
        return null;
      },
    );
    if (this.opts.nodePidsLimit !== undefined) await this.cgroups.limitParentPids(this.opts.nodePidsLimit);
    await mkdir(join(this.opts.runtimePath, 'runc'), { recursive: true, mode: 0o700 });
    await mkdir(join(this.opts.runtimePath, 'criu-work'), { recursive: true, mode: 0o700 });
    // Before the volume is mounted: a start refused for a 0700 parent must not leave the mount behind.
    await mkdir(dirname(this.sandboxesDir), { recursive: true, mode: 0o711 });
    await assertSearchable('sandbox dir', dirname(this.sandboxesDir));
    await this.cow.init();
    if (this.cow.loopDirectIo === 'off') {
      this.log.warn(
        { image: this.cow.imagePath },
        "the CoW volume's loop device refused direct I/O: its blocks are cached twice and syncs are slower",
      );
    }
    await this.enforceSandboxDirModes();
    await assertSearchable('sandbox dir', this.sandboxesDir);
    await writeCriuConfig(this.criuConfigPath, await this.maskedDirs());
    await mkdir(this.captureRoot, { recursive: true, mode: 0o700 });
    const remove = (path: string) => this.cow.removeDir(path);
    this.trash = new Trash({ dir: this.sandboxesDir, remove, log: this.log });
    await this.trash.init();
    this.spares = new SpareDirs({
      dir: this.sandboxesDir,
      count: this.opts.spareDirs ?? 2,
      make: (path) => this.makeEmptySandboxDir(path),
      remove,
      log: this.log,
    });
    await this.spares.init();
    this.copies = new DiskCopies({
      dir: this.sandboxesDir,
      make: (source, path) => this.copyDiskAside(source, path),
      remove,
      log: this.log,
    });
    if (this.opts.criuPath) {
      this.criuVersionValue = await criuVersion(this.opts.criuPath);
      if (!this.criuVersionValue) {
        this.log.warn(
          `CRIU at ${this.opts.criuPath} does not run: checkpoint, restore and fork are unavailable`,
        );
      } else if (!versionAtLeast(this.criuVersionValue, MIN_CRIU_VERSION)) {
        this.log.warn(
          `CRIU ${this.criuVersionValue} is older than ${MIN_CRIU_VERSION}: on recent kernels it cannot dump TCP sockets (envd), so checkpoints fail`,
        );
      }
      const lazyMib = this.opts.lazyRestoreMinMib ?? 0;
      if (this.criuVersionValue && lazyMib > 0) {
        const why = await lazyRestoreUnavailable();
        if (why) this.log.warn(`runtime.lazy_restore_min_mib = ${lazyMib} is not used: ${why}`);
        else this.lazyMinBytes = lazyMib * 1024 * 1024;
      }
      if (this.criuVersionValue) {
        await primeKerndatCache(this.opts.criuPath).then(
          (how) =>
            how === 'installed' && this.log.info('installed CRIU kernel-feature cache (/run is not a tmpfs)'),
          (err: unknown) =>
            this.log.warn(
              { err: describe(err) },
              'could not prime the CRIU kernel-feature cache: every CRIU run probes',
            ),
        );
      }
    }
    this.log.info(
      {
        runc: runcVersion,
        criu: this.criuVersionValue,
        cgroups: this.cgroups.layout.mode,
        cowVolume: this.cow.kind,
        diskLimits: this.cow.enforcesLimits,
        seccomp: source,
        nestedContainers: this.opts.nestedContainers ?? false,
        capabilities: this.capabilities.length,
        nofile: this.nofile,
        nodePidsLimit: this.opts.nodePidsLimit ?? null,
        swapAccounting: this.swapAccounting,
      },
      'container runtime ready',
    );
  }

  private readonly pendingLimits = new Map<string, Promise<void>>();

  /**
   * What a started sandbox still needs, done in the background: started at once (beside the seccomp check
   * and envd's /init), so the caller's wait for envd covers their cost, and held under the sandbox's lock so
   * later operations come after them (`diskLimitSet` waits; a failure fails the sandbox's start):
   * - its user namespace's limits (`limitUserNamespace`);
   * - the disk limit, once the host wrote what it writes into the sandbox dir (etc files, bundle, runc's
   *   pid file), so that a sandbox on a full disk still starts;
   * - its root and sysfs taken out of the host's mount table (`detachRoot`).
   */
  private settleSoon(spec: SandboxSpec, p: SandboxPaths, pid: number): void {
    const mb = spec.resources.diskMB;
    const work = Promise.all([
      this.limitUserNamespace(pid),
      mb !== undefined && this.cow.enforcesLimits ? this.cow.limitDir(p.dir, mb) : undefined,
      phase('rt-detach', () => this.detachRoot(p)),
    ]);
    // Its failure is the job's, reported below: not an unhandled rejection while the job waits for the lock.
    work.catch(() => {});
    const job: Promise<void> = this.lock
      .serialize(spec.id, async () => {
        await work;
      })
      .finally(() => {
        if (this.pendingLimits.get(spec.id) === job) this.pendingLimits.delete(spec.id);
      });
    job.catch((err: unknown) =>
      this.log.warn({ err: describe(err), id: spec.id }, 'could not set the sandbox limits'),
    );
    this.pendingLimits.set(spec.id, job);
  }

  /**
   * Per-user limits of the sandbox's user namespace (its `/proc/sys/user`): inotify instances and watches
   * per uid inside, and no nested user namespaces unless allowed (a second wall behind seccomp). Only a
   * process holding CAP_SYS_RESOURCE in that namespace may change them: the host, not the sandbox. Set
   * after every start and restore (CRIU makes a new namespace). The kernel also counts every sandbox's
   * use against host root (the namespace's creator): see docs/security.md.
   */
  private async limitUserNamespace(pid: number): Promise<void> {
    const values: [string, number][] = [
      ['max_inotify_instances', this.opts.inotifyMaxInstances ?? DEFAULT_INOTIFY_INSTANCES],
      ['max_inotify_watches', this.opts.inotifyMaxWatches ?? DEFAULT_INOTIFY_WATCHES],
    ];
    if (!this.opts.nestedContainers) values.push(['max_user_namespaces', 0]);
    await run(this.helper(), ['userns-limits', String(pid), ...values.map(([k, v]) => `${k}=${v}`)]);
  }

  async diskLimitSet(id: string): Promise<void> {
    await this.pendingLimits.get(id);
  }

  /** Whether sandboxes' `resources.diskMB` is enforced on this host (after init). */
  get enforcesDiskLimits(): boolean {
    return this.cow.enforcesLimits;
  }

  private cg(): Cgroups {
    if (!this.cgroups) throw new RuntimeError('Internal', 'ContainerDriver.init() has not run');
    return this.cgroups;
  }

  paths(id: string): SandboxPaths {
    assertSandboxId(id);
    return this.pathsIn(join(this.sandboxesDir, id));
  }

  private pathsIn(dir: string): SandboxPaths {
    return {
      dir,
      upper: join(dir, 'upper'),
      work: join(dir, 'work'),
      rootfs: join(dir, 'rootfs'),
      sys: join(dir, 'sys'),
      bundle: join(dir, 'bundle'),
      config: join(dir, 'bundle', 'config.json'),
      fstab: join(dir, 'bundle', 'fstab'),
      lowers: join(dir, 'l'),
      layers: join(dir, 'bundle', 'layers.json'),
      volumes: join(dir, 'v'),
      drives: join(dir, 'd'),
      driveWork: join(dir, 'dw'),
      pidFile: join(dir, 'init.pid'),
      runcLog: join(dir, 'runc.log'),
    };
  }

  /**
   * At every start (trees of older versions included): the volume root 0711; each sandbox (and spare) dir
   * root:<its root gid> 0710 with a private bundle and files, its upper, work and mount points left as the
   * sandbox has them; everything else (.store, template build dirs) private, disk copies (`upper`) left
   * alone, CRIU image dirs keeping their search bit (CRIU reads images from inside the restored user
   * namespace through the dir's fd; they are reachable only through the 0700 dirs above them).
   */
  private async enforceSandboxDirModes(): Promise<void> {
    const root = this.sandboxesDir;
    await chmod(root, SANDBOXES_ROOT_MODE);
    for (const e of await readdir(root, { withFileTypes: true })) {
      const path = join(root, e.name);
      if (e.name.startsWith('.trash-')) continue; // being deleted
      if (path === this.volumesRoot) {
        // Volumes keep the modes their users gave their files; only the root above them is private.
        await chmod(path, 0o700);
        continue;
      }
      if (!e.isDirectory()) {
        await privatizeTree(path);
      } else if (isSandboxId(e.name) || e.name.startsWith('.spare-')) {
        await chown(path, 0, await this.rootIdOf(path));
        await chmod(path, SANDBOX_DIR_MODE);
        const p = this.pathsIn(path);
        // The lowers are mount points of idmapped views of the shared image layers (detached once the overlay
        // is made, still mounted on sandboxes from before that): never walked.
        const leftAlone = new Set([
          p.upper,
          p.work,
          p.rootfs,
          p.sys,
          p.lowers,
          p.volumes,
          p.drives,
          p.driveWork,
        ]);
        await privatizeTree(path, {
          rule: (q) => (q === path ? SANDBOX_DIR_MODE : leftAlone.has(q) ? 'skip' : 'descend'),
        });
      } else {
        await privatizeTree(path, {
          keepSearch: true,
          readableFilesIf: (names) => names.includes(CHECKPOINT_META_FILE),
          // A `.userns-*` view left by a crashed restore hard-links the images of its checkpoint: making
          // its files private would make the checkpoint's own images unreadable inside the sandbox.
          rule: (q, st) =>
            q === path
              ? 0o700
              : st.isDirectory() && (q.endsWith('/upper') || basename(q).startsWith(USERNS_VIEW_PREFIX))
                ? 'skip'
                : 'descend',
        });
      }
    }
  }

  private readonly checkedTools = new Set<string>();

  private async checkTools(tools: ToolsMount): Promise<void> {
    assertHostPath('tools dir', tools?.dir);
    if (this.checkedTools.has(tools.dir)) return;
    const init = INIT_PATH.slice(TOOLS_MOUNT_POINT.length + 1);
    if (!(await exists(join(tools.dir, init)))) {
      throw new RuntimeError('InvalidSpec', `tools dir ${tools.dir} has no ${init}`);
    }
    await assertSearchable('tools dir', tools.dir);
    this.checkedTools.add(tools.dir);
  }

  private async checkLowerDirs(spec: SandboxSpec): Promise<void> {
    for (const d of [...spec.rootfs.layers, ...(spec.rootfs.drives ?? []).flatMap((x) => x.layers)]) {
      let st;
      try {
        st = await stat(d);
      } catch {
        throw new RuntimeError('InvalidSpec', `image layer dir ${d} does not exist`);
      }
      if (!st.isDirectory()) throw new RuntimeError('InvalidSpec', `image layer dir ${d} is not a directory`);
    }
    if (!(await exists(spec.netnsPath))) {
      throw new RuntimeError('InvalidSpec', `netns ${spec.netnsPath} does not exist`);
    }
  }

  /** Waits for background work (spare dirs being made, discarded dirs being removed). */
  async close(): Promise<void> {
    this.hostnameSetter?.close();
    await this.copies?.close();
    await this.spares?.close();
    await this.trash?.drain();
  }

  /** Resolves when the driver's background work (spare dirs, removals) has caught up. */
  async whenIdle(): Promise<void> {
    await this.spares?.idle();
    await this.trash?.drain();
  }

  private async makeEmptySandboxDir(path: string): Promise<void> {
    await this.cow.createDir(path);
    // Owned by the image range until a sandbox takes it (ownDirs): no sandbox runs as that range.
    await this.prepareDirs(this.pathsIn(path), imageRange(this.idLayout).hostStart);
  }

  /**
   * The host uid/gid of the root of the range a sandbox dir's files belong to: the block of its upper's
   * owner (inside, the sandbox can only give its files to other ids of its own range), so it follows
   * whatever range the sandbox maps; a spare dir's upper (or none) gives the image range, which no sandbox
   * runs as.
   */
  private async rootIdOf(dir: string): Promise<number> {
    const owner = await lstat(join(dir, 'upper')).then(
      (st) => st.uid,
      () => undefined,
    );
    const block = owner === undefined ? undefined : blockOf(this.idLayout, owner);
    return block === undefined || block === 0
      ? imageRange(this.idLayout).hostStart
      : rangeOfBlock(this.idLayout, block).hostStart;
  }

  /**
   * Directory layout below an existing sandbox dir (upper kept if present), owned by `root`: the upper and
   * work dirs belong to it, and the sandbox dir (root:<root> 0710) lets only it pass.
   */
  private async prepareDirs(
    p: Pick<SandboxPaths, 'dir' | 'upper' | 'work' | 'rootfs' | 'sys' | 'bundle'>,
    root: number,
  ): Promise<void> {
    if (!(await exists(p.upper))) await mkdir(p.upper);
    // The merged root takes its owner and mode from the upper dir; work must belong to the same owner.
    await chown(p.upper, root, root);
    await chown(p.dir, 0, root);
    await chmod(p.dir, SANDBOX_DIR_MODE);
    await chmod(p.upper, 0o755);
    await rm(p.work, { recursive: true, force: true });
    await mkdir(p.work);
    await chown(p.work, root, root);
    for (const d of [p.rootfs, p.sys, p.bundle]) await mkdir(d, { recursive: true });
  }

  private runcStateDir(id: string): string {
    return join(this.opts.runtimePath, 'runc', id);
  }

  /** Hands a prepared (spare) sandbox dir to the sandbox's range. */
  private async ownDirs(p: SandboxPaths, range: IdRange): Promise<void> {
    await chown(p.dir, 0, range.hostStart);
    await chown(p.upper, range.hostStart, range.hostStart);
    await chown(p.work, range.hostStart, range.hostStart);
  }

  private helper(): string {
    if (!this.idmapHelper) throw new RuntimeError('Internal', 'ContainerDriver.init() has not run');
    return this.idmapHelper;
  }

  /**
   * Moves a disk written under another range (a fork's, a snapshot's or template's, a pause from before
   * per-sandbox ranges) into `range`. Which range wrote it is read off the owner of the upper dir: inside a
   * sandbox it can only be changed to another id of the same range.
   */
  private async adoptDisk(p: SandboxPaths, range: IdRange): Promise<void> {
    const owner = (await lstat(p.upper)).uid;
    const block = blockOf(this.idLayout, owner);
    const from = block === undefined ? undefined : rangeOfBlock(this.idLayout, block);
    if (from?.hostStart === range.hostStart) return;
    await shiftOwnership(this.helper(), p.upper, from, range, {
      start: this.idLayout.start,
      end: spanEnd(this.idLayout),
    });
  }

  /** The id a layer file owned by `id` on disk shows as in a sandbox of `range` (see idmappedMountArgv). */
  private viewOfLayerId(id: number, range: IdRange): number {
    const image = imageRange(this.idLayout);
    const offset = id - image.hostStart;
    // Outside the mapping the kernel shows the overflow id; the image cache never writes such owners.
    return offset >= 0 && offset < image.size ? range.hostStart + offset : range.hostStart + 65534;
  }

  private lowerMountPoints(spec: SandboxSpec, p: SandboxPaths): string[] {
    return spec.rootfs.layers.map((_, i) => join(p.lowers, String(i)));
  }

  /** bundle/layers.json: the layers (bottom first), the range owning them on disk, the sandbox's range. */
  private layersRecord(spec: SandboxSpec): string {
    return JSON.stringify({
      lowerDirs: spec.rootfs.layers,
      layersIdRange: imageRange(this.idLayout),
      idRange: spec.idRange,
      ...(spec.volumes?.length ? { volumes: spec.volumes } : {}),
      ...(spec.rootfs.drives?.length ? { drives: spec.rootfs.drives } : {}),
    });
  }

  private drivePathsOf(spec: SandboxSpec, p: SandboxPaths) {
    return (spec.rootfs.drives ?? []).map((d, n) => drivePaths(p.dir, p.upper, d, n));
  }

  /** Every mount point of the drives: the views of their layers, then their overlays. */
  private driveMountPoints(spec: SandboxSpec, p: SandboxPaths): string[] {
    const paths = this.drivePathsOf(spec, p);
    return [
      ...paths.flatMap((d) => d.views),
      ...paths.filter((d) => d.merged !== d.views[0]).map((d) => d.merged),
    ];
  }

  private volumeMountPoints(spec: SandboxSpec, p: SandboxPaths): string[] {
    return (spec.volumes ?? []).map((_, i) => join(p.volumes, String(i)));
  }

  private fstabFor(spec: SandboxSpec, p: SandboxPaths) {
    const fstab = sandboxFstab({
      lowerDirsBottomFirst: this.lowerMountPoints(spec, p),
      upperDir: p.upper,
      workDir: p.work,
      rootfsDir: p.rootfs,
      sysDir: p.sys,
    });
    // After the root: a writable drive's upper lies inside the root's upper.
    return { ...fstab, text: fstab.text + driveFstabLines(this.drivePathsOf(spec, p)) };
  }

  /**
   * A sandbox paused by a version that kept its overlay and sysfs mounted on the host after a stopping
   * checkpoint (now they leave with its mount namespace, see detachRoot): those mounts can serve the restore
   * when they were made for the same layers and the same netns (sysfs shows the netns it was mounted in).
   */
  private async mountsReusable(spec: SandboxSpec, p: SandboxPaths): Promise<boolean> {
    const mounted = new Set(mountsUnder(await readMounts(), p.dir).map((m) => m.mountPoint));
    const wanted = [p.rootfs, p.sys, ...this.volumeMountPoints(spec, p), ...this.driveMountPoints(spec, p)];
    if (!wanted.every((m) => mounted.has(m)) || mounted.size !== wanted.length) return false;
    try {
      if ((await readFile(p.layers, 'utf8')) !== this.layersRecord(spec)) return false;
      const fstab = await readFile(p.fstab, 'utf8');
      const config = JSON.parse(await readFile(p.config, 'utf8')) as {
        linux: { namespaces: { type: string; path?: string }[] };
      };
      const netns = config.linux.namespaces.find((n) => n.type === 'network')?.path;
      return fstab === this.fstabFor(spec, p).text && netns === spec.netnsPath;
    } catch {
      return false;
    }
  }

  /**
   * Takes a started sandbox's root and sysfs out of the host's mount table: its own mount namespace holds
   * copies of them (they go with it), and every mount left in the host's table is copied by each later
   * `runc run` and restore (docs/runtime.md "Mounts and density"). A restore mounts them again first.
   */
  private async detachRoot(p: SandboxPaths): Promise<void> {
    await run(this.helper(), ['detach', p.rootfs, p.sys]);
  }

  private async mountAndConfigure(
    spec: SandboxSpec,
    p: SandboxPaths,
    tools: ToolsMount,
    mount = true,
  ): Promise<void> {
    writeEtcFiles({
      upperDir: p.upper,
      lowerDirs: spec.rootfs.layers,
      hostname: spec.hostname,
      nameservers: spec.nameservers ?? [],
      rootUid: spec.idRange.hostStart,
      lowerOwner: (id) => this.viewOfLayerId(id, spec.idRange),
    });
    if (this.opts.trustedCaPem)
      writeTrustFiles({
        upperDir: p.upper,
        lowerDirs: spec.rootfs.layers,
        caPem: this.opts.trustedCaPem,
        rootUid: spec.idRange.hostStart,
        lowerOwner: (id) => this.viewOfLayerId(id, spec.idRange),
      });
    if (mount) {
      const fstab = this.fstabFor(spec, p);
      await writeFile(p.fstab, fstab.text);
      await writeFile(p.layers, this.layersRecord(spec));
      await mkdir(p.lowers, { recursive: true, mode: 0o700 });
      // The overlay's lower dirs are idmapped views of the shared layers (owned by the image range),
      // showing them owned by this sandbox's range; the helper makes them, then runs the fstab mount.
      const idmap = idmappedMountArgv(
        this.helper(),
        imageRange(this.idLayout),
        spec.idRange,
        spec.rootfs.layers,
        this.lowerMountPoints(spec, p),
      );
      // Volumes: writable idmapped views (files owned on disk by the image range, like the layers), so a
      // uid a sandbox user writes reads back the same in every sandbox mounting the volume (docs/volumes.md).
      const volumes = spec.volumes ?? [];
      if (volumes.length) {
        await mkdir(p.volumes, { recursive: true });
        // Search only: CRIU opens the views from inside the restored user namespace (the sandbox dir itself
        // keeps host users out).
        await chmod(p.volumes, 0o711);
      }
      const volumeIdmap = volumes.length
        ? idmappedMountArgv(
            this.helper(),
            imageRange(this.idLayout),
            spec.idRange,
            volumes.map((v) => v.source),
            this.volumeMountPoints(spec, p),
            { writable: true },
          )
        : [];
      const drives = spec.rootfs.drives ?? [];
      const driveDirs = this.drivePathsOf(spec, p);
      await prepareDriveDirs(p.dir, p.upper, drives, driveDirs, spec.idRange.hostStart);
      // Drive layers: read-only idmapped views, like the root's.
      const driveIdmap = driveDirs.length
        ? idmappedMountArgv(
            this.helper(),
            imageRange(this.idLayout),
            spec.idRange,
            drives.flatMap((d) => d.layers),
            driveDirs.flatMap((d) => d.views),
          )
        : [];
      // The root's layer views leave the host's mount table once the overlay holds them: each mount left
      // there is copied by every later `runc run` (docs/runtime.md "Mounts and density").
      await mountSandbox(
        this.helper(),
        spec.netnsPath,
        p.fstab,
        fstab.cwd,
        [...driveIdmap, ...volumeIdmap, ...idmap],
        this.lowerMountPoints(spec, p),
      );
      await assertDriveSources(drives, driveDirs);
    }
    if (!this.seccomp) throw new RuntimeError('Internal', 'ContainerDriver.init() has not run');
    const config = buildOciConfig({
      hostname: spec.hostname,
      rootfsDir: p.rootfs,
      uidMapHostStart: spec.idRange.hostStart,
      uidMapSize: spec.idRange.size,
      seccomp: this.seccomp,
      capabilities: this.capabilities,
      noNewPrivileges: this.opts.noNewPrivileges ?? false,
      env: spec.initEnv ?? {},
      toolsDir: tools.dir,
      sysfsDir: p.sys,
      netnsPath: spec.netnsPath,
      cgroupsPath: this.cg().cgroupsPath(spec.id),
      resources: spec.resources,
      swapAccounting: this.swapAccounting,
      criuConfigPath: this.opts.criuPath ? this.criuConfigPath : null,
      nofileLimit: this.nofile,
      volumeMounts: (spec.volumes ?? []).map((v, i) => ({
        source: join(p.volumes, String(i)),
        destination: v.destination,
      })),
      driveMounts: this.drivePathsOf(spec, p).map((d, n) => ({
        source: d.source,
        destination: (spec.rootfs.drives?.[n] as DriveSpec).mountPath,
        readOnly: (spec.rootfs.drives?.[n] as DriveSpec).readOnly,
      })),
    });
    await writeFile(p.config, JSON.stringify(config));
    await writeFile(join(p.bundle, 'tools-version'), tools.version);
  }

  /** Fail closed: a sandbox whose init is not under its seccomp filter is not handed out. */
  private async assertFiltered(
    id: string,
    pid: number,
    kind: 'StartFailed' | 'RestoreFailed',
  ): Promise<void> {
    const mode = await seccompMode(pid);
    if (mode !== 2) {
      throw new RuntimeError(kind, `sandbox ${id}: its init runs with seccomp mode ${mode}, not 2 (filter)`);
    }
  }

  private async readPid(p: SandboxPaths): Promise<number> {
    return pidOf(await readFile(p.pidFile, 'utf8'), p.pidFile);
  }

  async create(spec: SandboxSpec, opts: CreateOptions): Promise<ContainerSandboxHandle> {
    validateSpec(spec);
    const range = assertSandboxRange(this.idLayout, spec.idRange, `sandbox ${spec.id}`);
    return this.lock.serialize(spec.id, async () => {
      await this.checkTools(opts.tools);
      await this.checkLowerDirs(spec);
      if (opts.disk !== undefined) assertHostPath('diskSource', opts.disk);
      const p = this.paths(spec.id);
      if ((await exists(p.dir)) || (await exists(this.runcStateDir(spec.id)))) {
        throw new RuntimeError('AlreadyExists', `sandbox ${spec.id} already exists`);
      }
      try {
        await phase('rt-disk', async () => {
          const spare = opts.disk ? null : this.spares?.take();
          if (spare) {
            await rename(spare, p.dir);
            await this.ownDirs(p, range);
          } else {
            if (opts.disk) {
              await this.cloneDisk(opts.disk, p);
              await this.adoptDisk(p, range);
            } else await this.cow.createDir(p.dir);
            await this.prepareDirs(p, range.hostStart);
          }
          await writeBootId(p.upper, spec.rootfs.layers, spec.idRange.hostStart, (id) =>
            this.viewOfLayerId(id, spec.idRange),
          );
        });
        await phase('rt-mount', () => this.mountAndConfigure(spec, p, opts.tools));
        await opts.startAfter;
        await phase('rt-runc', () => this.runc.run(spec.id, p.bundle, p.pidFile, p.runcLog));
        const handle = { id: spec.id, pid: await this.readPid(p), sandboxDir: p.dir, upperDir: p.upper };
        this.settleSoon(spec, p, handle.pid);
        await this.assertFiltered(spec.id, handle.pid, 'StartFailed');
        this.refillDirs(opts.disk);
        return handle;
      } catch (e) {
        this.refillDirs(opts.disk);
        await this.teardown(spec.id).catch((err) =>
          this.log.warn({ err: describe(err), id: spec.id }, 'cleanup after failed create left something'),
        );
        if (e instanceof RuntimeError) throw e;
        throw new RuntimeError('StartFailed', `sandbox ${spec.id} did not start: ${describe(e)}`, {
          cause: e,
        });
      }
    });
  }

  private async cloneDisk(source: string, p: SandboxPaths): Promise<void> {
    const copy = this.copies?.take(source);
    if (copy) return rename(copy, p.dir);
    await this.copyDisk(source, p.dir);
  }

  /** A sandbox dir at `dir` holding a copy-on-write copy of the saved disk `source`. */
  private async copyDisk(source: string, dir: string): Promise<void> {
    if (!(await exists(join(source, 'upper')))) {
      throw new RuntimeError('InvalidSpec', `disk source ${source} has no upper/ (not made by captureDisk)`);
    }
    await this.cow.cloneDir(source, dir);
    // Only upper/ carries the disk; anything else a snapshot brought along is stale.
    for (const name of await readdir(dir)) {
      if (name !== 'upper') await rm(join(dir, name), { recursive: true, force: true });
    }
  }

  /** After a create, in the background: the spare dirs, or the copies of the disk it started on. */
  private refillDirs(disk: DiskRef | undefined): void {
    if (disk === undefined) this.spares?.fill();
    else this.copies?.refill(disk);
  }

  /**
   * A copy made ahead: like a spare dir, it belongs to the image range (which no sandbox runs as) until a
   * restore takes it, not to the range the disk was written under (released, and maybe another sandbox's now).
   */
  private async copyDiskAside(source: string, dir: string): Promise<void> {
    await this.copyDisk(source, dir);
    await chown(dir, 0, imageRange(this.idLayout).hostStart);
    await chmod(dir, SANDBOX_DIR_MODE);
  }

  keepDiskCopies(disk: DiskRef, count: number): void {
    assertHostPath('snapshot path', disk);
    this.copies?.keep(disk, count);
  }

  async dropDiskCopies(disk: DiskRef): Promise<void> {
    await this.copies?.drop(disk);
  }

  async destroy(id: string): Promise<void> {
    assertSandboxId(id);
    return this.lock.serialize(id, () => this.teardown(id));
  }

  /** Removes every trace of a sandbox: container, processes, cgroups, mounts, dir. Idempotent. */
  private async teardown(id: string): Promise<void> {
    const p = this.paths(id);
    await stopLazyPages(this.criuWorkDir(id, 'restore'));
    await this.runc.forceDelete(id);
    await this.cg().remove(id);
    await unmountTree(p.dir);
    if (this.trash) await this.trash.discard(p.dir);
    else await this.cow.removeDir(p.dir);
    await rm(join(this.opts.runtimePath, 'criu-work', id), { recursive: true, force: true });
  }

  async rename(id: string, hostname: string): Promise<void> {
    assertSandboxId(id);
    if (!/^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(hostname)) {
      throw new RuntimeError('InvalidSpec', `hostname "${hostname}" is not an RFC 1123 label`);
    }
    return this.lock.serialize(id, async () => {
      const p = this.paths(id);
      // Synchronous reads of two small files: see rewriteHostnameFiles.
      const pid = pidOf(readFileSync(p.pidFile, 'utf8'), p.pidFile);
      const config = JSON.parse(readFileSync(p.config, 'utf8')) as OciConfigView;
      await phase('name-files', async () =>
        rewriteHostnameFiles(p.upper, hostname, rangeOfConfig(config).hostStart),
      );
      await phase('name-uts', () => this.hostnames().set(pid, hostname));
    });
  }

  /** The long-lived hostname helper (started with the first rename). */
  private hostnames(): HostnameSetter {
    this.hostnameSetter ??= new HostnameSetter([this.helper(), 'hostnames']);
    return this.hostnameSetter;
  }

  async freeze(id: string): Promise<void> {
    assertSandboxId(id);
    return this.lock.serialize(id, () => this.cg().freeze(id));
  }

  async thaw(id: string): Promise<void> {
    assertSandboxId(id);
    return this.lock.serialize(id, () => this.cg().thaw(id));
  }

  private criuWorkDir(id: string, op: string): string {
    return join(this.opts.runtimePath, 'criu-work', id, op);
  }

  private requireCriu(what: 'checkpoint' | 'restore'): void {
    if (!this.opts.criuPath) {
      throw new RuntimeError(
        what === 'checkpoint' ? 'CheckpointFailed' : 'RestoreFailed',
        `${what} needs CRIU: runtime.criu_path is not set`,
      );
    }
  }

  /**
   * For a checkpoint its caller syncs at once: its images are written back while CRIU writes them. Not for a
   * sandbox of less than WRITE_BACK_MIN_BYTES: its sync is short anyway, and the helper's spawn costs ≈ 4 ms.
   */
  private async startWriteBack(
    id: string,
    imagesDir: string,
    opts: CheckpointOptions,
  ): Promise<WriteBack | undefined> {
    if (!opts.writeBack || !this.writeBackHelper) return undefined;
    const usage = await this.cg()
      .memoryUsageBytes(id)
      .catch(() => Infinity);
    if (usage < WRITE_BACK_MIN_BYTES) return undefined;
    return startWriteBack(this.writeBackHelper, imagesDir, (err) =>
      this.log.warn(
        { id, err: describe(err) },
        'write-back of checkpoint images failed; the sync does all of it',
      ),
    );
  }

  async checkpoint(id: string, imagesDir: string, opts: CheckpointOptions = {}): Promise<CheckpointResult> {
    assertSandboxId(id);
    assertHostPath('imagesDir', imagesDir);
    if (opts.diskDest !== undefined) assertHostPath('upperSnapshotDest', opts.diskDest);
    this.requireCriu('checkpoint');
    return this.lock.serialize(id, async () => {
      const p = this.paths(id);
      // runc itself refuses a stopped container; its state dir tells whether there is one at all.
      if (!(await exists(this.runcStateDir(id))) || !(await this.cg().exists(id))) {
        throw new RuntimeError('NotFound', `sandbox ${id} is not running`);
      }
      if (await exists(imagesDir))
        throw new RuntimeError('AlreadyExists', `checkpoint dir ${imagesDir} already exists`);
      if (opts.diskDest && (await exists(opts.diskDest))) {
        throw new RuntimeError('AlreadyExists', `snapshot dir ${opts.diskDest} already exists`);
      }
      const config = JSON.parse(await readFile(p.config, 'utf8')) as OciConfigView;
      const netnsPath = config.linux.namespaces.find((n) => n.type === 'network')?.path;
      if (!netnsPath) throw new RuntimeError('Internal', `sandbox ${id} has no netns path in its config`);
      try {
        await waitLazyPages(this.criuWorkDir(id, 'restore'), LAZY_SETTLE_TIMEOUT_MS);
      } catch (e) {
        throw new RuntimeError('CheckpointFailed', describe(e), { cause: e });
      }
      const work = this.criuWorkDir(id, 'dump');
      await rm(work, { recursive: true, force: true });
      await mkdir(work, { recursive: true });
      // CRIU reads some images from inside the restored user namespace through its open dir fd: the dir
      // itself must be searchable by the sandbox uid range (its parents need not be). A durable checkpoint's
      // is a subvolume where it can be, so that it alone is made durable (`commit` below).
      const makeImagesDir = async (): Promise<boolean> => {
        await mkdir(dirname(imagesDir), { recursive: true });
        let own = false;
        if (opts.durable) own = await this.cow.durableDir(imagesDir);
        else await mkdir(imagesDir);
        await chmod(imagesDir, 0o711);
        return own;
      };
      let ownSubvolume = await makeImagesDir();
      const wasFrozen = await this.cg().isFrozen(id);
      // Freeze first: CRIU leaves an already frozen cgroup frozen after a --leave-running dump, so the
      // disk can be captured at exactly the instant the memory was.
      if (!wasFrozen) await this.cg().freeze(id);
      const started = process.hrtime.bigint();
      // Frozen, the disk cannot change while CRIU dumps: its snapshot is taken at the same time, not after.
      const diskSnapshot = opts.diskDest
        ? this.snapshotPaths(p, opts.diskDest).then(
            () => undefined,
            (err: unknown) => err,
          )
        : Promise.resolve(undefined);
      for (let attempt = 1; ; attempt++) {
        try {
          const writeBack = await this.startWriteBack(id, imagesDir, opts);
          try {
            await phase('rt-criu', () =>
              this.runc.checkpoint(id, netnsPath, imagesDir, work, opts.leaveRunning ?? false, p.runcLog),
            );
          } finally {
            if (writeBack) await phase('rt-writeback', () => writeBack.stop());
          }
          break;
        } catch (e) {
          const criu = await criuLogErrors(join(work, 'dump.log'));
          // A failed dump leaves the sandbox as it was (CRIU lets go of every task), so it can be retried.
          if (attempt < MAX_DUMP_ATTEMPTS && TRANSIENT_DUMP_ERROR_RE.test(criu)) {
            this.log.warn({ id, attempt, criu }, 'CRIU dump hit a transient error; retrying');
            await rm(imagesDir, { recursive: true, force: true });
            ownSubvolume = await makeImagesDir();
            continue;
          }
          await rm(imagesDir, { recursive: true, force: true });
          if (!(await diskSnapshot) && opts.diskDest) await this.cow.removeDir(opts.diskDest).catch(() => {});
          if (!wasFrozen)
            await this.cg()
              .thaw(id)
              .catch(() => {});
          throw new RuntimeError(
            'CheckpointFailed',
            `checkpoint of ${id} failed: ${criu || describe(e)} (log: ${join(work, 'dump.log')})`,
            { cause: e },
          );
        }
      }
      const dumpMs = Number(process.hrtime.bigint() - started) / 1e6;
      makeImagesReadable(imagesDir);
      const snapshotError = await phase('rt-disk', () => diskSnapshot);
      if (opts.leaveRunning && !wasFrozen) await this.cg().thaw(id);
      if (snapshotError) {
        await rm(imagesDir, { recursive: true, force: true });
        throw snapshotError;
      }
      const meta: CheckpointMeta = {
        version: 1,
        virtualizationMode: 'container',
        sourceId: id,
        hostname: config.hostname,
        toolsVersion: await this.toolsVersionOf(p),
        uidMapHostStart: rangeOfConfig(config).hostStart,
        uidMapSize: rangeOfConfig(config).size,
        lowerDirs: await this.lowerDirsOf(id),
        criuVersion: this.criuVersionValue,
        createdAt: new Date().toISOString(),
      };
      await writeFile(join(imagesDir, CHECKPOINT_META_FILE), JSON.stringify(meta, null, 2));
      if (ownSubvolume) {
        try {
          await phase('rt-commit', () => this.cow.commit(imagesDir));
        } catch (e) {
          // The caller then syncs the filesystem, as where there is no subvolume.
          ownSubvolume = false;
          this.log.warn(
            { id, err: describe(e) },
            'could not commit the checkpoint on its own; syncing instead',
          );
        }
      }
      if (!opts.leaveRunning) {
        // The processes are gone (runc has dropped the container); release the cgroups. The dir (the
        // disk) stays, and so do its two mounts: a restore in place into the same netns reuses them.
        await this.runc.forceDelete(id);
        await this.cg().remove(id);
      }
      return {
        memory: imagesDir,
        dumpMs,
        imageBytes: dirBytes(imagesDir),
        // A disk snapshot is durable once taken (a btrfs snapshot is a commit); a copy is not.
        ...(opts.durable
          ? { durable: ownSubvolume && (!opts.diskDest || (await this.cow.isSubvolume(opts.diskDest))) }
          : {}),
      };
    });
  }

  private async toolsVersionOf(p: SandboxPaths): Promise<string> {
    try {
      return (await readFile(join(p.bundle, 'tools-version'), 'utf8')).trim();
    } catch {
      return '';
    }
  }

  /** The range a sandbox runs in, as its bundle says. */
  private async rangeOf(p: SandboxPaths): Promise<IdRange> {
    return rangeOfConfig(JSON.parse(await readFile(p.config, 'utf8')) as OciConfigView);
  }

  private async lowerDirsOf(id: string): Promise<string[]> {
    try {
      const rec = JSON.parse(await readFile(this.paths(id).layers, 'utf8')) as { lowerDirs: string[] };
      return rec.lowerDirs;
    } catch {
      // A sandbox started before idmapped layers: its overlay names the layer dirs themselves.
    }
    const root = this.paths(id).rootfs;
    const m = (await readMounts()).find((x) => x.mountPoint === root && x.fsType === 'overlay');
    const lower = m?.superOptions.find((o) => o.startsWith('lowerdir='));
    return lower ? lower.slice('lowerdir='.length).split(':').reverse() : [];
  }

  async restore(spec: SandboxSpec, imagesDir: string, opts: RestoreOptions): Promise<ContainerSandboxHandle> {
    validateSpec(spec);
    const range = assertSandboxRange(this.idLayout, spec.idRange, `sandbox ${spec.id}`);
    assertHostPath('imagesDir', imagesDir);
    if (opts.disk !== undefined) assertHostPath('diskSource', opts.disk);
    this.requireCriu('restore');
    return this.lock.serialize(spec.id, async () => {
      await this.checkTools(opts.tools);
      await this.checkLowerDirs(spec);
      const meta = await this.readCheckpointMeta(imagesDir);
      if (meta.toolsVersion && meta.toolsVersion !== opts.tools.version) {
        throw new RuntimeError(
          'RestoreFailed',
          `checkpoint ${imagesDir} was taken with tools ${meta.toolsVersion}, not ${opts.tools.version}: restore needs the same tools dir`,
        );
      }
      if (meta.uidMapSize !== range.size) {
        throw new RuntimeError(
          'RestoreFailed',
          `checkpoint ${imagesDir} maps ${meta.uidMapSize} uids, this node's sandboxes ${range.size} (runtime.uid_map_size)`,
        );
      }
      const p = this.paths(spec.id);
      const state = (await exists(this.runcStateDir(spec.id))) ? await this.runc.state(spec.id) : null;
      if (state && state.status !== 'stopped') {
        throw new RuntimeError(
          'AlreadyExists',
          `sandbox ${spec.id} is ${state.status}; destroy it before restoring`,
        );
      }
      const inPlace = opts.disk === undefined;
      if (inPlace) {
        if (!(await exists(p.upper))) {
          throw new RuntimeError(
            'RestoreFailed',
            `sandbox ${spec.id} has no disk to restore on (give diskSource)`,
          );
        }
        if (state) await this.runc.forceDelete(spec.id);
        await this.cg().remove(spec.id);
      } else if (await exists(p.dir)) {
        throw new RuntimeError('AlreadyExists', `sandbox ${spec.id} already exists`);
      }
      let nsImages: string | undefined;
      try {
        const reuseMounts = inPlace && (await this.mountsReusable(spec, p));
        await phase('rt-disk', async () => {
          if (inPlace && !reuseMounts) await unmountTree(p.dir);
          // In place, the sandbox dir kept its limit: lifted while the host writes into it (see create).
          if (inPlace) await this.cow.unlimitDir(p.dir);
          if (!inPlace) await this.cloneDisk(opts.disk as string, p);
          if (!reuseMounts) {
            await this.adoptDisk(p, range);
            await this.prepareDirs(p, range.hostStart);
          }
        });
        // Dumped under another range (fork, snapshot or template launch): the restored user namespace
        // must map to this sandbox's range instead.
        if (meta.uidMapHostStart !== range.hostStart) {
          const from = { hostStart: meta.uidMapHostStart, size: meta.uidMapSize };
          nsImages = await phase('rt-userns', () =>
            imagesForRange(imagesDir, `${USERNS_VIEW_PREFIX}${spec.id}`, from, range),
          );
        }
        await phase('rt-mount', () => this.mountAndConfigure(spec, p, opts.tools, !reuseMounts));
        const work = this.criuWorkDir(spec.id, 'restore');
        await stopLazyPages(work);
        await rm(work, { recursive: true, force: true });
        await mkdir(work, { recursive: true });
        await opts.startAfter;
        try {
          await phase('rt-criu', () => this.restoreContainer(spec, p, nsImages ?? imagesDir, work));
        } catch (e) {
          const criu = await criuLogErrors(join(work, 'restore.log'));
          throw new RuntimeError(
            'RestoreFailed',
            `restore of ${spec.id} from ${imagesDir} failed: ${criu || describe(e)} (log: ${join(work, 'restore.log')})`,
            { cause: e },
          );
        }
        const pid = await this.readPid(p);
        this.settleSoon(spec, p, pid);
        await this.assertFiltered(spec.id, pid, 'RestoreFailed');
        // A dump taken from a frozen cgroup may come back frozen.
        await this.cg().thaw(spec.id);
        if (meta.hostname !== spec.hostname) {
          await phase('name-uts', () => this.hostnames().set(pid, spec.hostname));
        }
        return { id: spec.id, pid, sandboxDir: p.dir, upperDir: p.upper };
      } catch (e) {
        await this.rollbackRestore(spec.id, inPlace);
        if (e instanceof RuntimeError) throw e;
        throw new RuntimeError('RestoreFailed', `restore of ${spec.id} failed: ${describe(e)}`, { cause: e });
      } finally {
        if (nsImages) await rm(nsImages, { recursive: true, force: true });
        if (!inPlace) this.copies?.refill(opts.disk as string);
      }
    });
  }

  /**
   * `runc restore`, lazily when the checkpoint holds more pages than runtime.lazy_restore_min_mib: then a
   * `criu lazy-pages` daemon serves the memory and keeps fetching it after the sandbox runs. A lazy restore
   * that fails is logged and done again eagerly.
   */
  private async restoreContainer(
    spec: SandboxSpec,
    p: SandboxPaths,
    images: string,
    work: string,
  ): Promise<void> {
    const restore = (lazy: boolean) =>
      this.runc.restore(spec.id, p.bundle, spec.netnsPath, images, work, p.pidFile, p.runcLog, lazy);
    if (this.lazyMinBytes > 0 && (await checkpointPageBytes(images)) > this.lazyMinBytes) {
      try {
        await startLazyPages(this.opts.criuPath as string, images, work);
        await restore(true);
        return;
      } catch (e) {
        const criu = await criuLogErrors(join(work, 'restore.log'));
        this.log.warn(
          { id: spec.id, err: criu || describe(e), log: join(work, 'restore.log') },
          'lazy restore failed; restoring eagerly',
        );
        await stopLazyPages(work);
        await this.runc.forceDelete(spec.id);
        await this.cg().remove(spec.id);
        await rm(work, { recursive: true, force: true });
        await mkdir(work, { recursive: true });
      }
    }
    await restore(false);
  }

  /** A failed in-place restore keeps the disk (the sandbox stays restorable); a failed fork leaves nothing. */
  private async rollbackRestore(id: string, inPlace: boolean): Promise<void> {
    try {
      await stopLazyPages(this.criuWorkDir(id, 'restore'));
      if (!inPlace) return await this.teardown(id);
      await this.runc.forceDelete(id);
      await this.cg().remove(id);
      await unmountTree(this.paths(id).dir);
    } catch (err) {
      this.log.warn({ err: describe(err), id }, 'cleanup after failed restore left something');
    }
  }

  private async readCheckpointMeta(imagesDir: string): Promise<CheckpointMeta> {
    let text: string;
    try {
      text = await readFile(join(imagesDir, CHECKPOINT_META_FILE), 'utf8');
    } catch {
      throw new RuntimeError(
        'RestoreFailed',
        `${imagesDir} is not a complete checkpoint (no ${CHECKPOINT_META_FILE})`,
      );
    }
    const meta = JSON.parse(text) as CheckpointMeta;
    if (meta.virtualizationMode !== 'container') {
      throw new RuntimeError(
        'RestoreFailed',
        `checkpoint ${imagesDir} is for ${meta.virtualizationMode}, not container`,
      );
    }
    return meta;
  }

  async captureDisk(id: string, dest: string): Promise<DiskRef> {
    assertSandboxId(id);
    assertHostPath('snapshot dest', dest);
    return this.lock.serialize(id, async () => {
      const p = this.paths(id);
      if (!(await exists(p.upper))) throw new RuntimeError('NotFound', `sandbox ${id} has no disk`);
      if (await exists(dest)) throw new RuntimeError('AlreadyExists', `snapshot dir ${dest} already exists`);
      await this.snapshotPaths(p, dest);
      return dest;
    });
  }

  private async snapshotPaths(p: SandboxPaths, dest: string): Promise<void> {
    try {
      if (this.cow.kind === 'btrfs' && (await this.cow.isSubvolume(p.dir))) {
        const r = await run('btrfs', ['subvolume', 'snapshot', p.dir, dest], { allowFailure: true });
        if (r.code === 0) {
          // A snapshot carries its source's disk limit (a full one blocks even deletes in it); a sandbox
          // started on it gets its own limit once it runs.
          await this.cow.unlimitDir(dest);
          for (const name of await readdir(dest)) {
            if (name !== 'upper') await rm(join(dest, name), { recursive: true, force: true });
          }
          return;
        }
      }
      await mkdir(dest, { mode: 0o700 });
      await this.cow.copyTree(p.upper, join(dest, 'upper'));
    } catch (e) {
      await this.cow.removeDir(dest).catch(() => {});
      throw new RuntimeError('Internal', `snapshot of ${p.dir} to ${dest} failed: ${describe(e)}`, {
        cause: e,
      });
    }
  }

  async removeDisk(path: DiskRef): Promise<void> {
    assertHostPath('snapshot path', path);
    await this.cow.removeDir(path);
  }

  async list(): Promise<ListedSandbox[]> {
    const byId = new Map<string, ListedSandbox>();
    const entry = (id: string): ListedSandbox => {
      let e = byId.get(id);
      if (!e) {
        e = { id, status: 'absent', pid: null, hasDir: false, rootfsMounted: false, hasCgroup: false };
        byId.set(id, e);
      }
      return e;
    };
    for (const s of await this.runc.list()) {
      const e = entry(s.id);
      e.status = s.status;
      e.pid = s.pid > 0 && s.status !== 'stopped' ? s.pid : null;
    }
    for (const name of await this.sandboxDirNames()) entry(name).hasDir = true;
    for (const m of mountsUnder(await readMounts(), this.sandboxesDir)) {
      const rel = m.mountPoint.slice(this.sandboxesDir.length + 1).split('/');
      if (rel.length === 2 && rel[1] === 'rootfs' && isSandboxId(rel[0] as string))
        entry(rel[0] as string).rootfsMounted = true;
    }
    for (const id of await this.cg().listIds()) entry(id).hasCgroup = true;
    return [...byId.values()].sort((a, b) => a.id.localeCompare(b.id));
  }

  async isRunning(id: string): Promise<boolean> {
    assertSandboxId(id);
    return (await this.runc.state(id))?.status === 'running';
  }

  private async sandboxDirNames(): Promise<string[]> {
    try {
      return (await readdir(this.sandboxesDir, { withFileTypes: true }))
        .filter((e) => e.isDirectory() && isSandboxId(e.name))
        .map((e) => e.name);
    } catch {
      return [];
    }
  }

  async reconcile(keepIds: Iterable<string>): Promise<ReconcileReport> {
    const keep = new Set(keepIds);
    const report: ReconcileReport = { containers: [], mounts: [], cgroups: [], dirs: [] };
    const runcRoot = join(this.opts.runtimePath, 'runc');
    const stale = new Set<string>();
    for (const s of await this.runc.list()) if (!keep.has(s.id)) stale.add(s.id);
    // State dirs runc cannot parse any more (a crash mid-create) are not listed but still ours.
    for (const name of await readdir(runcRoot).catch(() => [] as string[]))
      if (!keep.has(name)) stale.add(name);
    for (const id of stale) {
      await this.lock.serialize(id, async () => {
        try {
          if (await this.runc.forceDelete(id)) report.containers.push(id);
        } catch (e) {
          this.log.warn({ id, err: describe(e) }, 'runc delete failed; removing its state dir');
        }
        await rm(join(runcRoot, id), { recursive: true, force: true });
      });
    }
    for (const id of await this.cg().listIds()) {
      if (keep.has(id)) continue;
      await this.lock.serialize(id, async () => {
        if (await this.cg().remove(id)) report.cgroups.push(id);
      });
    }
    const mountOwners = new Set<string>();
    for (const m of mountsUnder(await readMounts(), this.sandboxesDir)) {
      if (m.mountPoint === this.sandboxesDir) continue;
      const name = m.mountPoint.slice(this.sandboxesDir.length + 1).split('/')[0] as string;
      if (!name.startsWith('.') && !keep.has(name)) mountOwners.add(name);
    }
    for (const name of mountOwners) report.mounts.push(...(await unmountTree(join(this.sandboxesDir, name))));
    for (const e of await readdir(this.sandboxesDir, { withFileTypes: true }).catch(() => [])) {
      if (e.name.startsWith('.') || keep.has(e.name)) continue;
      await this.cow.removeDir(join(this.sandboxesDir, e.name));
      report.dirs.push(e.name);
    }
    for (const name of await readdir(join(this.opts.runtimePath, 'criu-work')).catch(() => [] as string[])) {
      if (keep.has(name)) continue;
      // A lazy restore's daemon of a sandbox that is gone (a crash between restore and kill).
      await stopLazyPages(this.criuWorkDir(name, 'restore'));
      await rm(join(this.opts.runtimePath, 'criu-work', name), { recursive: true, force: true });
    }
    return report;
  }

  async stats(id: string): Promise<SandboxStats> {
    assertSandboxId(id);
    return this.cg().stats(id);
  }
}

export { RuncError };

function pidOf(text: string, file: string): number {
  const pid = Number(text.trim());
  if (!Number.isInteger(pid) || pid <= 0) throw new RuntimeError('Internal', `bad pid file ${file}`);
  return pid;
}
