import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { dependenciesOfMode, readDepsManifest } from './deps-manifest.js';
import type { AenvConfig } from './types.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const MANIFEST = join(ROOT, 'config', 'deps_manifest.toml');
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** What scripts/setup-host.sh would install, as it reads the manifest itself (it touches nothing here). */
function setupPackages(args: string[], manifest = MANIFEST): string[] {
  const out = execFileSync(join(ROOT, 'scripts', 'setup-host.sh'), args, {
    env: { ...process.env, AENV_SETUP_PRINT_PACKAGES: '1', AENV_DEPS_MANIFEST: manifest },
    encoding: 'utf8',
  });
  return out.trim().split('\n');
}

function bashGet(manifest: string, name: string, key: string): string {
  return execFileSync(
    'bash',
    ['-c', `. "$1/scripts/lib/deps-manifest.sh" && aenv_manifest_get "$2" "$3"`, 'x', ROOT, name, key],
    { env: { ...process.env, AENV_DEPS_MANIFEST: manifest }, encoding: 'utf8' },
  ).trim();
}

describe('config/deps_manifest.toml', () => {
  const deps = readDepsManifest(MANIFEST);

  it('parses, and names only virtualization modes the configuration knows', () => {
    const modes = new Set<string>(['container', 'kvm', 'pvm'] satisfies AenvConfig['virtualization_mode'][]);
    for (const d of deps)
      for (const m of d.modes) expect(m === 'all' || modes.has(m), `${d.name}: ${m}`).toBe(true);
    const names = deps.map((d) => d.name);
    for (const needed of ['runc', 'criu', 'nftables', 'btrfs-progs', 'node', 'protobuf-generator'])
      expect(names).toContain(needed);
    const criu = deps.find((d) => d.name === 'criu')!;
    expect(criu).toMatchObject({
      source: 'debian-suite',
      suite: 'forky',
      version: '>=4.2',
      modes: ['container'],
    });
  });

  it('is what setup-host.sh installs: the Debian packages of the mode and of every mode, test tools optional', () => {
    const debs = (groups?: ('runtime' | 'images' | 'test')[]) =>
      dependenciesOfMode(deps, 'container', groups)
        .filter((d) => d.source === 'debian')
        .map((d) => d.package);
    expect(setupPackages(['--mode', 'container'])).toEqual(debs());
    expect(setupPackages(['--mode', 'container', '--no-test-tools'])).toEqual(debs(['runtime', 'images']));
    expect(setupPackages(['--mode', 'container'])).toContain('runc');
    expect(setupPackages(['--no-test-tools'])).not.toContain('redis-server');
  });

  it('makes a version bump a one-line change that setup picks up', () => {
    const dir = mkdtempSync(join(tmpdir(), 'deps-manifest-'));
    dirs.push(dir);
    const copy = join(dir, 'deps_manifest.toml');
    copyFileSync(MANIFEST, copy);
    expect(bashGet(copy, 'criu', 'version')).toBe('>=4.2');
    const text = readFileSync(copy, 'utf8');
    const bumped = text.replace('version = ">=4.2"', 'version = ">=4.3"');
    expect(bumped.split('\n').filter((l, i) => l !== text.split('\n')[i])).toHaveLength(1);
    writeFileSync(copy, bumped);
    expect(bashGet(copy, 'criu', 'version')).toBe('>=4.3');
    expect(readDepsManifest(copy).find((d) => d.name === 'criu')!.version).toBe('>=4.3');
  });

  it('refuses a mode it lists nothing for, and a malformed entry', () => {
    expect(() => setupPackages(['--mode', 'kvm'])).toThrow();
    const dir = mkdtempSync(join(tmpdir(), 'deps-manifest-'));
    dirs.push(dir);
    const bad = join(dir, 'bad.toml');
    writeFileSync(
      bad,
      '[deps.x]\nmodes = ["all"]\ngroup = "runtime"\nsource = "ftp"\npackage = "x"\nversion = "host"\nwhy = "-"\n',
    );
    expect(() => readDepsManifest(bad)).toThrow('[deps.x] source must be one of');
  });
});
