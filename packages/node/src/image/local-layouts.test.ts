// Local layouts (oci:, oci-archive:) are read below an allowed directory only, without following symlinks,
// size-capped, and their content never appears in an error message (docs/images.md#local-layouts).

import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { httpErrorAnswer } from '@aenv/protocol';
import { ImageError } from './errors.js';
import { containedPath, type ContainedPath } from './local-files.js';
import { extractOciArchive, fileStamp, OciLayoutSource } from './sources.js';
import { buildImage, writeArchive, writeLayout } from './testing/oci-builder.js';

const base = mkdtempSync(join(tmpdir(), 'aenv-local-layouts-'));
const allowed = join(base, 'allowed');
const outside = join(base, 'outside');
mkdirSync(allowed);
mkdirSync(outside);
afterAll(() => rmSync(base, { recursive: true, force: true }));

// Stands in for a host file an attacker wants to read (/etc/shadow): its content must never come back.
const SECRET = 'root:$6$not-a-real-hash:19000:0:99999:7:::';
const secretFile = join(outside, 'shadow');
writeFileSync(secretFile, `${SECRET}\n`);

const img = buildImage({ layers: [{ entries: [{ name: 'hello.txt', content: 'hi' }] }] });

function layout(name: string): string {
  const dir = join(allowed, name);
  writeLayout(dir, [{ tag: 'latest', item: img }]);
  return dir;
}

function at(path: string): ContainedPath {
  const p = containedPath([allowed], path);
  if (!p) throw new Error(`${path} is not below ${allowed}`);
  return p;
}

async function failure(p: Promise<unknown>): Promise<ImageError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e, 'expected a failure').toBeInstanceOf(ImageError);
  expect((e as ImageError).message).not.toContain('root:');
  expect((e as ImageError).message).not.toContain('not-a-real-hash');
  return e as ImageError;
}

const root = (dir: string) => new OciLayoutSource(at(dir), 'latest', `oci:${dir}:latest`).fetchRoot();

describe('oci: layouts below an allowed directory', () => {
  it('reads a plain layout', async () => {
    const r = await root(layout('plain'));
    expect(r.digest).toBe(img.manifest.digest);
  });

  it('refuses a layout directory that is a symlink out of the allowed directory', async () => {
    const real = join(outside, 'layout');
    writeLayout(real, [{ tag: 'latest', item: img }]);
    symlinkSync(real, join(allowed, 'linked'));
    const e = await failure(root(join(allowed, 'linked')));
    expect(e.reason).toBe('InvalidReference');
    expect(e.message).toMatch(/symbolic link/);
  });

  it('refuses a symlink to a host file planted as index.json or oci-layout, without echoing it', async () => {
    for (const name of ['index.json', 'oci-layout']) {
      const dir = layout(`planted-${name}`);
      rmSync(join(dir, name));
      symlinkSync(secretFile, join(dir, name));
      const e = await failure(root(dir));
      expect(e.message).toMatch(/symbolic link/);
    }
  });

  it('refuses a symlinked blobs directory and a symlinked blob', async () => {
    const dir = layout('linked-blobs');
    execFileSync('mv', [join(dir, 'blobs'), join(outside, 'blobs-elsewhere')]);
    symlinkSync(join(outside, 'blobs-elsewhere'), join(dir, 'blobs'));
    expect((await failure(root(dir))).message).toMatch(/blobs is a symbolic link/);

    const dir2 = layout('linked-blob');
    const blob = join(dir2, 'blobs', 'sha256', img.manifest.digest.slice(7));
    rmSync(blob);
    symlinkSync(secretFile, blob);
    expect((await failure(root(dir2))).message).toMatch(/symbolic link/);
  });

  it('never quotes file content in a parse error', async () => {
    const dir = layout('shadow-copy');
    writeFileSync(join(dir, 'index.json'), `${SECRET}\n`);
    const e = await failure(root(dir));
    expect(e.reason).toBe('UnsupportedImage');
    expect(e.message).toMatch(/not valid JSON/);
  });

  it('refuses a FIFO instead of blocking on it', async () => {
    const dir = layout('fifo');
    rmSync(join(dir, 'index.json'));
    execFileSync('mkfifo', [join(dir, 'index.json')]);
    const e = await failure(root(dir));
    expect(e.message).toMatch(/not a regular file/);
  });

  it('caps the size of what it reads (a huge sparse index.json is refused before reading)', async () => {
    const dir = layout('huge');
    truncateSync(join(dir, 'index.json'), 1024 ** 3);
    const e = await failure(root(dir));
    expect(e.reason).toBe('TooLarge');
    expect(httpErrorAnswer(e.kind).status).toBe(413);
  });

  it('a blob whose file is larger than its descriptor is refused before it is read', async () => {
    const dir = layout('big-blob');
    const blob = join(dir, 'blobs', 'sha256', img.manifest.digest.slice(7));
    truncateSync(blob, 512 * 1024 ** 2);
    const e = await failure(root(dir));
    expect(e.reason).toBe('DigestMismatch');
    expect(e.message).toMatch(/size mismatch/);
  });
});

describe('oci-archive: files below an allowed directory', () => {
  it('extracts a real archive; refuses a symlinked one; refuses one over the size limit', async () => {
    const src = layout('for-archive');
    const file = join(allowed, 'image.tar');
    writeArchive(src, file);
    const out = mkdtempSync(join(base, 'x-'));
    await extractOciArchive(at(file), 'oci-archive:test', out, 64 * 1024 ** 2);
    expect((await new OciLayoutSource({ root: out, components: [] }, 'latest', 'x').fetchRoot()).digest).toBe(
      img.manifest.digest,
    );
    expect(await fileStamp(at(file))).toMatch(/^\d+:\d+:\d+:/);

    symlinkSync(secretFile, join(allowed, 'shadow.tar'));
    const linked = await failure(extractOciArchive(at(join(allowed, 'shadow.tar')), 'a', out, 1 << 30));
    expect(linked.message).toMatch(/symbolic link/);
    expect((await failure(fileStamp(at(join(allowed, 'shadow.tar'))))).message).toMatch(/symbolic link/);

    const huge = join(allowed, 'huge.tar');
    writeFileSync(huge, '');
    truncateSync(huge, 8 * 1024 ** 3);
    const big = await failure(extractOciArchive(at(huge), 'a', out, 1024 ** 3));
    expect(big.reason).toBe('TooLarge');
  });
});
