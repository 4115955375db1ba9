import { describe, expect, it } from 'vitest';
import { builtinProfile, convertMobyProfile } from './seccomp.js';

const CLONE_NEWUSER = 0x10000000;

const moby = {
  defaultAction: 'SCMP_ACT_ERRNO',
  defaultErrnoRet: 38,
  syscalls: [
    { names: ['read', 'write', 'clone', 'clone3', 'unshare', 'io_uring_setup'], action: 'SCMP_ACT_ALLOW' },
    { names: ['kexec_load'], action: 'SCMP_ACT_ERRNO', errnoRet: 1 },
    { names: ['chroot'], action: 'SCMP_ACT_ALLOW', includes: { caps: ['CAP_SYS_CHROOT'] } },
    { names: ['mount', 'bpf'], action: 'SCMP_ACT_ALLOW', includes: { caps: ['CAP_SYS_ADMIN'] } },
    { names: ['bpf'], action: 'SCMP_ACT_ERRNO', errnoRet: 1, excludes: { caps: ['CAP_SYS_ADMIN'] } },
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

function allowed(p: ReturnType<typeof convertMobyProfile>, name: string) {
  return p.syscalls.filter((s) => s.names.includes(name));
}

describe('convertMobyProfile', () => {
  const caps = ['CAP_SYS_CHROOT', 'CAP_KILL'];
  const p = convertMobyProfile(moby, caps, 'x64', '6.18.0');

  it('keeps the default action and sets the architectures of the host', () => {
    expect(p.defaultAction).toBe('SCMP_ACT_ERRNO');
    expect(p.defaultErrnoRet).toBe(38);
    expect(p.architectures).toEqual(['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
  });

  it('applies entries by the capabilities the sandbox holds', () => {
    expect(allowed(p, 'chroot')).toEqual([{ names: ['chroot'], action: 'SCMP_ACT_ALLOW' }]);
    expect(allowed(p, 'mount')).toEqual([]);
    expect(allowed(p, 'bpf')).toEqual([{ names: ['bpf'], action: 'SCMP_ACT_ERRNO', errnoRet: 1 }]);
    const withAdmin = convertMobyProfile(moby, [...caps, 'CAP_SYS_ADMIN'], 'x64', '6.18.0');
    expect(allowed(withAdmin, 'bpf')).toEqual([{ names: ['mount', 'bpf'], action: 'SCMP_ACT_ALLOW' }]);
  });

  it('drops entries for other architectures and newer kernels, keeps argument filters', () => {
    expect(allowed(p, 'sync_file_range2')).toEqual([]);
    expect(allowed(p, 'arch_prctl')).toHaveLength(1);
    expect(allowed(p, 'futuristic')).toEqual([]);
    expect(allowed(p, 'personality')[0]?.args).toEqual([
      { index: 0, value: 8, valueTwo: 0, op: 'SCMP_CMP_EQ' },
    ]);
    expect(allowed(convertMobyProfile(moby, caps, 'arm64', '6.18.0'), 'arch_prctl')).toEqual([]);
  });

  it('allows clone/unshare only without CLONE_NEWUSER, and sends clone3 and io_uring to errno', () => {
    expect(allowed(p, 'read')[0]?.names).toEqual(['read', 'write']);
    const clone = allowed(p, 'clone');
    expect(clone).toEqual([
      {
        names: ['clone', 'unshare'],
        action: 'SCMP_ACT_ALLOW',
        args: [{ index: 0, value: CLONE_NEWUSER, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
      },
    ]);
    expect(allowed(p, 'clone3')).toEqual([{ names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: 38 }]);
    expect(allowed(p, 'io_uring_setup')[0]?.action).toBe('SCMP_ACT_ERRNO');
  });

  it('rejects a file that is not a profile', () => {
    expect(() => convertMobyProfile({} as never, caps)).toThrow(/defaultAction/);
  });
});

describe('builtinProfile', () => {
  const p = builtinProfile('x64');
  it('allows by default and denies the dangerous list, nested user namespaces included', () => {
    expect(p.defaultAction).toBe('SCMP_ACT_ALLOW');
    const deny = p.syscalls.find((s) => s.names.includes('kexec_load'));
    expect(deny?.action).toBe('SCMP_ACT_ERRNO');
    for (const n of ['mount', 'bpf', 'init_module', 'open_by_handle_at', 'keyctl', 'userfaultfd', 'setns']) {
      expect(deny?.names).toContain(n);
    }
    expect(p.syscalls.find((s) => s.names.includes('clone'))).toEqual({
      names: ['clone', 'unshare'],
      action: 'SCMP_ACT_ERRNO',
      errnoRet: 1,
      args: [{ index: 0, value: CLONE_NEWUSER, valueTwo: CLONE_NEWUSER, op: 'SCMP_CMP_MASKED_EQ' }],
    });
  });
});
