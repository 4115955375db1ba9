import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  credentialProcessEnv,
  credentialProcessProvider,
  parseCredentialProcessOutput,
  splitCommandLine,
} from './credential-process.js';
import { normalizePrefix, usesPathStyle } from './s3-client.js';

describe('credential_process', () => {
  it('splits a command line into argv without a shell', () => {
    expect(splitCommandLine('/usr/bin/creds --profile prod')).toEqual([
      '/usr/bin/creds',
      '--profile',
      'prod',
    ]);
    expect(splitCommandLine(`tool "a b" 'c d' e\\ f "x\\"y" ''`)).toEqual([
      'tool',
      'a b',
      'c d',
      'e f',
      'x"y',
      '',
    ]);
    expect(splitCommandLine('echo $HOME; rm -rf /')).toEqual(['echo', '$HOME;', 'rm', '-rf', '/']);
    expect(() => splitCommandLine('tool "open')).toThrow(/unterminated/);
  });

  it('parses the AWS Version 1 output format', () => {
    const c = parseCredentialProcessOutput(
      JSON.stringify({
        Version: 1,
        AccessKeyId: 'AK',
        SecretAccessKey: 'SK',
        SessionToken: 'T',
        Expiration: '2030-01-01T00:00:00Z',
      }),
    );
    expect(c).toEqual({
      accessKeyId: 'AK',
      secretAccessKey: 'SK',
      sessionToken: 'T',
      expiration: new Date('2030-01-01T00:00:00Z'),
    });
    expect(() => parseCredentialProcessOutput('nope')).toThrow(/did not print JSON/);
    expect(() =>
      parseCredentialProcessOutput(JSON.stringify({ Version: 2, AccessKeyId: 'A', SecretAccessKey: 'S' })),
    ).toThrow(/Version/);
    expect(() => parseCredentialProcessOutput(JSON.stringify({ Version: 1, AccessKeyId: 'A' }))).toThrow(
      /SecretAccessKey/,
    );
  });

  it('runs the process, caches until near expiry, and never leaks stdout in errors', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aenv-creds-'));
    try {
      const counter = join(dir, 'count');
      const script = join(dir, 'creds.mjs');
      await writeFile(
        script,
        `import { appendFileSync } from 'node:fs';
appendFileSync(${JSON.stringify(counter)}, 'x');
const exp = new Date(Date.now() + Number(process.argv[2]) * 1000).toISOString();
console.log(JSON.stringify({ Version: 1, AccessKeyId: 'AK', SecretAccessKey: 'SECRET', Expiration: exp }));\n`,
      );
      const { readFile } = await import('node:fs/promises');
      const longLived = credentialProcessProvider([process.execPath, script, '3600']);
      expect((await longLived()).accessKeyId).toBe('AK');
      await longLived();
      expect(await readFile(counter, 'utf8')).toBe('x');
      const shortLived = credentialProcessProvider([process.execPath, script, '60']);
      await shortLived();
      await shortLived();
      expect(await readFile(counter, 'utf8')).toBe('xxx'); // expires within the refresh margin: re-run
      const leaky = credentialProcessProvider([
        process.execPath,
        '-e',
        'console.log("SECRET-IN-STDOUT"); process.exit(2)',
      ]);
      const err = await leaky().catch((e: Error) => e);
      expect(String(err)).toMatch(/exited with 2/);
      expect(String(err)).not.toMatch(/SECRET-IN-STDOUT/);
      await expect(credentialProcessProvider(['/nonexistent/creds'])()).rejects.toThrow(
        /credential_process \/nonexistent\/creds failed/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('credential_process environment', () => {
  it('runs with the basics and the AWS settings only: no API key, seed or other secret', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aenv-creds-env-'));
    const planted = {
      AENV_API_KEY: 'e2b_planted_api_key_0123456789abcdef',
      E2B_API_KEY: 'e2b_planted_sdk_key_0123456789abcdef',
      AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: 'planted-seed-0123456789',
      SOME_SERVICE_PASSWORD: 'planted-password',
      UNRELATED_SETTING: 'planted-unrelated',
      AWS_PROFILE: 'aenv-test-profile',
    };
    const saved = Object.fromEntries(Object.keys(planted).map((k) => [k, process.env[k]]));
    Object.assign(process.env, planted);
    try {
      const out = join(dir, 'env.json');
      const script = join(dir, 'creds.mjs');
      await writeFile(
        script,
        `import { writeFileSync } from 'node:fs';
writeFileSync(${JSON.stringify(out)}, JSON.stringify(process.env));
console.log(JSON.stringify({ Version: 1, AccessKeyId: 'AK', SecretAccessKey: 'SK' }));\n`,
      );
      await credentialProcessProvider([process.execPath, script])();
      const { readFile } = await import('node:fs/promises');
      const seen = JSON.parse(await readFile(out, 'utf8')) as Record<string, string>;
      expect(seen.PATH).toBe(process.env.PATH);
      expect(seen.AWS_PROFILE).toBe('aenv-test-profile');
      for (const k of Object.keys(planted).filter((k) => k !== 'AWS_PROFILE'))
        expect(seen).not.toHaveProperty(k);
      expect(JSON.stringify(seen)).not.toMatch(/planted/);
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('keeps only what passes the allow-list', () => {
    expect(
      credentialProcessEnv({
        PATH: '/bin',
        HOME: '/root',
        LC_ALL: 'C',
        AWS_CONFIG_FILE: '/etc/aws',
        https_proxy: 'http://127.0.0.1:3128',
        AENV_API_KEY: 'k',
        NODE_OPTIONS: '--require /tmp/x.js',
      }),
    ).toEqual({
      PATH: '/bin',
      HOME: '/root',
      LC_ALL: 'C',
      AWS_CONFIG_FILE: '/etc/aws',
      https_proxy: 'http://127.0.0.1:3128',
    });
  });
});

describe('S3 client settings', () => {
  it('chooses path-style addressing for IP literals and localhost under auto', () => {
    expect(usesPathStyle(new URL('http://127.0.0.1:9000'), undefined)).toBe(true);
    expect(usesPathStyle(new URL('http://[::1]:9000'), 'auto')).toBe(true);
    expect(usesPathStyle(new URL('http://localhost:9000'), 'auto')).toBe(true);
    expect(usesPathStyle(new URL('https://s3.example.test'), 'auto')).toBe(false);
    expect(usesPathStyle(new URL('https://s3.example.test'), 'path')).toBe(true);
    expect(usesPathStyle(new URL('http://127.0.0.1:9000'), 'virtual')).toBe(false);
  });

  it('normalises the key prefix to end with a slash', () => {
    expect(normalizePrefix(undefined)).toBe('');
    expect(normalizePrefix('')).toBe('');
    expect(normalizePrefix('aenv')).toBe('aenv/');
    expect(normalizePrefix('/aenv/prod/')).toBe('aenv/prod/');
  });
});
