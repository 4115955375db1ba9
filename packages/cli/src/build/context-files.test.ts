import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { list as listTar } from 'tar';
import { copySources, packFiles, readDockerignore } from './context-files.js';
import type { CopyStep } from './dockerfile.js';

const step = (src: string, dest = '/dst/'): CopyStep => ({ kind: 'copy', line: 7, src, dest });

describe('COPY sources of a build context', () => {
  let ctx: string;
  let outside: string;
  beforeAll(() => {
    ctx = mkdtempSync(join(tmpdir(), 'aenv-ctx-'));
    outside = mkdtempSync(join(tmpdir(), 'aenv-outside-'));
    writeFileSync(join(outside, 'secret'), 'no');
    mkdirSync(join(ctx, 'app', 'lib'), { recursive: true });
    writeFileSync(join(ctx, 'app', 'main.py'), 'print(1)\n');
    writeFileSync(join(ctx, 'app', 'lib', 'util.py'), 'x = 1\n');
    writeFileSync(join(ctx, 'app', 'debug.log'), 'noise');
    writeFileSync(join(ctx, 'a.txt'), 'a');
    writeFileSync(join(ctx, 'b.txt'), 'b');
    writeFileSync(join(ctx, '.dockerignore'), '# logs\n**/*.log\n');
    symlinkSync(outside, join(ctx, 'out'));
  });
  afterAll(() => {
    rmSync(ctx, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
  });

  it('takes a directory tree without what .dockerignore excludes, and globs', async () => {
    const ig = await readDockerignore(ctx);
    const app = await copySources(ctx, step('app'), ig);
    expect(app.paths).toEqual(['app', 'app/lib', 'app/lib/util.py', 'app/main.py']);
    expect(app.filesHash).toMatch(/^[0-9a-f]{64}$/);
    expect((await copySources(ctx, step('*.txt'), ig)).paths).toEqual(['a.txt', 'b.txt']);
    const packed = await packFiles(ctx, app.paths);
    try {
      const entries: string[] = [];
      await listTar({ file: packed.path, onReadEntry: (e) => void entries.push(e.path) });
      expect(entries).toEqual(['app/', 'app/lib/', 'app/lib/util.py', 'app/main.py']);
    } finally {
      await packed.cleanup();
    }
  });

  it('hashes contents and the destination, so a change is a new upload', async () => {
    const ig = await readDockerignore(ctx);
    const before = (await copySources(ctx, step('a.txt'), ig)).filesHash;
    expect((await copySources(ctx, step('a.txt'), ig)).filesHash).toBe(before);
    expect((await copySources(ctx, step('a.txt', '/other/'), ig)).filesHash).not.toBe(before);
    writeFileSync(join(ctx, 'a.txt'), 'changed');
    expect((await copySources(ctx, step('a.txt'), ig)).filesHash).not.toBe(before);
  });

  it('refuses a missing source, an excluded one and one reached through a link out of the context', async () => {
    const ig = await readDockerignore(ctx);
    await expect(copySources(ctx, step('nope.txt'), ig)).rejects.toMatchObject({
      reason: 'missing',
      message: expect.stringMatching(/^Dockerfile line 7: COPY nope.txt: no such file or directory/),
    });
    await expect(copySources(ctx, step('app/debug.log'), ig)).rejects.toThrow(/excluded by .dockerignore/);
    await expect(copySources(ctx, step('out/secret'), ig)).rejects.toThrow(
      /out\/secret is outside the build context \(through a symbolic link\)/,
    );
  });
});
