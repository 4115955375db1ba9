import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { architectureName, parseCpuInfo, readMachineInfo } from './machine-info.js';

const dir = mkdtempSync(join(tmpdir(), 'aenv-cpuinfo-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const X86 = `processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC 9R45
stepping\t: 1

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 99
model\t\t: 98
model name\t: Other
`;

const ARM = `processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
`;

describe('machine info', () => {
  it('reads family, model and model name of the first x86 processor', () => {
    expect(parseCpuInfo(X86, 'x64')).toEqual({
      cpuFamily: '26',
      cpuModel: '2',
      cpuModelName: 'AMD EPYC 9R45',
      cpuArchitecture: 'x86_64',
    });
  });

  it('falls back to the arm64 fields', () => {
    expect(parseCpuInfo(ARM, 'arm64')).toEqual({
      cpuFamily: '8',
      cpuModel: '0xd0c',
      cpuModelName: '',
      cpuArchitecture: 'aarch64',
    });
  });

  it('maps Node architecture names to kernel ones', () => {
    expect(architectureName('x64')).toBe('x86_64');
    expect(architectureName('arm64')).toBe('aarch64');
    expect(architectureName('mips')).toBe('mips');
  });

  it('reads a cpuinfo file, and survives a missing one', () => {
    const file = join(dir, 'cpuinfo');
    writeFileSync(file, X86);
    expect(readMachineInfo(file).cpuModelName).toBe('AMD EPYC 9R45');
    expect(readMachineInfo(join(dir, 'missing'))).toEqual({
      cpuFamily: '',
      cpuModel: '',
      cpuModelName: '',
      cpuArchitecture: architectureName(),
    });
  });
});
