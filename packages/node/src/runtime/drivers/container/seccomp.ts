import { readFile } from 'node:fs/promises';
import { release } from 'node:os';
import { RuntimeError } from '../../driver.js';

// OCI runtime-spec seccomp shapes (the subset runc reads).
export interface OciSeccompArg {
  index: number;
  value: number;
  valueTwo?: number;
  op: string;
}
export interface OciSeccompSyscall {
  names: string[];
  action: string;
  errnoRet?: number;
  args?: OciSeccompArg[];
}
export interface OciSeccomp {
  defaultAction: string;
  defaultErrnoRet?: number;
  architectures: string[];
  syscalls: OciSeccompSyscall[];
}

/** A profile in the Moby / containers-common JSON format (`/usr/share/containers/seccomp.json`). */
interface MobyProfile {
  defaultAction: string;
  defaultErrnoRet?: number;
  archMap?: { architecture: string; subArchitectures?: string[] }[];
  syscalls: {
    names?: string[];
    name?: string;
    action: string;
    errnoRet?: number;
    args?: OciSeccompArg[] | null;
    includes?: { arches?: string[]; caps?: string[]; minKernel?: string };
    excludes?: { arches?: string[]; caps?: string[] };
  }[];
}

export interface SeccompPolicy {
  /**
   * `[runtime].nested_containers`: user namespaces, mounts inside them and setns are allowed, so that
   * container tools (podman, bwrap, rootless buildah) run inside a sandbox. Off by default.
   */
  nestedContainers: boolean;
}

const EPERM = 1;
const ENOSYS = 38;
const AF_VSOCK = 40;
// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
const CLONE_NAMESPACE_FLAGS = 0x7e020000;

/** Moby arch names and the libseccomp architectures a native process of that arch may use. */
const ARCHES: Record<string, { moby: string[]; scmp: string[]; allow: string[] }> = {
  x64: {
    moby: ['amd64', 'x86_64'],
    scmp: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    allow: ['arch_prctl', 'modify_ldt'],
  },
  arm64: {
    moby: ['arm64', 'aarch64'],
    scmp: ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'],
    allow: [
      'arm_fadvise64_64',
      'arm_sync_file_range',
      'sync_file_range2',
      'breakpoint',
      'cacheflush',
      'set_tls',
    ],
  },
};

/**
 * What an unprivileged Linux process uses: the built-in profile allows these and refuses everything else
 * (EPERM), the way Docker's default profile does for a container with Docker's default capabilities.
 * Names libseccomp does not know on this host are skipped by runc, and runc answers syscalls newer than
 * any listed with ENOSYS, so libc falls back.
 */
