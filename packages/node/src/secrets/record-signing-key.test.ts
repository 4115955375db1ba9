import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveRecordSigningKey } from './record-signing-key.js';

const root = mkdtempSync(join(tmpdir(), 'aenv-signing-key-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const home = () => {
  const h = join(root, `h${n++}`);
  mkdirSync(h);
  return h;
};

describe('snapshot record signing key (kept like the access-token seed)', () => {
  it('an explicit secret wins, creates nothing, and must not be blank', () => {
    const h = home();
    expect(
      resolveRecordSigningKey({ homePath: h, explicitSecret: ' s3cret ', sharedRepository: true }),
    ).toEqual({
      secret: 's3cret',
      source: 'config',
      warnings: [],
    });
    expect(() =>
      resolveRecordSigningKey({ homePath: h, explicitSecret: ' ', sharedRepository: false }),
    ).toThrow(/must be non-empty/);
    expect(() => statSync(join(h, 'secrets'))).toThrow();
  });

  it('otherwise creates a 0600 managed key once and reuses it; a shared repository gets a warning', () => {
    const h = home();
    const first = resolveRecordSigningKey({ homePath: h, sharedRepository: false });
    expect(first.source).toBe('generated');
    expect(first.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(first.warnings).toEqual([]);
    expect(statSync(first.path!).mode & 0o777).toBe(0o600);
    expect(statSync(join(h, 'secrets')).mode & 0o777).toBe(0o700);
    const again = resolveRecordSigningKey({ homePath: h, sharedRepository: true });
    expect(again).toMatchObject({ secret: first.secret, source: 'managed-file' });
    expect(again.warnings.join('\n')).toMatch(
      /AENV_SNAPSHOT_RECORD_SIGNING_SECRET with the same value on every node/,
    );
  });

  it('refuses a malformed or loosely protected managed key without replacing it', () => {
    const h = home();
    mkdirSync(join(h, 'secrets'), { mode: 0o700 });
    chmodSync(join(h, 'secrets'), 0o700);
    const path = join(h, 'secrets', 'snapshot-record-signing-key');
    writeFileSync(path, 'short\n', { mode: 0o600 });
    expect(() => resolveRecordSigningKey({ homePath: h, sharedRepository: false })).toThrow(/64 lowercase/);
    chmodSync(path, 0o644);
    expect(() => resolveRecordSigningKey({ homePath: h, sharedRepository: false })).toThrow(/mode 0600/);
    expect(readFileSync(path, 'utf8')).toBe('short\n');
  });
});
