import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { list as listTar } from 'tar';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { copySources, packFiles, putFile, readDockerignore } from './context-files.js';
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

describe('upload of the build files', () => {
  it('says the node cut the upload off, and why that usually is, when it closes without an answer', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aenv-put-'));
    const file = join(dir, 'files.tar.gz');
    writeFileSync(file, Buffer.alloc(8 * 1024 * 1024));
    const server = createServer((req) => req.socket.destroy());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/upload`;
      await expect(putFile(url, file, 8 * 1024 * 1024, 'test')).rejects.toThrow(
        /^the node closed the connection during the upload of the build files \(8388608 bytes\) without an answer \((write|read) (EPIPE|ECONNRESET)\): .*max_upload_mb/,
      );
    } finally {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
