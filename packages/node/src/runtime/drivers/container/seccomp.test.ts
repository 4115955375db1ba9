import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { OciSeccomp } from './seccomp.js';
import {
  ALWAYS_DENIED,
  builtinProfile,
  convertMobyProfile,
  KEYRING,
  loadSeccompProfile,
  NESTED_ONLY,
} from './seccomp.js';

const NS_FLAGS = 0x7e020000;
const CLONE_NEWUSER = 0x10000000;
const off = { nestedContainers: false };
const on = { nestedContainers: true };

const moby = {
  defaultAction: 'SCMP_ACT_ERRNO',
  defaultErrnoRet: 38,
  syscalls: [
    {
      names: ['read', 'write', 'clone', 'clone3', 'unshare', 'io_uring_setup', 'keyctl', 'mount', 'syslog'],
      action: 'SCMP_ACT_ALLOW',
    },
    { names: ['kexec_load'], action: 'SCMP_ACT_ERRNO', errnoRet: 1 },
    { names: ['chroot'], action: 'SCMP_ACT_ALLOW', includes: { caps: ['CAP_SYS_CHROOT'] } },
    { names: ['setns', 'bpf'], action: 'SCMP_ACT_ALLOW', includes: { caps: ['CAP_SYS_ADMIN'] } },
    { names: ['sync_file_range2'], action: 'SCMP_ACT_ALLOW', includes: { arches: ['ppc64le'] } },
    { names: ['arch_prctl'], action: 'SCMP_ACT_ALLOW', includes: { arches: ['amd64', 'x32'] } },
    { names: ['futuristic'], action: 'SCMP_ACT_ALLOW', includes: { minKernel: '99.0' } },
    {
      names: ['personality'],
      action: 'SCMP_ACT_ALLOW',
      args: [{ index: 0, value: 8, valueTwo: 0, op: 'SCMP_CMP_EQ' }],
    },
  ],
};

function rules(p: OciSeccomp, name: string) {
  return p.syscalls.filter((s) => s.names.includes(name));
}

/** What the filter answers for `name` with arg0 = `arg0`: 'allow' or the errno (the default when no rule matches). */
function verdict(p: OciSeccomp, name: string, arg0 = 0): 'allow' | number {
  for (const r of rules(p, name)) {
    const matches = (r.args ?? []).every((a) => {
      if (a.op === 'SCMP_CMP_MASKED_EQ') return (arg0 & a.value) === (a.valueTwo ?? 0);
      if (a.op === 'SCMP_CMP_EQ') return arg0 === a.value;
      if (a.op === 'SCMP_CMP_NE') return arg0 !== a.value;
      throw new Error(`op ${a.op} not modelled`);
    });
    if (matches) return r.action === 'SCMP_ACT_ALLOW' ? 'allow' : (r.errnoRet ?? 1);
  }
  return p.defaultAction === 'SCMP_ACT_ALLOW' ? 'allow' : (p.defaultErrnoRet ?? 1);
}

describe('builtinProfile', () => {
  const p = builtinProfile(off, 'x64');

  it('refuses by default, like Docker, and allows what ordinary programs use', () => {
    expect(p.defaultAction).toBe('SCMP_ACT_ERRNO');
    expect(p.defaultErrnoRet).toBe(1);
    for (const n of [
      'read',
      'openat',
      'execve',
      'ptrace',
      'chroot',
      'inotify_init1',
      'arch_prctl',
      'setresuid',
    ])
      expect(verdict(p, n)).toBe('allow');
    expect(verdict(builtinProfile(off, 'arm64'), 'arch_prctl')).toBe(1);
  });

  it("refuses Docker's default denials, keyrings with ENOSYS, io_uring", () => {
    for (const n of ['syslog', 'mount', 'umount2', 'setns', 'pivot_root', 'bpf', 'perf_event_open', 'reboot'])
      expect(verdict(p, n)).toBe(1);
    for (const n of ['userfaultfd', 'open_by_handle_at', 'kexec_load', 'init_module', 'io_uring_setup'])
      expect(verdict(p, n)).toBe(1);
    for (const n of KEYRING) expect(verdict(p, n)).toBe(38);
    expect(verdict(p, 'clone3')).toBe(38);
  });

  it('allows clone and unshare without namespace flags only', () => {
    expect(verdict(p, 'clone', 0x3d0f00)).toBe('allow'); // a thread
    expect(verdict(p, 'unshare', 0x200)).toBe('allow'); // CLONE_FS
    for (const flag of [CLONE_NEWUSER, 0x20000, 0x40000000, 0x20000000, 0x2000000]) {
      expect(verdict(p, 'unshare', flag)).toBe(1);
      expect(verdict(p, 'clone', flag | 0x11)).toBe(1);
    }
  });

  it('restricts personality and socket like Docker', () => {
    expect(verdict(p, 'personality', 0xffffffff)).toBe('allow');
    expect(verdict(p, 'personality', 0x0040000)).toBe(1); // ADDR_NO_RANDOMIZE
    expect(verdict(p, 'socket', 2)).toBe('allow');
    expect(verdict(p, 'socket', 40)).toBe(1); // AF_VSOCK
  });

  it('with nested containers allows user namespaces, mounts and setns, never keyrings or io_uring', () => {
    const n = builtinProfile(on, 'x64');
    expect(verdict(n, 'unshare', CLONE_NEWUSER | 0x20000)).toBe('allow');
    expect(verdict(n, 'clone', NS_FLAGS)).toBe('allow');
    for (const name of NESTED_ONLY) expect(verdict(n, name)).toBe('allow');
    expect(verdict(n, 'keyctl')).toBe(38);
    for (const name of ALWAYS_DENIED) expect(verdict(n, name)).toBe(1);
  });

  it('never has two rules for a syscall with the same arguments, nor one with the default action', () => {
    const seen = new Set<string>();
    for (const r of p.syscalls) {
      expect(r.action === p.defaultAction && (r.errnoRet ?? 1) === p.defaultErrnoRet).toBe(false);
      for (const n of r.names) {
        const key = `${n} ${JSON.stringify(r.args ?? [])}`;
        expect(seen.has(key), key).toBe(false);
        seen.add(key);
      }
    }
  });
});

