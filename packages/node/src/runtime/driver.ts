// The runtime driver boundary: the orchestrator talks to sandboxes' processes and disks only through this.
// What crosses it is neutral: the rootfs as image layers plus options only one driver reads, saved disks and
// memory as refs whose insides are the driver's, and the state a driver keeps on a record through its codec.
// The container driver (drivers/container/) implements it today; see docs/runtime.md for where a second goes.
import { DomainError, ErrorKind } from '@aenv/protocol';

export interface SandboxResources {
  /** CPU quota in whole or fractional CPUs (cfs quota = cpuCount × period). */
  cpuCount: number;
  /** Memory limit (RAM + swap together); the kernel OOM-kills inside the sandbox past it. */
  memoryMB: number;
  /** Maximum number of tasks (processes + threads) in the sandbox. */
  pidsLimit: number;
  /**
   * What the sandbox may write in total (its own disk, above the image), in MiB; writes past it fail with EDQUOT. Enforced
   * where the sandbox volume can (btrfs quota groups); undefined: no limit.
   */
  diskMB?: number;
}

/** A contiguous block of host uids (and the same gids) that a sandbox's ids 0..size-1 map to. */
export interface IdRange {
  hostStart: number;
  size: number;
}

/** The root filesystem a sandbox runs on, as it crosses the boundary. */
export interface RootfsSpec {
  /** Unpacked read-only image layer dirs, bottom layer first (as `PulledImage.layers` lists them). */
  layers: string[];
  /** Options only one driver reads; a driver refuses ones it does not know (the container driver takes none). */
  driverOptions?: Record<string, string>;
  /**
   * Image-backed drives mounted into the sandbox (AgentENV's `attachedDrives`, docs/volumes.md). Unlike volumes
   * they are part of the disk: a writable drive's changes are captured and restored with it.
   */
  drives?: DriveSpec[];
}

/** One image-backed drive as it crosses the boundary. */
export interface DriveSpec {
  /** The drive's id (`driveID`): unique in the sandbox. */
  id: string;
  /** The image the drive shows (recorded so a launch elsewhere finds its layers again). */
  image: { reference: string; manifestDigest: string };
  /** The image's unpacked read-only layer dirs, bottom layer first. */
  layers: string[];
  /** Absolute path inside the sandbox. */
  mountPath: string;
  /** Directory of the image shown at `mountPath` (relative); absent: its root. */
  subPath?: string;
  /** Read-only: the image as it is. Writable: the sandbox's changes are kept on its disk. */
  readOnly: boolean;
  /** Writable drives: what the sandbox may write on it, in MiB, added to its disk limit (`resources.diskMB`). */
  sizeMB?: number;
}

/**
 * A saved disk: a directory the driver filled (`captureDisk`, `CheckpointOptions.diskDest`) or a caller filled
 * through `diskFilesDir`. What is inside is the driver's; it lives under `captureRoot`.
 */
export type DiskRef = string;

/** Saved memory: the directory `checkpoint` filled. What is inside is the driver's. */
export type MemoryRef = string;

export interface SandboxSpec {
  /** Sandbox id: `[A-Za-z0-9][A-Za-z0-9_-]{0,63}`. Names everything the driver makes for the sandbox. */
  id: string;
  /** Hostname inside the sandbox (usually the id); RFC 1123 label, at most 63 characters. */
  hostname: string;
  rootfs: RootfsSpec;
  resources: SandboxResources;
  /** Network namespace file of the sandbox's slot (bind-mounted netns). */
  netnsPath: string;
  /** IP addresses written as `nameserver` lines into the sandbox's /etc/resolv.conf (may be empty). */
  nameservers: string[];
  /** Environment of the sandbox's init (envd reads its settings from it). */
  initEnv: Record<string, string>;
  /**
   * The sandbox's own host uid/gid range (one of the driver's sandbox ranges, see docs/security.md "uid
   * isolation"): no other live sandbox may hold it. A restore or a start on a saved disk moves what was
   * captured under another range into this one.
   */
  idRange: IdRange;
  /**
   * Persistent volumes bind-mounted read-write (nosuid, nodev) into the sandbox (docs/volumes.md). Not part of
   * the disk: captures and checkpoints leave them out, and every create or restore mounts them again.
   */
  volumes?: VolumeMountSpec[];
}

/** One volume as a sandbox mounts it. */
export interface VolumeMountSpec {
  /** The volume's directory on the host (from `VolumeDisks.create`). */
  source: string;
  /** Absolute path inside the sandbox. */
  destination: string;
}

/**
 * Where a driver keeps persistent volumes: directories on its sandbox volume with a size limit each, whose
 * files are owned on the host by `ownerRange` (every sandbox sees them through an idmapped view, so a uid a
 * sandbox user wrote reads back the same in every sandbox that mounts the volume).
 */
