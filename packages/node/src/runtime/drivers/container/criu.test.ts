import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  CRIU_CONFIG,
  criuConfig,
  maskKey,
  CRIU_NO_BREAKPOINTS_ENV,
  criuLogErrors,
  defaultCriuPath,
  versionAtLeast,
} from './criu.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('criu helpers', () => {
  it('compares versions numerically', () => {
    expect(versionAtLeast('4.1.1', '4.1')).toBe(true);
    expect(versionAtLeast('4.1', '4.1')).toBe(true);
    expect(versionAtLeast('3.17.1', '4.1')).toBe(false);
    expect(versionAtLeast('10.0', '4.1')).toBe(true);
  });

  it('closes established TCP connections and never sets network-lock (it aborts CRIU 4.1 in RPC mode)', () => {
    expect(CRIU_CONFIG.split('\n')).toContain('tcp-close');
    expect(CRIU_CONFIG).not.toMatch(/network-lock/);
    expect(CRIU_NO_BREAKPOINTS_ENV).toEqual({ CRIU_FAULT: '130' });
    expect(defaultCriuPath('/var/lib/aenv/deps')).toBe('/var/lib/aenv/deps/criu/current/bin/criu');
  });

  it('declares masked directories external both ways: dump by mount point, restore by key', () => {
    expect(criuConfig()).toBe(CRIU_CONFIG);
    expect(criuConfig({ dirs: [], emptyDir: '/e' })).toBe(CRIU_CONFIG);
    expect(maskKey('/sys/devices/virtual/powercap')).toBe('aenv-mask-sys-devices-virtual-powercap');
    const lines = criuConfig({ dirs: ['/proc/acpi', '/sys/firmware'], emptyDir: '/v/.masked-empty' }).split(
      '\n',
    );
    expect(lines.slice(0, 4)).toEqual(CRIU_CONFIG.split('\n').slice(0, 4));
    expect(lines.slice(4)).toEqual([
      'external mnt[/proc/acpi]:aenv-mask-proc-acpi',
      'external mnt[aenv-mask-proc-acpi]:/v/.masked-empty',
      'external mnt[/sys/firmware]:aenv-mask-sys-firmware',
      'external mnt[aenv-mask-sys-firmware]:/v/.masked-empty',
      '',
    ]);
  });

  it('extracts the last error lines of a CRIU log', async () => {
    const d = await mkdtemp(join(tmpdir(), 'aenv-criu-log-'));
    dirs.push(d);
    const log = join(d, 'dump.log');
    await writeFile(
      log,
      [
        '(00.000100) Version: 4.1.1',
        '(00.010000) Error (criu/sk-inet.c:191): inet: Connected TCP socket, consider using --tcp-established option.',
        '(00.010100) Error (criu/cr-dump.c:1234): Dumping FAILED.',
        '',
      ].join('\n'),
    );
    expect(await criuLogErrors(log)).toBe(
      'Error (criu/sk-inet.c:191): inet: Connected TCP socket, consider using --tcp-established option. | Error (criu/cr-dump.c:1234): Dumping FAILED.',
    );
    expect(await criuLogErrors(join(d, 'missing.log'))).toBe('');
  });
});