describe('convertMobyProfile', () => {
  const caps = ['CAP_SYS_CHROOT', 'CAP_KILL'];
  const p = convertMobyProfile(moby, caps, off, 'x64', '6.18.0');

  it('keeps the default action and sets the architectures of the host', () => {
    expect(p.defaultAction).toBe('SCMP_ACT_ERRNO');
    expect(p.defaultErrnoRet).toBe(38);
    expect(p.architectures).toEqual(['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
  });

  it('applies entries by the capabilities the sandbox holds', () => {
    expect(verdict(p, 'chroot')).toBe('allow');
    expect(rules(p, 'bpf').every((r) => r.action === 'SCMP_ACT_ERRNO')).toBe(true);
  });

  it('drops entries for other architectures and newer kernels, keeps argument filters', () => {
    expect(rules(p, 'sync_file_range2')).toEqual([]);
    expect(rules(p, 'arch_prctl')).toHaveLength(1);
    expect(rules(p, 'futuristic')).toEqual([]);
    expect(rules(p, 'personality')[0]?.args).toEqual([
      { index: 0, value: 8, valueTwo: 0, op: 'SCMP_CMP_EQ' },
    ]);
    expect(rules(convertMobyProfile(moby, caps, off, 'arm64', '6.18.0'), 'arch_prctl')).toEqual([]);
  });

  it("cannot widen aenv's rules: what the file allows of them is refused", () => {
    expect(verdict(p, 'read')).toBe('allow');
    for (const n of ['mount', 'syslog', 'io_uring_setup']) expect(verdict(p, n)).toBe(1);
    expect(verdict(p, 'keyctl')).toBe(38);
    expect(verdict(p, 'unshare', CLONE_NEWUSER)).not.toBe('allow'); // the file's default (ENOSYS)
    expect(verdict(p, 'clone', 0x11)).toBe('allow');
    // With a CAP_SYS_ADMIN the sandbox never holds, setns would be allowed by the file: still refused.
    expect(verdict(convertMobyProfile(moby, [...caps, 'CAP_SYS_ADMIN'], off, 'x64', '6.18.0'), 'setns')).toBe(
      1,
    );
  });

  it('on a default-allow file denies each namespace flag of clone/unshare', () => {
    const allowAll = convertMobyProfile({ defaultAction: 'SCMP_ACT_ALLOW', syscalls: [] }, caps, off, 'x64');
    expect(verdict(allowAll, 'read')).toBe('allow');
    expect(verdict(allowAll, 'clone', 0x11)).toBe('allow');
    expect(verdict(allowAll, 'unshare', CLONE_NEWUSER)).toBe(1);
    expect(verdict(allowAll, 'clone', 0x40000000 | 0x11)).toBe(1);
    expect(verdict(allowAll, 'mount')).toBe(1);
  });

  it('rejects a file that is not a profile', () => {
    expect(() => convertMobyProfile({} as never, caps, off)).toThrow(/defaultAction/);
  });
});

describe('loadSeccompProfile', () => {
  it('fails closed: a missing or broken file is an error, never a weaker filter', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aenv-seccomp-'));
    try {
      await expect(loadSeccompProfile(['CAP_KILL'], join(dir, 'absent.json'), off)).rejects.toThrow(
        /runtime.seccomp_profile = .*absent.json.*cannot read/,
      );
      await writeFile(join(dir, 'bad.json'), '{"defaultAction": ');
      await expect(loadSeccompProfile(['CAP_KILL'], join(dir, 'bad.json'), off)).rejects.toThrow(
        /not a usable seccomp profile/,
      );
      await writeFile(join(dir, 'empty.json'), '{}');
      await expect(loadSeccompProfile(['CAP_KILL'], join(dir, 'empty.json'), off)).rejects.toThrow(
        /defaultAction/,
      );
      await writeFile(join(dir, 'ok.json'), JSON.stringify(moby));
      expect((await loadSeccompProfile(['CAP_KILL'], join(dir, 'ok.json'), off)).source).toBe('file');
      expect((await loadSeccompProfile(['CAP_KILL'], '', off)).source).toBe('builtin');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
