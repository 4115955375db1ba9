import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writeTrustFiles } from './trust-files.js';

const root = mkdtempSync(join(tmpdir(), 'aenv-trust-files-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const CA = '-----BEGIN CERTIFICATE-----\nMIIBnodeCA\n-----END CERTIFICATE-----\n';
const PUBLIC = '-----BEGIN CERTIFICATE-----\nMIIBpublic\n-----END CERTIFICATE-----\n';
let n = 0;

/** A sandbox dir: one image layer with `files`, an empty upper. */
function sandbox(files: Record<string, string>, dirs: string[] = []) {
  const dir = join(root, `s${n++}`);
  const lower = join(dir, 'lower');
  const upper = join(dir, 'upper');
  mkdirSync(upper, { recursive: true });
  for (const d of dirs) mkdirSync(join(lower, d), { recursive: true });
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(join(lower, rel, '..'), { recursive: true });
    writeFileSync(join(lower, rel), content);
  }
  const input = { upperDir: upper, lowerDirs: [lower], caPem: CA, rootUid: process.getuid!() };
  return { lower, upper, input };
}

describe('the egress CA in a sandbox trust store', () => {
  it("appends the CA to the image's bundle in the upper, leaving the layer untouched, and adds the CA alone", async () => {
    const s = sandbox({ 'etc/ssl/certs/ca-certificates.crt': PUBLIC }, ['usr/local/share/ca-certificates']);
    writeTrustFiles(s.input);
    const bundle = readFileSync(join(s.upper, 'etc/ssl/certs/ca-certificates.crt'), 'utf8');
    expect(bundle.startsWith(PUBLIC)).toBe(true);
    expect(bundle.endsWith(CA)).toBe(true);
    expect(readFileSync(join(s.lower, 'etc/ssl/certs/ca-certificates.crt'), 'utf8')).toBe(PUBLIC);
    expect(readFileSync(join(s.upper, 'etc/ssl/certs/aenv-egress-ca.pem'), 'utf8')).toBe(CA);
    expect(readFileSync(join(s.upper, 'usr/local/share/ca-certificates/aenv-egress-ca.crt'), 'utf8')).toBe(
      CA,
    );
    expect(statSync(join(s.upper, 'etc/ssl/certs/ca-certificates.crt')).mode & 0o777).toBe(0o644);
    // Bundles the image does not have are not invented.
    expect(() => statSync(join(s.upper, 'etc/pki'))).toThrow();
  });

  it('boots again without stacking copies, keeping what the sandbox changed in its bundle', async () => {
    const s = sandbox({ 'etc/ssl/certs/ca-certificates.crt': PUBLIC });
    writeTrustFiles(s.input);
    const path = join(s.upper, 'etc/ssl/certs/ca-certificates.crt');
    const ino = statSync(path).ino;
    writeTrustFiles(s.input);
    expect(statSync(path).ino).toBe(ino);
    writeFileSync(path, readFileSync(path, 'utf8') + 'added by the sandbox\n');
    writeTrustFiles(s.input);
    const bundle = readFileSync(path, 'utf8');
    expect(bundle.split('BEGIN CERTIFICATE').length - 1).toBe(2);
    expect(bundle).toContain('added by the sandbox');
    expect(bundle.endsWith(CA)).toBe(true);
  });

  it('never follows a symlink, in the image or in the upper', async () => {
    const outside = join(root, `outside${n}`);
    writeFileSync(outside, PUBLIC);
    // The image links its bundle (and a whole directory) out of the layer.
    const a = sandbox({});
    mkdirSync(join(a.lower, 'etc/ssl/certs'), { recursive: true });
    symlinkSync(outside, join(a.lower, 'etc/ssl/certs/ca-certificates.crt'));
    mkdirSync(join(a.lower, 'etc/pki/tls'), { recursive: true });
    symlinkSync(root, join(a.lower, 'etc/pki/tls/certs'));
    writeTrustFiles(a.input);
    expect(readFileSync(outside, 'utf8')).toBe(PUBLIC);
    expect(() => statSync(join(a.upper, 'etc/ssl/certs/ca-certificates.crt'))).toThrow();
    // The sandbox replaced a directory of the path with a link to the host.
    const b = sandbox({ 'etc/ssl/certs/ca-certificates.crt': PUBLIC });
    mkdirSync(join(b.upper, 'etc/ssl'), { recursive: true });
    const target = join(root, `target${n}`);
    mkdirSync(target);
    symlinkSync(target, join(b.upper, 'etc/ssl/certs'));
    writeTrustFiles(b.input);
    expect(() => statSync(join(target, 'ca-certificates.crt'))).toThrow();
    expect(() => statSync(join(target, 'aenv-egress-ca.pem'))).toThrow();
  });
});
