import { readFileSync } from 'node:fs';

/** `machineInfo` of the /nodes API and scheduler heartbeats (docs/differences.md, docs/cluster.md). */
export interface MachineInfo {
  cpuFamily: string;
  cpuModel: string;
  cpuModelName: string;
  cpuArchitecture: string;
}

const ARCH_NAMES: Readonly<Record<string, string>> = {
  x64: 'x86_64',
  arm64: 'aarch64',
  ia32: 'x86',
  arm: 'arm',
  ppc64: 'powerpc64',
  s390x: 's390x',
  riscv64: 'riscv64',
  loong64: 'loongarch64',
};

/** Kernel-style architecture name (what `uname -m` and the reference report) for a Node `process.arch`. */
export function architectureName(nodeArch: string = process.arch): string {
  return ARCH_NAMES[nodeArch] ?? nodeArch;
}

/**
 * Reads CPU identity from the first processor of `/proc/cpuinfo`. x86 reports "cpu family",
 * "model" and "model name"; arm64 has no such fields, so "CPU architecture" and "CPU part" stand in
 * for family and model. Missing fields are "".
 */
export function parseCpuInfo(text: string, nodeArch: string = process.arch): MachineInfo {
  const first = text.split(/\n\s*\n/)[0] ?? '';
  const fields = new Map<string, string>();
  for (const line of first.split('\n')) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const key = line.slice(0, colon).trim().toLowerCase();
    if (!fields.has(key)) fields.set(key, line.slice(colon + 1).trim());
  }
  const get = (...keys: string[]) =>
    keys.map((k) => fields.get(k)).find((v) => v !== undefined && v !== '') ?? '';
  return {
    cpuFamily: get('cpu family', 'cpu architecture'),
    cpuModel: get('model', 'cpu part'),
    cpuModelName: get('model name', 'hardware', 'cpu'),
    cpuArchitecture: architectureName(nodeArch),
  };
}

/** Machine info of this host; an unreadable /proc/cpuinfo gives empty CPU fields (the architecture is always known). */
export function readMachineInfo(cpuinfoPath = '/proc/cpuinfo'): MachineInfo {
  let text = '';
  try {
    text = readFileSync(cpuinfoPath, 'utf8');
  } catch {
    // Containers without /proc, or restricted /proc: report what we know.
  }
  return parseCpuInfo(text);
}