export interface VolumeDisks {
  /** Whether `create`'s size limit is enforced (btrfs quota groups or XFS project quotas). */
  readonly enforcesLimits: boolean;
  readonly ownerRange: IdRange;
  /** Makes the empty volume directory of `id` (a subvolume on btrfs) limited to `mb` MiB; returns its path. */
  create(id: string, mb: number): Promise<string>;
  /** The directory of volume `id` (whether or not it exists). */
  dirOf(id: string): string;
  /** Removes volume `id` and everything in it. Idempotent. */
  remove(id: string): Promise<void>;
  /** Ids of the volume directories that exist. */
  list(): Promise<string[]>;
}

/** The read-only tools directory mounted at /agentenv (portable node, envd, aenv-init). */
export interface ToolsMount {
  dir: string;
  version: string;
}

export interface CreateOptions {
  tools: ToolsMount;
  /** Start on a saved disk instead of an empty one (copied copy-on-write where the volume allows). */
  disk?: DiskRef;
  /**
   * Awaited right before the sandbox's first process starts (the sandbox's network policy being installed, so no
   * sandbox process ever runs without it). Its rejection fails the create.
   */
  startAfter?: Promise<unknown>;
}

export interface RestoreOptions {
  /** Must be the same tools version the checkpoint was taken with (processes map files from it). */
  tools: ToolsMount;
  /**
   * Disk to restore on. Omitted: the disk of `spec.id` must still exist (restore in place after a stopping
   * checkpoint). Given: the sandbox gets a fresh disk made from it (resume elsewhere, fork).
   */
  disk?: DiskRef;
  /** As CreateOptions.startAfter: awaited right before the restored processes run again. */
  startAfter?: Promise<unknown>;
}

export interface CheckpointOptions {
  /** Keep the sandbox running after the dump (snapshot, fork). Default: the sandbox stops. */
  leaveRunning?: boolean;
  /**
   * Also capture the disk at the same instant (while the processes are frozen) into this new
   * directory, as `captureDisk` would. Needed for a consistent fork of a running sandbox.
   */
  diskDest?: string;
  /**
   * The caller syncs the images as soon as this returns (a durable pause): start their write-back while they
   * are written, so that sync has little left to do. Drivers without a way to do so ignore it.
   */
  writeBack?: boolean;
  /**
   * The images (and the disk of `diskDest`) must survive a power loss once this returns, at the least cost to
   * other sandboxes: a driver that can make exactly them durable does so and says so in
   * `CheckpointResult.durable`; otherwise the caller syncs the filesystem.
   */
  durable?: boolean;
}

export interface CheckpointResult {
  memory: MemoryRef;
  /**
   * The images (every file and the dir) and the captured disk are durable already (asked for with
   * `CheckpointOptions.durable`).
   */
  durable?: boolean;
  /** Wall time of the memory dump itself. */
  dumpMs: number;
  /** Size of the memory image on disk. */
  imageBytes: number;
}

/** A sandbox whose first process is running. */
export interface SandboxHandle {
  id: string;
  /** Host PID of the sandbox's init process. */
  pid: number;
}

export type SandboxStatus = 'creating' | 'created' | 'running' | 'paused' | 'stopped' | 'absent';

export interface ListedSandbox {
  id: string;
  /** The driver's view; `absent` when only host leftovers (dir, mount, cgroup) exist. */
  status: SandboxStatus;
  pid: number | null;
  hasDir: boolean;
  rootfsMounted: boolean;
  hasCgroup: boolean;
}

export interface SandboxStats {
  /** Memory charged to the sandbox's cgroup (RSS + page cache + kernel memory), bytes. */
  memoryUsageBytes: number;
  /** Anonymous memory (RSS) of the sandbox, bytes. */
  memoryRssBytes: number;
  memoryLimitBytes: number;
  /** Times the kernel OOM-killed a process of this sandbox. */
  oomKills: number;
  /** CPU time consumed by the sandbox since it started, nanoseconds. */
  cpuUsageNs: number;
  pids: number;
  frozen: boolean;
}

/** What `reconcile` removed, for logs. */
export interface ReconcileReport {
  containers: string[];
  mounts: string[];
  cgroups: string[];
  dirs: string[];
}

export interface RuntimeInfo {
  /** e.g. "container". Recorded with snapshots: restore only into the same mode. */
  virtualizationMode: string;
  /** Version of the tools mounted at /agentenv (node + envd + init). */
  toolsVersion: string;
}

