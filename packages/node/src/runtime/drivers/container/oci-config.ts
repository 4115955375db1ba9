import { DEFAULT_PATH } from '@aenv/protocol';
import type { SandboxResources } from '../../driver.js';
import { BOOT_ID_FILE } from './boot-id.js';
import type { OciSeccomp } from './seccomp.js';

/**
 * Docker's default capability set without CAP_NET_RAW: enough for package managers, sudo and useradd; no
 * admin powers. NET_RAW (raw and packet sockets: forged packets, ARP/neighbour spoofing on the sandbox's
 * link) is added only with `[runtime].cap_net_raw` (see `sandboxCapabilities`).
 */
export const DEFAULT_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_MKNOD',
  'CAP_AUDIT_WRITE',
  'CAP_SETFCAP',
] as const;

export function sandboxCapabilities(netRaw: boolean): string[] {
  return netRaw ? [...DEFAULT_CAPABILITIES, 'CAP_NET_RAW'] : [...DEFAULT_CAPABILITIES];
}

/** Kernel files that leak host information or allow host-wide actions; hidden like Docker hides them. */
export const MASKED_PATHS = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/interrupts',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/sys/devices/virtual/powercap',
  '/sys/firmware',
];

export const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/** Where the tools dir is mounted and the init that runs as the sandbox's PID 1. */
export const TOOLS_MOUNT_POINT = '/agentenv';
export const INIT_PATH = '/agentenv/bin/aenv-init';

/** runc reads this annotation and hands the file to CRIU as its configuration (network-lock skip, ...). */
export const CRIU_CONFIG_ANNOTATION = 'org.criu.config';

const CFS_PERIOD_US = 100_000;

export interface OciConfigInput {
  hostname: string;
  /** Absolute path of the mounted overlay. */
  rootfsDir: string;
  uidMapHostStart: number;
  uidMapSize: number;
  /** Required: a sandbox never starts without its filter (see seccomp.ts). */
  seccomp: OciSeccomp;
  /** The sandbox's capability set (bounding = effective = permitted). */
  capabilities: readonly string[];
  /** `[runtime].no_new_privileges`: setuid and file capabilities stop working inside (sudo, su, ping). */
  noNewPrivileges: boolean;
  env: Record<string, string>;
  toolsDir: string;
  /**
   * A sysfs instance the host mounted from inside the sandbox's netns (so /sys/class/net shows the
   * sandbox's interfaces). The container cannot mount sysfs itself: its user namespace does not own the
   * pre-created netns, and the kernel requires that.
   */
  sysfsDir: string;
  netnsPath: string;
  cgroupsPath: string;
  resources: SandboxResources;
  /** Whether the kernel accounts swap (memsw): then the limit covers RAM + swap, so nothing swaps. */
  swapAccounting: boolean;
  criuConfigPath: string | null;
  /** RLIMIT_NOFILE (soft = hard). A user namespace cannot raise the hard limit above the server's own. */
  nofileLimit: number;
  args?: string[];
  /** Host-side (idmapped) views of persistent volumes, bind-mounted at `destination` (docs/volumes.md). */
  volumeMounts?: readonly { source: string; destination: string }[];
  /** Host-side mounts of attached drives, bind-mounted at `destination` (docs/volumes.md "Attached drives"). */
  driveMounts?: readonly { source: string; destination: string; readOnly: boolean }[];
}

type Json = Record<string, unknown>;

function mount(destination: string, type: string, source: string, options: string[]): Json {
  return { destination, type, source, options };
}

/**
 * The OCI runtime config of a sandbox. Built in-process (no `runc spec` + jq) so that create costs no extra
 * process; every choice that matters for isolation is here in one place.
 */
