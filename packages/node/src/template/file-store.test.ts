import { execFileSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
  readdirSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorKind } from '@aenv/protocol';
import { TemplateFileStore, UploadError } from './file-store.js';

const HASH = 'c'.repeat(64);
const dirs: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'tfiles-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function newStore(max = 1024 * 1024): Promise<TemplateFileStore> {
  const s = new TemplateFileStore({ dir: tmp(), secret: 'k', maxUploadBytes: max });
  await s.init();
  return s;
}

/** A real tar(.gz) of a small context dir, as the SDK uploads it. */
function archive(gzip: boolean, extra?: (ctx: string) => void): Buffer {
  const ctx = tmp();
  writeFileSync(join(ctx, 'hello.txt'), 'hello\n');
  mkdirSync(join(ctx, 'dir'));
  writeFileSync(join(ctx, 'dir', 'a.txt'), 'a\n');
  extra?.(ctx);
  const out = join(tmp(), 'up.tar');
  execFileSync('tar', [gzip ? '-czf' : '-cf', out, '-C', ctx, ...readdirSync(ctx)]);
  return readFileSync(out);
}

async function rejects(p: Promise<unknown>, kind: ErrorKind, re: RegExp): Promise<void> {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(UploadError);
  expect((e as UploadError).kind).toBe(kind);
  expect((e as Error).message).toMatch(re);
}

describe('template file store', () => {
  it('stores tar and tar.gz uploads by hash and keeps the first copy', async () => {
    const s = await newStore();
    expect(s.hasSync(HASH)).toBe(false);
    const gz = archive(true);
    const stored = await s.store(HASH, Readable.from([gz]), gz.length);
    expect(stored).toMatchObject({ gzip: true, size: gz.length });
    expect(s.hasSync(HASH)).toBe(true);
    expect(readFileSync(stored.path)).toEqual(gz);
    const plain = archive(false);
    const again = await s.store(HASH, Readable.from([plain]), plain.length);
    expect(again.path).toBe(stored.path);
    const other = await s.store('d'.repeat(64), Readable.from([plain]));
    expect(other.gzip).toBe(false);
  });

  it('rejects what is not a tar of relative paths, too large, or cut short', async () => {
    const s = await newStore(64 * 1024);
    await rejects(
      s.store(HASH, Readable.from([Buffer.from('not a tar at all')])),
      ErrorKind.InvalidArgument,
      /not a valid tar/,
    );
    await rejects(s.store(HASH, Readable.from([Buffer.alloc(0)])), ErrorKind.InvalidArgument, /empty/);
    await rejects(s.store(HASH, Readable.from([Buffer.alloc(70 * 1024, 1)])), ErrorKind.TooLarge, /limit/);
    await rejects(
      s.store(HASH, Readable.from([Buffer.alloc(10)]), 70 * 1024),
      ErrorKind.TooLarge,
      /larger than the limit/,
    );
    const gz = archive(true);
    await rejects(
      s.store(HASH, Readable.from([gz]), gz.length + 5),
      ErrorKind.InvalidArgument,
      /ended after/,
    );
    const evil = archive(false, (ctx) => symlinkSync('/etc', join(ctx, 'l')));
    // a symlink alone is fine ...
    await s.store('e'.repeat(64), Readable.from([evil]));
    // ... an entry below it is not; nor are ".." paths
    const outside = tmp();
    writeFileSync(join(outside, 'x'), 'x');
    const bad = join(tmp(), 'bad.tar');
    execFileSync('tar', ['-cf', bad, '-C', outside, '--transform', 's,^x$,../x,', 'x']);
    await rejects(
      s.store(HASH, Readable.from([readFileSync(bad)])),
      ErrorKind.InvalidArgument,
      /leaves the build context/,
    );
    expect(s.hasSync(HASH)).toBe(false);
    expect(readdirSync(join(s['opts'].dir, 'tmp'))).toEqual([]);
  });

  it('signs upload links per template and hash, with an expiry', async () => {
    const s = await newStore();
    const now = Date.now();
    const t = s.uploadToken('tpl', HASH, now);
    expect(s.verifyToken('tpl', HASH, t, now)).toBe('ok');
    expect(s.verifyToken('other', HASH, t, now)).toBe('invalid');
    expect(s.verifyToken('tpl', 'f'.repeat(64), t, now)).toBe('invalid');
    expect(
      s.verifyToken(
        'tpl',
        HASH,
        t.replace(/.$/, (c) => (c === '0' ? '1' : '0')),
        now,
      ),
    ).toBe('invalid');
    expect(s.verifyToken('tpl', HASH, 'garbage', now)).toBe('invalid');
    expect(s.verifyToken('tpl', HASH, t, now + 2 * 3600_000)).toBe('expired');
  });

  it('evicts uploads unused for a while', async () => {
    const s = await newStore();
    const plain = archive(false);
    const a = await s.store(HASH, Readable.from([plain]));
    await s.store('d'.repeat(64), Readable.from([plain]));
    const old = new Date(Date.now() - 10 * 86400_000);
    utimesSync(a.path, old, old);
    expect(await s.gc(86400_000)).toEqual([HASH]);
    expect(s.hasSync(HASH)).toBe(false);
    expect(s.hasSync('d'.repeat(64))).toBe(true);
  });
});
