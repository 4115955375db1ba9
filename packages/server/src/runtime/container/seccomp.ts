import { readFile } from 'node:fs/promises';
import { release } from 'node:os';

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

const EPERM = 1;
const ENOSYS = 38;
const CLONE_NEWUSER = 0x10000000;

/** Moby arch names and the libseccomp architectures a native process of that arch may use. */
const ARCHES: Record<string, { moby: string[]; scmp: string[] }> = {
  x64: { moby: ['amd64', 'x86_64'], scmp: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'] },
  arm64: { moby: ['arm64', 'aarch64'], scmp: ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'] },
};

/**
 * Syscalls no sandbox needs that widen the kernel surface a lot. The built-in profile (used when the host
 * has no containers-common profile) denies these and allows the rest; capability checks and the user
 * namespace stop most of them anyway, this is a second wall.
 */
const BUILTIN_DENY = [
  'acct',
  'add_key',
  'bpf',
  'clock_adjtime',
  'clock_settime',
  'create_module',
  'delete_module',
  'fanotify_init',
  'finit_module',
  'fsconfig',
  'fsmount',
  'fsopen',
  'fspick',
  'get_kernel_syms',
  'get_mempolicy',
  'init_module',
  'ioperm',
  'iopl',
  'kcmp',
  'kexec_file_load',
  'kexec_load',
  'keyctl',
  'lookup_dcookie',
  'mbind',
  'migrate_pages',
  'mount',
  'mount_setattr',
  'move_mount',
  'move_pages',
  'nfsservctl',
  'open_by_handle_at',
  'open_tree',
  'pciconfig_iobase',
  'pciconfig_read',
  'pciconfig_write',
  'perf_event_open',
  'pivot_root',
  'query_module',
  'quotactl',
  'quotactl_fd',
  'reboot',
  'request_key',
  'set_mempolicy',
  'setdomainname',
  'sethostname',
  'setns',
  'settimeofday',
  'stime',
  'swapoff',
  'swapon',
  'syslog',
  'sysfs',
  '_sysctl',
  'umount',
  'umount2',
  'uselib',
  'userfaultfd',
  'ustat',
  'vhangup',
  'vm86',
  'vm86old',
];

/** Applied on top of any profile: no nested user namespaces (the usual first step of kernel exploits), no io_uring. */
const IO_URING = ['io_uring_setup', 'io_uring_enter', 'io_uring_register'];
const NS_FLAG_SYSCALLS = ['clone', 'unshare'];

export type SeccompSource = 'containers-common' | 'builtin';

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
 * Docker and Podman use when they generate a container's filter.
 */
export function convertMobyProfile(
  profile: MobyProfile,
  caps: readonly string[],
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
  return harden(result);
}

/** Default-allow profile denying `BUILTIN_DENY`; used when the host has no containers-common profile. */
export function builtinProfile(arch: string = process.arch): OciSeccomp {
  return harden({
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: hostArchScmp(arch),
    syscalls: [{ names: [...BUILTIN_DENY], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM }],
  });
}

function harden(p: OciSeccomp): OciSeccomp {
  const strip = new Set([...NS_FLAG_SYSCALLS, 'clone3', ...IO_URING]);
  const syscalls: OciSeccompSyscall[] = [];
  for (const s of p.syscalls) {
    // Drop unconditional rules for the syscalls we decide ourselves; conditional ones cannot widen them.
    const names = s.args?.length ? s.names : s.names.filter((n) => !strip.has(n));
    if (names.length) syscalls.push({ ...s, names });
  }
  const mask: OciSeccompArg = { index: 0, value: CLONE_NEWUSER, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' };
  if (p.defaultAction === 'SCMP_ACT_ALLOW') {
    syscalls.push({
      names: NS_FLAG_SYSCALLS,
      action: 'SCMP_ACT_ERRNO',
      errnoRet: EPERM,
      args: [{ ...mask, valueTwo: CLONE_NEWUSER }],
    });
  } else {
    syscalls.push({ names: NS_FLAG_SYSCALLS, action: 'SCMP_ACT_ALLOW', args: [mask] });
  }
  // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone.
  syscalls.push({ names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS });
  syscalls.push({ names: IO_URING, action: 'SCMP_ACT_ERRNO', errnoRet: EPERM });
  return { ...p, syscalls };
}

/**
 * The sandbox's seccomp filter: derived from the host's containers-common profile when present (it tracks
 * new syscalls with the distribution), else the built-in deny list.
 */
export async function loadSeccompProfile(
  caps: readonly string[],
  mobyProfilePath: string | null = '/usr/share/containers/seccomp.json',
): Promise<{ profile: OciSeccomp; source: SeccompSource }> {
  if (mobyProfilePath) {
    let text: string | null = null;
    try {
      text = await readFile(mobyProfilePath, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    if (text !== null) {
      let parsed: MobyProfile;
      try {
        parsed = JSON.parse(text) as MobyProfile;
      } catch (e) {
        throw new Error(`seccomp profile ${mobyProfilePath} is not valid JSON: ${(e as Error).message}`);
      }
      return { profile: convertMobyProfile(parsed, caps), source: 'containers-common' };
    }
  }
  return { profile: builtinProfile(), source: 'builtin' };
}
