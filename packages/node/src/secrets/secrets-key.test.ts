import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveSecretsKey } from './secrets-key.js';

const root = mkdtempSync(join(tmpdir(), 'aenv-secrets-key-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const home = () => {
  const h = join(root, `h${n++}`);
  mkdirSync(h);
  return h;
};
const HEX = 'ab'.repeat(32);

describe('/secrets encryption key (kept like the access-token seed)', () => {
  it('an explicit key wins (any case, trimmed), creates nothing, and gets no cluster warning', () => {
    const h = home();
    const r = resolveSecretsKey({
      homePath: h,
      explicitKey: ` ${HEX.toUpperCase()} `,
      schedulerEndpoint: 'http://127.0.0.1:1',
    });
    expect(r).toEqual({ key: Buffer.from(HEX, 'hex'), source: 'config', warnings: [] });
    expect(() => statSync(join(h, 'secrets'))).toThrow();
  });

  it.each([
    ['', 'blank'],
    ['ab'.repeat(31), 'short'],
    [`${HEX}00`, 'long'],
    ['zz'.repeat(32), 'not hex'],
  ])('refuses a %s key (%s) naming the variable, never echoing it', (key) => {
    let message = '';
    try {
      resolveSecretsKey({ homePath: home(), explicitKey: key });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/AENV_SECRETS_ENCRYPTION_KEY\) must be exactly 64 hexadecimal characters/);
    if (key) expect(message).not.toContain(key);
  });

  it('otherwise creates a 0600 managed key once and reuses it; a cluster node gets a warning', () => {
    const h = home();
    const first = resolveSecretsKey({ homePath: h });
    expect(first.source).toBe('generated');
    expect(first.key).toHaveLength(32);
    expect(first.warnings).toEqual([]);
    expect(statSync(first.path!).mode & 0o777).toBe(0o600);
    const again = resolveSecretsKey({ homePath: h, schedulerEndpoint: 'http://127.0.0.1:1' });
    expect(again).toMatchObject({ key: first.key, source: 'managed-file' });
    expect(again.warnings.join('\n')).toMatch(
      /AENV_SECRETS_ENCRYPTION_KEY with the same value on every node/,
    );
  });

  it('refuses a malformed or loosely protected managed key without replacing it', () => {
    const h = home();
    mkdirSync(join(h, 'secrets'), { mode: 0o700 });
    chmodSync(join(h, 'secrets'), 0o700);
    const path = join(h, 'secrets', 'secrets-key');
    writeFileSync(path, 'short\n', { mode: 0o600 });
    expect(() => resolveSecretsKey({ homePath: h })).toThrow(/64 lowercase/);
    chmodSync(path, 0o644);
    expect(() => resolveSecretsKey({ homePath: h })).toThrow(/mode 0600/);
    expect(readFileSync(path, 'utf8')).toBe('short\n');
  });
});
