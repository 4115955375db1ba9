import { afterEach, describe, expect, it } from 'vitest';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentialsPath, readCredentials, resolveConnection, writeCredentials } from './config.js';
import { CliError } from './errors.js';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'aenv-cfg-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('resolveConnection', () => {
  const file = { url: 'http://file:1', apiKey: 'file-key' };

  it('takes each field from flag > AENV_* > E2B_* > file > default', () => {
    const env = {
      AENV_URL: 'http://aenv:1',
      AENV_API_KEY: 'aenv-key',
      E2B_API_URL: 'http://e2b:1',
      E2B_API_KEY: 'e2b',
    };
    expect(resolveConnection({ url: 'http://flag:1', apiKey: 'flag-key' }, env, () => file)).toEqual({
      url: 'http://flag:1',
      apiKey: 'flag-key',
    });
    expect(resolveConnection({}, env, () => file)).toEqual({ url: 'http://aenv:1', apiKey: 'aenv-key' });
    expect(resolveConnection({}, { E2B_API_URL: 'http://e2b:1', E2B_API_KEY: 'e2b' }, () => file)).toEqual({
      url: 'http://e2b:1',
      apiKey: 'e2b',
    });
    expect(resolveConnection({}, {}, () => file)).toEqual({ url: 'http://file:1', apiKey: 'file-key' });
    expect(resolveConnection({}, { AENV_API_KEY: 'k' }, () => undefined)).toEqual({
      url: 'http://localhost:8000',
      apiKey: 'k',
    });
    // Mixed: the URL from the env, the key from the file.
    expect(resolveConnection({}, { AENV_URL: 'http://aenv:1/' }, () => file)).toEqual({
      url: 'http://aenv:1',
      apiKey: 'file-key',
    });
  });

  it('does not read the file when flags and env give everything, and ignores blank values', () => {
    const never = () => {
      throw new Error('read');
    };
    expect(resolveConnection({ url: 'http://a:1' }, { AENV_API_KEY: 'k' }, never).apiKey).toBe('k');
    expect(
      resolveConnection({ apiKey: '  ' }, { AENV_API_KEY: 'k', AENV_URL: 'http://a:1' }, never).apiKey,
    ).toBe('k');
  });

  it('refuses a missing key and a URL that is not http(s)', () => {
    expect(() => resolveConnection({}, {}, () => undefined)).toThrow(/no API key configured/);
    for (const url of ['ftp://x', 'not a url', 'http://h:1/?q=1']) {
      const e = (() => {
        try {
          resolveConnection({ url, apiKey: 'k' }, {}, () => undefined);
        } catch (err) {
          return err;
        }
      })();
      expect(e).toBeInstanceOf(CliError);
      expect((e as CliError).kind).toBe('usage');
    }
  });
});

describe('the credentials file', () => {
  it('lives under XDG_CONFIG_HOME, else ~/.config', () => {
    expect(credentialsPath({ XDG_CONFIG_HOME: '/x', HOME: '/h' })).toBe('/x/aenv/credentials');
    expect(credentialsPath({ HOME: '/h' })).toBe('/h/.config/aenv/credentials');
  });

  it('is written 0600 in a 0700 directory and read back', () => {
    const path = join(tmp(), 'cfg', 'aenv', 'credentials');
    writeCredentials(path, { url: 'http://h:1', apiKey: 'k"ey' });
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(join(path, '..')).mode & 0o777).toBe(0o700);
    expect(readCredentials(path)).toEqual({ url: 'http://h:1', apiKey: 'k"ey' });
    writeCredentials(path, { url: 'http://h:2', apiKey: 'k2' });
    expect(readFileSync(path, 'utf8')).toBe('url = "http://h:2"\napi_key = "k2"\n');
  });

  it('is refused when others can read it, when it is a symlink, or when it has unknown keys', () => {
    const d = tmp();
    const path = join(d, 'credentials');
    expect(readCredentials(path)).toBeUndefined();
    writeFileSync(path, 'url = "http://h:1"\napi_key = "k"\n', { mode: 0o600 });
    chmodSync(path, 0o640);
    expect(() => readCredentials(path)).toThrow(/readable by others \(mode 640\)/);
    chmodSync(path, 0o600);
    const link = join(d, 'link');
    symlinkSync(path, link);
    expect(() => readCredentials(link)).toThrow(/not a regular file/);
    writeFileSync(path, 'url = "http://h:1"\nkey = "k"\n');
    expect(() => readCredentials(path)).toThrow(/unknown keys: key/);
    writeFileSync(path, 'url = 5\n');
    expect(() => readCredentials(path)).toThrow(/url must be a string/);
    writeFileSync(path, 'url = \n');
    expect(() => readCredentials(path)).toThrow(/not valid TOML/);
  });
});