export function buildOciConfig(input: OciConfigInput): Json {
  const { resources: r } = input;
  const memoryBytes = r.memoryMB * 1024 * 1024;
  // /dev/shm pages are charged to the sandbox's memory cgroup; half of it matches the kernel's tmpfs default.
  const shmBytes = Math.max(64, Math.floor(r.memoryMB / 2)) * 1024 * 1024;
  const env: string[] = [];
  const merged: Record<string, string> = { PATH: DEFAULT_PATH, HOME: '/root', ...input.env };
  for (const [k, v] of Object.entries(merged)) env.push(`${k}=${v}`);
  if (!input.seccomp) throw new Error('a sandbox needs a seccomp filter');
  const caps = [...input.capabilities];
  const idMap = [{ containerID: 0, hostID: input.uidMapHostStart, size: input.uidMapSize }];

  const memory: Json = { limit: memoryBytes, disableOOMKiller: false };
  if (input.swapAccounting) memory.swap = memoryBytes;

  const config: Json = {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: input.args ?? [INIT_PATH],
      env,
      cwd: '/',
      capabilities: {
        bounding: caps,
        effective: caps,
        permitted: caps,
        // Empty inheritable/ambient: a non-root user only gets capabilities through setuid/file caps (sudo).
        inheritable: [],
        ambient: [],
      },
      rlimits: [
        { type: 'RLIMIT_NOFILE', hard: input.nofileLimit, soft: input.nofileLimit },
        // No core dumps: they would write a process's memory (tokens, keys) into the sandbox disk, and cost
        // disk and time on every crash. Without CAP_SYS_RESOURCE the sandbox cannot raise the hard limit.
        { type: 'RLIMIT_CORE', hard: 0, soft: 0 },
      ],
      // Default false so setuid binaries (sudo, su) work inside; privilege stays bounded by the capability
      // set, the seccomp filter and the user namespace (see docs/security.md for the trade-off).
      noNewPrivileges: input.noNewPrivileges,
    },
    root: { path: input.rootfsDir, readonly: false },
    hostname: input.hostname,
    mounts: [
      mount('/proc', 'proc', 'proc', ['nosuid', 'noexec', 'nodev']),
      mount('/dev', 'tmpfs', 'tmpfs', ['nosuid', 'strictatime', 'mode=755', 'size=65536k']),
      mount('/dev/pts', 'devpts', 'devpts', [
        'nosuid',
        'noexec',
        'newinstance',
        'ptmxmode=0666',
        'mode=0620',
        'gid=5',
      ]),
      mount('/dev/shm', 'tmpfs', 'shm', ['nosuid', 'noexec', 'nodev', 'mode=1777', `size=${shmBytes}`]),
      mount('/dev/mqueue', 'mqueue', 'mqueue', ['nosuid', 'noexec', 'nodev']),
      mount('/sys', 'bind', input.sysfsDir, ['rbind', 'ro', 'nosuid', 'noexec', 'nodev']),
      mount(TOOLS_MOUNT_POINT, 'bind', input.toolsDir, ['rbind', 'ro', 'nosuid', 'nodev']),
      ...(input.volumeMounts ?? []).map((v) =>
        mount(v.destination, 'bind', v.source, ['rbind', 'nosuid', 'nodev']),
      ),
      ...(input.driveMounts ?? []).map((d) =>
        mount(d.destination, 'bind', d.source, ['rbind', 'nosuid', 'nodev', ...(d.readOnly ? ['ro'] : [])]),
      ),
    ],
    // The sandbox's own boot id over the host's. runc refuses spec mounts inside /proc, so a createContainer hook
    // (run by runc's init in the sandbox's namespaces, before pivot_root) binds it; a restore does not run it,
    // CRIU brings the mount back itself. See boot-id.ts.
    hooks: {
      createContainer: [
        {
          path: '/bin/mount',
          args: [
            'mount',
            '--bind',
            '-o',
            // The rootfs is mounted nosuid,nodev: a user namespace may not drop those flags on a remount.
            'ro,nosuid,nodev,noexec',
            `${input.rootfsDir}${BOOT_ID_FILE}`,
            `${input.rootfsDir}/proc/sys/kernel/random/boot_id`,
          ],
          timeout: 30,
        },
      ],
    },
    annotations: input.criuConfigPath ? { [CRIU_CONFIG_ANNOTATION]: input.criuConfigPath } : {},
    linux: {
      uidMappings: idMap,
      gidMappings: idMap,
      namespaces: [
        { type: 'pid' },
        { type: 'ipc' },
        { type: 'uts' },
        { type: 'mount' },
        { type: 'user' },
        // /proc/self/cgroup shows "/" instead of the host's cgroup path (which names the node and sandbox).
        { type: 'cgroup' },
        { type: 'network', path: input.netnsPath },
      ],
      cgroupsPath: input.cgroupsPath,
      resources: {
        // Deny all device access; runc adds the standard safe set (null, zero, full, random, urandom, tty, ptmx, pts).
        devices: [{ allow: false, access: 'rwm' }],
        memory,
        cpu: {
          quota: Math.max(1000, Math.round(r.cpuCount * CFS_PERIOD_US)),
          period: CFS_PERIOD_US,
          shares: Math.max(2, Math.round(r.cpuCount * 1024)),
        },
        pids: { limit: r.pidsLimit },
      },
      // No host devices: runc creates only its default device nodes.
      devices: [],
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
      seccomp: input.seccomp,
    },
  };
  return config;
}
