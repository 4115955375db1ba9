import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createManagedSecret, readManagedSecret } from './managed-secret.js';

const root = mkdtempSync(join(tmpdir(), 'aenv-managed-secret-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = () => join(root, `h${n++}`, 'secrets', 'x');

describe('managed secrets', () => {
  it('returns undefined when the directory or the file is missing', () => {
    const path = fresh();
    expect(readManagedSecret(path, 10)).toBeUndefined();
    mkdirSync(join(path, '..'), { recursive: true, mode: 0o700 });
    chmodSync(join(path, '..'), 0o700);
    expect(readManagedSecret(path, 10)).toBeUndefined();
  });

  it('requires the directory to be named "secrets"', () => {
    expect(() => readManagedSecret(join(root, 'elsewhere', 'x'), 10)).toThrow(/must be named "secrets"/);
    expect(() => createManagedSecret(join(root, 'elsewhere', 'x'), 'v', 10)).toThrow(
      /must be named "secrets"/,
    );
  });

  it('creates without clobbering: an existing file wins and is returned', () => {
    const path = fresh();
    expect(createManagedSecret(path, 'first\n', 10)).toEqual({ created: true, contents: 'first\n' });
    expect(createManagedSecret(path, 'second\n', 10)).toEqual({ created: false, contents: 'first\n' });
    expect(readFileSync(path, 'utf8')).toBe('first\n');
    expect(readdirSync(join(path, '..'))).toEqual(['x']);
  });

  it('creates the directory 0700 even under a permissive umask', () => {
    const old = process.umask(0o000);
    try {
      const path = fresh();
      createManagedSecret(path, 'v', 10);
      expect(statSync(join(path, '..')).mode & 0o7777).toBe(0o700);
      expect(statSync(path).mode & 0o7777).toBe(0o600);
    } finally {
      process.umask(old);
    }
  });

  it('removes temp files left by a crashed (dead) writer, keeps live ones', () => {
    const path = fresh();
    const dir = join(path, '..');
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o700);
    const deadPid = 2 ** 22 + 12345; // above pid_max's default ceiling: never a live process
    writeFileSync(join(dir, `.x.${deadPid}.abcdef.tmp`), 'partial');
    writeFileSync(join(dir, `.x.${process.pid}.abcdef.tmp`), 'in flight');
    writeFileSync(join(dir, 'unrelated'), 'keep');
    createManagedSecret(path, 'v', 10);
    expect(readdirSync(dir).sort()).toEqual([`.x.${process.pid}.abcdef.tmp`, 'unrelated', 'x']);
  });

  it('bounds the size before reading', () => {
    const path = fresh();
    createManagedSecret(path, '0123456789', 10);
    expect(readManagedSecret(path, 10)).toBe('0123456789');
    expect(() => readManagedSecret(path, 9)).toThrow(`managed secret ${path} must be at most 9 bytes`);
  });

  it('refuses a directory owned by someone else', () => {
    const path = fresh();
    createManagedSecret(path, 'v', 10);
    const other = process.geteuid!() + 1;
    expect(() => readManagedSecret(path, 10, { expectedUid: other })).toThrow(
      `managed secret directory ${join(path, '..')} must be owned by uid ${other}, found uid ${process.geteuid!()}`,
    );
  });

  it.skipIf(process.geteuid!() !== 0)('refuses a file owned by someone else (needs root to chown)', () => {
    const path = fresh();
    createManagedSecret(path, 'v', 10);
    chownSync(path, 65534, 65534);
    expect(() => readManagedSecret(path, 10)).toThrow(
      `managed secret ${path} must be owned by uid ${process.geteuid!()}, found uid 65534`,
    );
  });

  it('refuses a file that is not regular', () => {
    const path = fresh();
    mkdirSync(path, { recursive: true });
    chmodSync(join(path, '..'), 0o700);
    expect(() => readManagedSecret(path, 10)).toThrow(`managed secret ${path} must be a regular file`);
  });
});