// prettier-ignore
const ALLOWED = [
  '_llseek', '_newselect', 'accept', 'accept4', 'access', 'adjtimex', 'alarm', 'bind', 'brk', 'cachestat',
  'capget', 'capset', 'chdir', 'chmod', 'chown', 'chown32', 'chroot', 'clock_adjtime', 'clock_adjtime64',
  'clock_getres', 'clock_getres_time64', 'clock_gettime', 'clock_gettime64', 'clock_nanosleep',
  'clock_nanosleep_time64', 'close', 'close_range', 'connect', 'copy_file_range', 'creat', 'dup', 'dup2',
  'dup3', 'epoll_create', 'epoll_create1', 'epoll_ctl', 'epoll_ctl_old', 'epoll_pwait', 'epoll_pwait2',
  'epoll_wait', 'epoll_wait_old', 'eventfd', 'eventfd2', 'execve', 'execveat', 'exit', 'exit_group',
  'faccessat', 'faccessat2', 'fadvise64', 'fadvise64_64', 'fallocate', 'fanotify_mark', 'fchdir', 'fchmod',
  'fchmodat', 'fchmodat2', 'fchown', 'fchown32', 'fchownat', 'fcntl', 'fcntl64', 'fdatasync', 'fgetxattr',
  'file_getattr', 'file_setattr', 'flistxattr', 'flock', 'fork', 'fremovexattr', 'fsetxattr', 'fstat',
  'fstat64', 'fstatat64', 'fstatfs', 'fstatfs64', 'fsync', 'ftruncate', 'ftruncate64', 'futex',
  'futex_requeue', 'futex_time64', 'futex_wait', 'futex_waitv', 'futex_wake', 'futimesat', 'get_robust_list',
  'get_thread_area', 'getcpu', 'getcwd', 'getdents', 'getdents64', 'getegid', 'getegid32', 'geteuid',
  'geteuid32', 'getgid', 'getgid32', 'getgroups', 'getgroups32', 'getitimer', 'getpeername', 'getpgid',
  'getpgrp', 'getpid', 'getppid', 'getpriority', 'getrandom', 'getresgid', 'getresgid32', 'getresuid',
  'getresuid32', 'getrlimit', 'getrusage', 'getsid', 'getsockname', 'getsockopt', 'gettid', 'gettimeofday',
  'getuid', 'getuid32', 'getxattr', 'getxattrat', 'inotify_add_watch', 'inotify_init', 'inotify_init1',
  'inotify_rm_watch', 'io_cancel', 'io_destroy', 'io_getevents', 'io_pgetevents', 'io_pgetevents_time64',
  'io_setup', 'io_submit', 'ioctl', 'ioprio_get', 'ioprio_set', 'ipc', 'kill', 'landlock_add_rule',
  'landlock_create_ruleset', 'landlock_restrict_self', 'lchown', 'lchown32', 'lgetxattr', 'link', 'linkat',
  'listen', 'listxattr', 'listxattrat', 'llistxattr', 'lremovexattr', 'lseek', 'lsetxattr', 'lstat',
  'lstat64', 'madvise', 'map_shadow_stack', 'membarrier', 'memfd_create', 'memfd_secret', 'mincore', 'mkdir',
  'mkdirat', 'mknod', 'mknodat', 'mlock', 'mlock2', 'mlockall', 'mmap', 'mmap2', 'mprotect', 'mq_getsetattr',
  'mq_notify', 'mq_open', 'mq_timedreceive', 'mq_timedreceive_time64', 'mq_timedsend', 'mq_timedsend_time64',
  'mq_unlink', 'mremap', 'mseal', 'msgctl', 'msgget', 'msgrcv', 'msgsnd', 'msync', 'munlock', 'munlockall',
  'munmap', 'name_to_handle_at', 'nanosleep', 'newfstatat', 'open', 'openat', 'openat2', 'pause',
  'pidfd_open', 'pidfd_send_signal', 'pipe', 'pipe2', 'pkey_alloc', 'pkey_free', 'pkey_mprotect', 'poll',
  'ppoll', 'ppoll_time64', 'prctl', 'pread64', 'preadv', 'preadv2', 'prlimit64', 'process_mrelease',
  'process_vm_readv', 'process_vm_writev', 'pselect6', 'pselect6_time64', 'ptrace', 'pwrite64', 'pwritev',
  'pwritev2', 'read', 'readahead', 'readlink', 'readlinkat', 'readv', 'recv', 'recvfrom', 'recvmmsg',
  'recvmmsg_time64', 'recvmsg', 'remap_file_pages', 'removexattr', 'removexattrat', 'rename', 'renameat',
  'renameat2', 'restart_syscall', 'rmdir', 'rseq', 'rt_sigaction', 'rt_sigpending', 'rt_sigprocmask',
  'rt_sigqueueinfo', 'rt_sigreturn', 'rt_sigsuspend', 'rt_sigtimedwait', 'rt_sigtimedwait_time64',
  'rt_tgsigqueueinfo', 'sched_get_priority_max', 'sched_get_priority_min', 'sched_getaffinity',
  'sched_getattr', 'sched_getparam', 'sched_getscheduler', 'sched_rr_get_interval',
  'sched_rr_get_interval_time64', 'sched_setaffinity', 'sched_setattr', 'sched_setparam',
  'sched_setscheduler', 'sched_yield', 'seccomp', 'select', 'semctl', 'semget', 'semop', 'semtimedop',
  'semtimedop_time64', 'send', 'sendfile', 'sendfile64', 'sendmmsg', 'sendmsg', 'sendto', 'set_robust_list',
  'set_thread_area', 'set_tid_address', 'setfsgid', 'setfsgid32', 'setfsuid', 'setfsuid32', 'setgid',
  'setgid32', 'setgroups', 'setgroups32', 'setitimer', 'setpgid', 'setpriority', 'setregid', 'setregid32',
  'setresgid', 'setresgid32', 'setresuid', 'setresuid32', 'setreuid', 'setreuid32', 'setrlimit', 'setsid',
  'setsockopt', 'setuid', 'setuid32', 'setxattr', 'setxattrat', 'shmat', 'shmctl', 'shmdt', 'shmget',
  'shutdown', 'sigaltstack', 'signalfd', 'signalfd4', 'sigprocmask', 'sigreturn', 'socketcall', 'socketpair',
  'splice', 'stat', 'stat64', 'statfs', 'statfs64', 'statx', 'symlink', 'symlinkat', 'sync',
  'sync_file_range', 'syncfs', 'sysinfo', 'tee', 'tgkill', 'time', 'timer_create', 'timer_delete',
  'timer_getoverrun', 'timer_gettime', 'timer_gettime64', 'timer_settime', 'timer_settime64',
  'timerfd_create', 'timerfd_gettime', 'timerfd_gettime64', 'timerfd_settime', 'timerfd_settime64', 'times',
  'tkill', 'truncate', 'truncate64', 'ugetrlimit', 'umask', 'uname', 'unlink', 'unlinkat', 'utime',
  'utimensat', 'utimensat_time64', 'utimes', 'vfork', 'vmsplice', 'wait4', 'waitid', 'waitpid', 'write',
  'writev',
];