export interface RuntimeDriver {
  /** e.g. "container". Checkpoints restore only into the same mode. */
  readonly virtualizationMode: string;
  /**
   * A directory on the sandbox volume for callers' saved memory and disks (same filesystem, so `captureDisk`
   * and `CreateOptions.disk` stay copy-on-write). `reconcile` never touches it.
   */
  readonly captureRoot: string;
  /** Encodes and decodes what this driver keeps on a sandbox record (and in captures) about its rootfs. */
  readonly recordCodec: DriverRecordCodec;
  /**
   * Media types of this driver's saved memory in a snapshot repository: in captures (snapshots, templates) and
   * in shared copies of paused sandboxes. Recorded with each artifact; only this driver restores them.
   */
  readonly memoryMediaTypes: { capture: string; paused: string };
  /** Checks host prerequisites and prepares storage; idempotent, safe to call on every start. */
  init(): Promise<void>;
  /** Makes the sandbox's disk and starts its init process. On failure nothing of it is left behind. */
  create(spec: SandboxSpec, opts: CreateOptions): Promise<SandboxHandle>;
  /**
   * Resolves once the limits set after start (the disk limit `resources.diskMB`, per-user limits of the
   * sandbox's user namespace) of the sandbox last created or restored are in place; rejects if they could
   * not be set. `create`/`restore` return before it is: await both before handing the
   * sandbox out (other operations on the sandbox wait for it by themselves).
   */
  diskLimitSet(id: string): Promise<void>;
  /**
   * Gives a running sandbox another hostname (kernel UTS name, /etc/hostname, /etc/hosts): a pre-started
   * sandbox taken from a warm pool becomes the sandbox it is handed to.
   */
  rename(id: string, hostname: string): Promise<void>;
  /** Stops every process of the sandbox and removes everything the driver made for it. Idempotent. */
  destroy(id: string): Promise<void>;
  /** Stops scheduling the sandbox's processes at once (memory stays). */
  freeze(id: string): Promise<void>;
  thaw(id: string): Promise<void>;
  /** Dumps the sandbox's process tree (memory, PIDs, sockets) into `dest` (created; must not exist). */
  checkpoint(id: string, dest: string, opts?: CheckpointOptions): Promise<CheckpointResult>;
  /** Brings saved memory back to life as `spec.id`, in `spec.netnsPath`. Restoring under a new id is a fork. */
  restore(spec: SandboxSpec, memory: MemoryRef, opts: RestoreOptions): Promise<SandboxHandle>;
  /** Copy-on-write copy of the sandbox's disk into `dest` (must not exist). Freeze first. */
  captureDisk(id: string, dest: string): Promise<DiskRef>;
  /** Removes a saved disk (it may need more than `rm`). Idempotent. */
  removeDisk(disk: DiskRef): Promise<void>;
  /**
   * Keeps `count` copies of a saved disk that many sandboxes start on made ahead of time, so a `restore` or
   * `create` on it need not copy it then (`dropDiskCopies` before the disk is removed).
   */
  keepDiskCopies(disk: DiskRef, count: number): void;
  /** Stops keeping copies of `disk` and removes the ready ones. */
  dropDiskCopies(disk: DiskRef): Promise<void>;
  /**
   * The directory holding the files of a saved disk, as a disk archive (`DISK_MEDIA_TYPE`) packs them: what
   * the sandbox changed above its image. Filling it in a new `disk` makes a disk `create` can start on.
   */
  diskFilesDir(disk: DiskRef): string;
  list(): Promise<ListedSandbox[]>;
  /** Whether the sandbox's container runs: one look at it, where `list` looks at every sandbox on the host. */
  isRunning(id: string): Promise<boolean>;
  /** Deletes every sandbox resource on the host whose id is not in `keepIds` (startup after a crash). */
  reconcile(keepIds: Iterable<string>): Promise<ReconcileReport>;
  stats(id: string): Promise<SandboxStats>;
  /** Waits for the driver's background work to finish (graceful shutdown, tests). Sandboxes keep running. */
  close(): Promise<void>;
}

/**
 * The driver's part of what a sandbox record (`SandboxRecord.backend`) and a capture (`committed.extra`) hold:
 * the rootfs, under the driver's own keys. `decode` takes the whole stored object and reads only those.
 */
export interface DriverRecordCodec {
  encode(rootfs: RootfsSpec): Record<string, unknown>;
  /** Throws a RuntimeError (`InvalidState`) naming what is missing or malformed. */
  decode(stored: Record<string, unknown>): RootfsSpec;
}

export type RuntimeErrorKind =
  | 'InvalidSpec'
  | 'InvalidState'
  | 'NotFound'
  | 'AlreadyExists'
  | 'HostSetup'
  | 'StartFailed'
  | 'CheckpointFailed'
  | 'RestoreFailed'
  | 'Internal';

/**
 * Every failure the driver reports, with the driver's own name for it as `reason`. To a caller each is the
 * node's internal failure (the driver only runs what the node asked for), so its message, which may name host
 * paths, stays in the log (docs/errors.md).
 */
export class RuntimeError extends DomainError {
  declare readonly reason: RuntimeErrorKind;
  constructor(reason: RuntimeErrorKind, message: string, options?: { cause?: unknown }) {
    super(ErrorKind.Internal, message, {
      reason,
      ...(options?.cause === undefined ? {} : { cause: options.cause }),
    });
    this.name = 'RuntimeError';
  }
}

export function isRuntimeError(err: unknown, reason?: RuntimeErrorKind): err is RuntimeError {
  return err instanceof RuntimeError && (reason === undefined || err.reason === reason);
}
