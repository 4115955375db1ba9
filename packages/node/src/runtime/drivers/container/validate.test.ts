import { describe, expect, it } from 'vitest';
import type { SandboxSpec } from '../../driver.js';
import { RuntimeError } from '../../driver.js';
import { assertSandboxId, validateSpec } from './validate.js';

const good: SandboxSpec = {
  id: 'ia1b2c3',
  hostname: 'ia1b2c3',
  rootfs: { layers: ['/cache/layers/1'] },
  resources: { cpuCount: 2, memoryMB: 512, pidsLimit: 1024 },
  netnsPath: '/run/aenv/netns/aenv-ns-1',
  nameservers: ['10.0.0.2', '2001:db8::53'],
  initEnv: { ENVD_PORT: '49983' },
  idRange: { hostStart: 165536, size: 65536 },
};

function bad(patch: Partial<SandboxSpec>, re: RegExp) {
  let err: unknown;
  try {
    validateSpec({ ...good, ...patch });
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(RuntimeError);
  expect((err as RuntimeError).reason).toBe('InvalidSpec');
  expect((err as Error).message).toMatch(re);
}

describe('validateSpec', () => {
  it('accepts a sane spec', () => expect(() => validateSpec(good)).not.toThrow());

  it('rejects ids that could escape a path or a cgroup', () => {
    for (const id of ['', '../x', 'a/b', '.hidden', 'a'.repeat(65), 'x y']) {
      expect(() => assertSandboxId(id)).toThrow(/sandbox id/);
    }
  });

  it('names the bad field', () => {
    bad({ hostname: 'bad_host' }, /hostname/);
    bad({ rootfs: { layers: [] } }, /rootfs\.layers/);
    bad({ rootfs: { layers: ['relative/dir'] } }, /absolute/);
    bad({ rootfs: { layers: ['/a,upperdir=/etc'] } }, /must not contain/);
    bad(
      { rootfs: { layers: ['/l'], driverOptions: { kernel: '/vmlinux' } } },
      /no rootfs options \(got kernel\)/,
    );
    bad({ netnsPath: '/x:y' }, /netnsPath/);
    bad({ resources: { cpuCount: 0, memoryMB: 512, pidsLimit: 10 } }, /cpuCount/);
    bad({ resources: { cpuCount: 1, memoryMB: 1.5, pidsLimit: 10 } }, /memoryMB/);
    bad({ resources: { cpuCount: 1, memoryMB: 512, pidsLimit: 2 } }, /pidsLimit/);
    bad({ nameservers: ['dns.example'] }, /nameserver/);
    bad({ initEnv: { 'A=B': 'x' } }, /initEnv key/);
    bad({ initEnv: { A: 'x\0y' } }, /NUL/);
  });

  it('refuses volume mounts over the root, the kernel and the tools, and odd sources', () => {
    expect(() =>
      validateSpec({ ...good, volumes: [{ source: '/v/1', destination: '/mnt/data' }] }),
    ).not.toThrow();
    for (const destination of [
      '/',
      'mnt',
      '/mnt/',
      '/mnt/../etc',
      '/proc',
      '/sys/x',
      '/dev',
      '/agentenv',
      '/run',
      '/run/agentenv/x',
    ])
      bad({ volumes: [{ source: '/v/1', destination }] }, /volume mount path/);
    bad({ volumes: [{ source: 'v/1', destination: '/mnt' }] }, /volume source/);
  });
});