/** personality(2) values Docker allows: query, PER_LINUX, PER_LINUX32, UNAME26 and both (no ASLR switch-off). */
const PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];

/**
 * Refused whatever profile is in use (a profile given by `[runtime].seccomp_profile` cannot allow them):
 * kernel attack surface no sandbox needs, host-wide state, and what Docker refuses to a container without
 * CAP_SYS_ADMIN and friends. io_uring has been the source of most recent kernel privilege escalations and
 * bypasses this filter's view of the I/O it does.
 */
// prettier-ignore
export const ALWAYS_DENIED = [
  'acct', 'bpf', 'clock_settime', 'clock_settime64', 'create_module', 'delete_module', 'fanotify_init',
  'finit_module', 'get_kernel_syms', 'get_mempolicy', 'init_module', 'io_uring_enter', 'io_uring_register',
  'io_uring_setup', 'ioperm', 'iopl', 'kcmp', 'kexec_file_load', 'kexec_load', 'lookup_dcookie',
  'lsm_get_self_attr', 'lsm_list_modules', 'lsm_set_self_attr', 'mbind', 'migrate_pages', 'move_pages',
  'nfsservctl', 'open_by_handle_at', 'pciconfig_iobase', 'pciconfig_read', 'pciconfig_write',
  'perf_event_open', 'pidfd_getfd', 'process_madvise', 'query_module', 'quotactl', 'quotactl_fd', 'reboot',
  'set_mempolicy', 'set_mempolicy_home_node', 'settimeofday', 'stime', 'swapoff', 'swapon', 'syslog',
  '_sysctl', 'sysfs', 'uretprobe', 'uselib', 'userfaultfd', 'ustat', 'vhangup', 'vm86', 'vm86old',
];

/** Refused unless `nestedContainers`: mounts, namespace switches and names (inside a nested user namespace). */
// prettier-ignore
export const NESTED_ONLY = [
  'fsconfig', 'fsmount', 'fsopen', 'fspick', 'listmount', 'mount', 'mount_setattr', 'move_mount',
  'open_tree', 'open_tree_attr', 'pivot_root', 'setdomainname', 'sethostname', 'setns', 'statmount',
  'umount', 'umount2',
];

/**
 * Kernel keyrings are not namespaced: a sandbox could read or fill keys of other users of the same host
 * uid. ENOSYS (as on a kernel without keys) lets runc, podman and systemd tools carry on without them.
 */
export const KEYRING = ['add_key', 'keyctl', 'request_key'];

// clone/unshare are decided here (namespace flags), clone3 cannot be (its flags are in memory).
const DECIDED_HERE = new Set([...ALWAYS_DENIED, ...NESTED_ONLY, ...KEYRING, 'clone', 'clone3', 'unshare']);

