import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveAccessTokenSeed } from './access-token-seed.js';

const root = mkdtempSync(join(tmpdir(), 'aenv-seed-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const SEED = 'a'.repeat(64);

function freshHome(): string {
  const home = join(root, `h${n++}`);
  mkdirSync(home);
  return home;
}

function writeManaged(home: string, contents: string, mode = 0o600): string {
  const dir = join(home, 'secrets');
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o700);
  const file = join(dir, 'sandbox-access-token-hash-seed');
  writeFileSync(file, contents);
  chmodSync(file, mode);
  return file;
}

describe('access-token seed (docs/security.md)', () => {
  it('an explicit seed wins and creates nothing', () => {
    const home = freshHome();
    writeManaged(home, `${SEED}\n`);
    const r = resolveAccessTokenSeed({
      homePath: home,
      explicitSeed: ' shared ',
      hasTokenProtectedPersistedSandboxes: true,
    });
    expect(r).toEqual({ seed: 'shared', source: 'config', warnings: [] });
    const other = freshHome();
    resolveAccessTokenSeed({
      homePath: other,
      explicitSeed: 'x',
      hasTokenProtectedPersistedSandboxes: false,
    });
    expect(readdirSync(other)).toEqual([]);
  });

  it('a blank explicit seed is an error', () => {
    expect(() =>
      resolveAccessTokenSeed({
        homePath: freshHome(),
        explicitSeed: '  ',
        hasTokenProtectedPersistedSandboxes: false,
      }),
    ).toThrow(/must be non-empty/);
  });

  it('reads the managed file: exactly 64 lowercase hex plus an optional newline', () => {
    for (const contents of [`${SEED}\n`, SEED]) {
      const home = freshHome();
      const path = writeManaged(home, contents);
      expect(resolveAccessTokenSeed({ homePath: home, hasTokenProtectedPersistedSandboxes: true })).toEqual({
        seed: SEED,
        source: 'managed-file',
        path,
        warnings: [],
      });
    }
  });

  it('rejects malformed managed seeds without replacing them', () => {
    for (const contents of [
      '',
      'invalid\n',
      `${'A'.repeat(64)}\n`,
      `${SEED}\n\n`,
      `${SEED} \n`,
      'a'.repeat(63),
    ]) {
      const home = freshHome();
      const path = writeManaged(home, contents);
      expect(
        () => resolveAccessTokenSeed({ homePath: home, hasTokenProtectedPersistedSandboxes: false }),
        contents,
      ).toThrow(/must contain exactly 64 lowercase hexadecimal characters|must be at most 65 bytes/);
      expect(readFileSync(path, 'utf8')).toBe(contents);
    }
  });

  it('refuses a managed seed with loose permissions, as a symlink, or in a symlinked directory', () => {
    const home = freshHome();
    const path = writeManaged(home, `${SEED}\n`, 0o640);
    expect(() =>
      resolveAccessTokenSeed({ homePath: home, hasTokenProtectedPersistedSandboxes: false }),
    ).toThrow(`managed secret ${path} must have mode 0600, found 0640`);

    const home2 = freshHome();
    const target = join(home2, 'target');
    writeFileSync(target, `${SEED}\n`, { mode: 0o600 });
    mkdirSync(join(home2, 'secrets'), { mode: 0o700 });
    chmodSync(join(home2, 'secrets'), 0o700);
    symlinkSync(target, join(home2, 'secrets', 'sandbox-access-token-hash-seed'));
    expect(() =>
      resolveAccessTokenSeed({ homePath: home2, hasTokenProtectedPersistedSandboxes: false }),
    ).toThrow(/must not be a symbolic link/);

    const home3 = freshHome();
    const realDir = join(home3, 'real-secrets');
    mkdirSync(realDir, { mode: 0o700 });
    chmodSync(realDir, 0o700);
    symlinkSync(realDir, join(home3, 'secrets'));
    expect(() =>
      resolveAccessTokenSeed({ homePath: home3, hasTokenProtectedPersistedSandboxes: false }),
    ).toThrow(/must be a directory, not a symbolic link/);
  });

  it('refuses to start when the managed seed is missing and token-protected sandboxes are persisted', () => {
    const home = freshHome();
    const path = join(home, 'secrets', 'sandbox-access-token-hash-seed');
    expect(() =>
      resolveAccessTokenSeed({ homePath: home, hasTokenProtectedPersistedSandboxes: true }),
    ).toThrow(
      `managed sandbox access-token seed ${path} is missing while token-protected persisted sandboxes exist; ` +
        'restore the file or configure AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED',
    );
    expect(() => statSync(path)).toThrow();
  });

  it('otherwise creates 32 random bytes as hex (file 0600, dir 0700) and reuses them', () => {
    const home = freshHome();
    const first = resolveAccessTokenSeed({ homePath: home, hasTokenProtectedPersistedSandboxes: false });
    expect(first.source).toBe('generated');
    expect(first.seed).toMatch(/^[0-9a-f]{64}$/);
    const path = join(home, 'secrets', 'sandbox-access-token-hash-seed');
    expect(readFileSync(path, 'utf8')).toBe(`${first.seed}\n`);
    expect(statSync(path).mode & 0o7777).toBe(0o600);
    expect(statSync(join(home, 'secrets')).mode & 0o7777).toBe(0o700);
    expect(readdirSync(join(home, 'secrets'))).toEqual(['sandbox-access-token-hash-seed']);
    const again = resolveAccessTokenSeed({ homePath: home, hasTokenProtectedPersistedSandboxes: true });
    expect(again.seed).toBe(first.seed);
    expect(again.source).toBe('managed-file');
  });

  it('warns when a node-local seed is used in a cluster', () => {
    const home = freshHome();
    const r = resolveAccessTokenSeed({
      homePath: home,
      hasTokenProtectedPersistedSandboxes: false,
      schedulerEndpoint: 'http://127.0.0.1:9090',
    });
    expect(r.warnings).toHaveLength(1);
    expect(r.warnings[0]).toContain('while cluster.scheduler_endpoint is set');
    expect(
      resolveAccessTokenSeed({
        homePath: home,
        explicitSeed: 's',
        hasTokenProtectedPersistedSandboxes: false,
        schedulerEndpoint: 'http://127.0.0.1:9090',
      }).warnings,
    ).toEqual([]);
  });
});
