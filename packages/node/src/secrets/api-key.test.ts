import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { generateApiKey, resolveApiKey, validateApiKey } from './api-key.js';

const root = mkdtempSync(join(tmpdir(), 'aenv-api-key-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const KEY = 'e2b_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';

/** A fresh home and a path for the external key file (not created). */
function fresh(): { home: string; external: string } {
  const d = join(root, `t${n++}`);
  mkdirSync(d);
  return { home: join(d, 'home'), external: join(d, 'external-api-key') };
}

function privateSecretsDir(home: string): string {
  const dir = join(home, 'secrets');
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o700);
  return dir;
}

describe('API key format', () => {
  it('accepts 32-256 characters of [A-Za-z0-9._~-]', () => {
    for (const ok of ['a'.repeat(32), 'A'.repeat(256), 'abc.DEF_ghi~JKL-0123456789abcdefgh', KEY]) {
      expect(validateApiKey(ok, 'test')).toBe(ok);
    }
  });

  it('rejects other keys, naming the source but never the key', () => {
    expect(() => validateApiKey('a'.repeat(31), 'AENV_API_KEY')).toThrow(
      'invalid API key from AENV_API_KEY: must be 32-256 characters of [A-Za-z0-9._~-], got 31 characters',
    );
    expect(() => validateApiKey('a'.repeat(257), 'x')).toThrow(/got 257 characters/);
    const secret = `${'a'.repeat(40)} b`;
    let message = '';
    try {
      validateApiKey(secret, '/run/secrets/api-key');
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toBe(
      'invalid API key from /run/secrets/api-key: must contain only [A-Za-z0-9._~-], found another character at position 41',
    );
    expect(message).not.toContain(secret);
    for (const bad of [
      `${'a'.repeat(32)}+`,
      `${'a'.repeat(32)}/`,
      `${'a'.repeat(32)}\n`,
      `${'a'.repeat(32)}é`,
    ]) {
      expect(() => validateApiKey(bad, 'x'), bad).toThrow(/invalid API key/);
    }
  });

  it('generates e2b_ + 64 hex', () => {
    const k = generateApiKey();
    expect(k).toMatch(/^e2b_[0-9a-f]{64}$/);
    expect(generateApiKey()).not.toBe(k);
  });
});

describe('API key resolution', () => {
  it('1. AENV_API_KEY wins over every file', () => {
    const { home, external } = fresh();
    writeFileSync(external, `${'b'.repeat(40)}\n`);
    const r = resolveApiKey({ homePath: home, env: { AENV_API_KEY: KEY }, externalPath: external });
    expect(r).toEqual({ key: KEY, source: 'env' });
  });

  it('an invalid AENV_API_KEY is an error, not a fall-through', () => {
    const { home, external } = fresh();
    expect(() =>
      resolveApiKey({ homePath: home, env: { AENV_API_KEY: '' }, externalPath: external }),
    ).toThrow(/invalid API key from AENV_API_KEY/);
  });

  it('2. the external file, with one trailing newline or CRLF stripped, symlinks allowed', () => {
    const { home, external } = fresh();
    writeFileSync(external, `${KEY}\r\n`);
    expect(resolveApiKey({ homePath: home, env: {}, externalPath: external })).toEqual({
      key: KEY,
      source: 'external-file',
      path: external,
    });
    writeFileSync(`${external}.target`, `${KEY}\n`);
    rmSync(external);
    symlinkSync(`${external}.target`, external);
    expect(resolveApiKey({ homePath: home, env: {}, externalPath: external }).key).toBe(KEY);
    expect(() => statSync(join(home, 'secrets'))).toThrow(); // nothing managed was created
  });

  it('rejects a bad external file: two newlines, too long, not a regular file', () => {
    const { home, external } = fresh();
    writeFileSync(external, `${KEY}\n\n`);
    expect(() => resolveApiKey({ homePath: home, env: {}, externalPath: external })).toThrow(
      `invalid API key from ${external}`,
    );
    writeFileSync(external, 'a'.repeat(259));
    expect(() => resolveApiKey({ homePath: home, env: {}, externalPath: external })).toThrow(
      `secret file ${external} must be at most 258 bytes`,
    );
    rmSync(external);
    mkdirSync(external);
    expect(() => resolveApiKey({ homePath: home, env: {}, externalPath: external })).toThrow(
      `API key file ${external} must be a regular file`,
    );
  });

  it('3. the managed file', () => {
    const { home, external } = fresh();
    const file = join(privateSecretsDir(home), 'api-key');
    writeFileSync(file, `${KEY}\n`, { mode: 0o600 });
    expect(resolveApiKey({ homePath: home, env: {}, externalPath: external })).toEqual({
      key: KEY,
      source: 'managed-file',
      path: file,
    });
  });

  it('4. generates and stores a key (file 0600 with a newline, dir 0700), then reuses it', () => {
    const { home, external } = fresh();
    const first = resolveApiKey({ homePath: home, env: {}, externalPath: external });
    expect(first.source).toBe('generated');
    expect(first.key).toMatch(/^e2b_[0-9a-f]{64}$/);
    const file = join(home, 'secrets', 'api-key');
    expect(readFileSync(file, 'utf8')).toBe(`${first.key}\n`);
    expect(statSync(file).mode & 0o7777).toBe(0o600);
    expect(statSync(join(home, 'secrets')).mode & 0o7777).toBe(0o700);
    const second = resolveApiKey({ homePath: home, env: {}, externalPath: external });
    expect(second).toEqual({ key: first.key, source: 'managed-file', path: file });
  });

  it('refuses a managed key with the wrong mode, owner, or directory mode, and changes nothing', () => {
    const { home, external } = fresh();
    const dir = privateSecretsDir(home);
    const file = join(dir, 'api-key');
    writeFileSync(file, `${KEY}\n`);
    chmodSync(file, 0o644);
    expect(() => resolveApiKey({ homePath: home, env: {}, externalPath: external })).toThrow(
      `managed secret ${file} must have mode 0600, found 0644`,
    );
    expect(statSync(file).mode & 0o7777).toBe(0o644);
    chmodSync(file, 0o600);
    const otherUid = process.geteuid!() + 1;
    expect(() =>
      resolveApiKey({ homePath: home, env: {}, externalPath: external, expectedUid: otherUid }),
    ).toThrow(`managed secret directory ${dir} must be owned by uid ${otherUid}`);
    chmodSync(dir, 0o755);
    expect(() => resolveApiKey({ homePath: home, env: {}, externalPath: external })).toThrow(
      `managed secret directory ${dir} must have mode 0700, found 0755`,
    );
    expect(statSync(dir).mode & 0o7777).toBe(0o755);
    expect(readFileSync(file, 'utf8')).toBe(`${KEY}\n`);
  });

  it('refuses to generate into an existing secrets dir with the wrong mode', () => {
    const { home, external } = fresh();
    const dir = join(home, 'secrets');
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o750);
    expect(() => resolveApiKey({ homePath: home, env: {}, externalPath: external })).toThrow(
      /must have mode 0700, found 0750/,
    );
  });

  it('refuses an invalid managed key instead of replacing it', () => {
    const { home, external } = fresh();
    const file = join(privateSecretsDir(home), 'api-key');
    writeFileSync(file, 'short\n', { mode: 0o600 });
    expect(() => resolveApiKey({ homePath: home, env: {}, externalPath: external })).toThrow(
      `invalid API key from ${file}: must be 32-256 characters`,
    );
    expect(readFileSync(file, 'utf8')).toBe('short\n');
  });
});