export type SeccompSource = 'builtin' | 'file';

export function hostArchScmp(arch: string = process.arch): string[] {
  const a = ARCHES[arch];
  if (!a) throw new Error(`no seccomp architecture mapping for ${arch}`);
  return a.scmp;
}

function kernelAtLeast(min: string, running: string): boolean {
  const parse = (v: string) => v.split(/[.-]/).map((x) => parseInt(x, 10) || 0);
  const [a = 0, b = 0] = parse(running);
  const [c = 0, d = 0] = parse(min);
  return a > c || (a === c && b >= d);
}

/**
 * Converts a Moby-format profile into an OCI one for a container holding exactly `caps`: an entry applies
 * when its arch matches, all its `includes.caps` are held and none of its `excludes.caps` are — the rule
 * Docker and Podman use when they generate a container's filter. aenv's own rules are then applied on top
 * (see `enforce`): a profile file can narrow what sandboxes may do, never widen it.
 */
export function convertMobyProfile(
  profile: MobyProfile,
  caps: readonly string[],
  policy: SeccompPolicy,
  arch: string = process.arch,
  kernel: string = release(),
): OciSeccomp {
  if (!profile || typeof profile.defaultAction !== 'string' || !Array.isArray(profile.syscalls)) {
    throw new Error('seccomp profile has no defaultAction or syscalls');
  }
  const archInfo = ARCHES[arch];
  if (!archInfo) throw new Error(`no seccomp architecture mapping for ${arch}`);
  const held = new Set(caps);
  const syscalls: OciSeccompSyscall[] = [];
  for (const s of profile.syscalls) {
    const inc = s.includes ?? {};
    const exc = s.excludes ?? {};
    if (inc.arches?.length && !inc.arches.some((a) => archInfo.moby.includes(a))) continue;
    if (exc.arches?.some((a) => archInfo.moby.includes(a))) continue;
    if (inc.caps?.length && !inc.caps.every((c) => held.has(c))) continue;
    if (exc.caps?.some((c) => held.has(c))) continue;
    if (inc.minKernel && !kernelAtLeast(inc.minKernel, kernel)) continue;
    const names = s.names ?? (s.name ? [s.name] : []);
    if (names.length === 0) continue;
    const out: OciSeccompSyscall = { names: [...names], action: s.action };
    if (s.errnoRet !== undefined && s.errnoRet !== null) out.errnoRet = s.errnoRet;
    if (s.args && s.args.length) out.args = s.args.map((a) => ({ ...a }));
    syscalls.push(out);
  }
  const result: OciSeccomp = {
    defaultAction: profile.defaultAction,
    architectures: archInfo.scmp,
    syscalls,
  };
  if (profile.defaultAction === 'SCMP_ACT_ERRNO') result.defaultErrnoRet = profile.defaultErrnoRet ?? EPERM;
  return enforce(result, policy);
}

/** aenv's built-in filter: refuse by default (EPERM), allow `ALLOWED`, then aenv's rules (see `enforce`). */
export function builtinProfile(policy: SeccompPolicy, arch: string = process.arch): OciSeccomp {
  const archInfo = ARCHES[arch];
  if (!archInfo) throw new Error(`no seccomp architecture mapping for ${arch}`);
  return enforce(
    {
      defaultAction: 'SCMP_ACT_ERRNO',
      defaultErrnoRet: EPERM,
      architectures: archInfo.scmp,
      syscalls: [
        { names: [...ALLOWED, ...archInfo.allow], action: 'SCMP_ACT_ALLOW' },
        ...PERSONALITIES.map((value) => ({
          names: ['personality'],
          action: 'SCMP_ACT_ALLOW',
          args: [{ index: 0, value, valueTwo: 0, op: 'SCMP_CMP_EQ' }],
        })),
        // vsock reaches the hypervisor's host side when there is one; nothing in a sandbox needs it.
        {
          names: ['socket'],
          action: 'SCMP_ACT_ALLOW',
          args: [{ index: 0, value: AF_VSOCK, valueTwo: 0, op: 'SCMP_CMP_NE' }],
        },
      ],
    },
    policy,
  );
}

