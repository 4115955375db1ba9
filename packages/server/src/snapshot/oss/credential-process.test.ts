import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
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