function sameAction(rule: { action: string; errnoRet?: number }, p: OciSeccomp): boolean {
  if (rule.action !== p.defaultAction) return false;
  return rule.action !== 'SCMP_ACT_ERRNO' || (rule.errnoRet ?? EPERM) === (p.defaultErrnoRet ?? EPERM);
}

/**
 * aenv's rules on top of any profile. Every rule a profile has for a syscall decided here is dropped, then:
 * - ALWAYS_DENIED → EPERM, KEYRING → ENOSYS, NESTED_ONLY → EPERM unless nested containers are allowed;
 * - clone/unshare with any namespace flag → EPERM unless nested containers are allowed (creating a user
 *   namespace is the usual first step of kernel exploits; the other namespaces need CAP_SYS_ADMIN, which
 *   sandboxes do not hold, so they are refused here too, as Docker does);
 * - clone3 → ENOSYS: its flags are in memory a filter cannot read; libc falls back to clone.
 * A rule with the default action is left out (libseccomp refuses it).
 */
function enforce(p: OciSeccomp, policy: SeccompPolicy): OciSeccomp {
  const syscalls: OciSeccompSyscall[] = [];
  for (const s of p.syscalls) {
    const names = s.names.filter((n) => !DECIDED_HERE.has(n));
    if (names.length) syscalls.push({ ...s, names });
  }
  const add = (rule: OciSeccompSyscall) => {
    if (!sameAction(rule, p)) syscalls.push(rule);
  };
  const errno = (names: string[], errnoRet: number): OciSeccompSyscall => ({
    names,
    action: 'SCMP_ACT_ERRNO',
    errnoRet,
  });
  add(errno([...ALWAYS_DENIED], EPERM));
  add(errno([...KEYRING], ENOSYS));
  add(errno(['clone3'], ENOSYS));
  if (policy.nestedContainers) {
    add({ names: [...NESTED_ONLY, 'clone', 'unshare'], action: 'SCMP_ACT_ALLOW' });
  } else {
    add(errno([...NESTED_ONLY], EPERM));
    if (p.defaultAction === 'SCMP_ACT_ALLOW') {
      // One rule per flag: rules are or-ed, a rule's argument checks and-ed.
      for (let bit = 1; bit <= CLONE_NAMESPACE_FLAGS; bit *= 2) {
        if ((CLONE_NAMESPACE_FLAGS & bit) === 0) continue;
        add({
          names: ['clone', 'unshare'],
          action: 'SCMP_ACT_ERRNO',
          errnoRet: EPERM,
          args: [{ index: 0, value: bit, valueTwo: bit, op: 'SCMP_CMP_MASKED_EQ' }],
        });
      }
    } else {
      add({
        names: ['clone', 'unshare'],
        action: 'SCMP_ACT_ALLOW',
        args: [{ index: 0, value: CLONE_NAMESPACE_FLAGS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
      });
    }
  }
  return { ...p, syscalls };
}

/**
 * The sandbox's seccomp filter: aenv's built-in profile, or the Moby-format profile at `profilePath`
 * (`[runtime].seccomp_profile`) with aenv's rules on top. Fails closed: a profile that cannot be read or
 * understood stops the server from starting; there is no fallback to a weaker filter.
 */
export async function loadSeccompProfile(
  caps: readonly string[],
  profilePath: string,
  policy: SeccompPolicy,
): Promise<{ profile: OciSeccomp; source: SeccompSource }> {
  if (!profilePath) return { profile: builtinProfile(policy), source: 'builtin' };
  const what = `runtime.seccomp_profile = ${JSON.stringify(profilePath)}`;
  let text: string;
  try {
    text = await readFile(profilePath, 'utf8');
  } catch (e) {
    throw new RuntimeError('HostSetup', `${what}: cannot read it (${(e as Error).message})`, { cause: e });
  }
  try {
    return { profile: convertMobyProfile(JSON.parse(text) as MobyProfile, caps, policy), source: 'file' };
  } catch (e) {
    throw new RuntimeError('HostSetup', `${what}: not a usable seccomp profile (${(e as Error).message})`, {
      cause: e,
    });
  }
}
