// The envd filesystem through the real e2b SDK: REST /files (text, bytes, streams, multipart, large files)
// and the filesystem RPCs (list, stat, rename, remove, makeDir, watchDir).
import { createHash, randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { FileType, FilesystemEventType, NotFoundError, Sandbox, type FilesystemEvent } from 'e2b';
import { ENVD_PORT, eventually, proxyFetch } from './harness.js';
import { describeNode } from './fixture.js';

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

async function collect(stream: ReadableStream<Uint8Array>): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

describe('files through the e2b SDK', () => {
  const { server } = describeNode({ name: 'files' });
  let sbx: Sandbox;

  beforeAll(async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: 'files' } });
  });

  it('writes and reads text relative to the home directory', async () => {
    const info = await sbx.files.write('notes/hello.txt', 'héllo wörld\n');
    expect(info).toMatchObject({
      name: 'hello.txt',
      path: '/home/user/notes/hello.txt',
      type: FileType.FILE,
    });
    expect(await sbx.files.read('/home/user/notes/hello.txt')).toBe('héllo wörld\n');
    expect(await sbx.files.read('~/notes/hello.txt')).toBe('héllo wörld\n');
    expect(
      (await sbx.commands.run('cat notes/hello.txt; stat -c "%U:%G %a" notes notes/hello.txt')).stdout,
    ).toBe('héllo wörld\nuser:user 755\nuser:user 644\n');
    // Overwrite replaces the content; an empty file reads back empty.
    await sbx.files.write('notes/hello.txt', 'short');
    expect(await sbx.files.read('notes/hello.txt')).toBe('short');
    await sbx.files.write('notes/empty', '');
    expect(await sbx.files.read('notes/empty')).toBe('');
    await expect(sbx.files.read('notes/missing.txt')).rejects.toBeInstanceOf(NotFoundError);
  });

  it('round-trips bytes, blobs and streams in both directions', async () => {
    const bytes = new Uint8Array(256).map((_, i) => i);
    await sbx.files.write('bin/all-bytes', bytes.buffer);
    expect(Buffer.from(await sbx.files.read('bin/all-bytes', { format: 'bytes' }))).toEqual(
      Buffer.from(bytes),
    );
    expect((await sbx.commands.run('od -An -tx1 -N4 -j254 bin/all-bytes')).stdout.trim()).toBe('fe ff');
    const blob = await sbx.files.read('bin/all-bytes', { format: 'blob' });
    expect(blob.size).toBe(256);

    const payload = randomBytes(300_000);
    let sent = 0;
    const upload = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent >= payload.length) return controller.close();
        controller.enqueue(payload.subarray(sent, sent + 65_536));
        sent += 65_536;
      },
    });
    await sbx.files.write('bin/streamed', upload);
    expect((await sbx.commands.run('sha256sum bin/streamed')).stdout.split(' ')[0]).toBe(sha256(payload));
    const back = await collect(await sbx.files.read('bin/streamed', { format: 'stream' }));
    expect(sha256(back)).toBe(sha256(payload));
  });

  it('uploads gzip and octet-stream bodies and downloads gzip on request', async () => {
    const text = 'compressible '.repeat(10_000);
    await sbx.files.write('enc/gz.txt', text, { gzip: true });
    await sbx.files.write('enc/raw.bin', new Uint8Array([0, 1, 2, 255]).buffer, { useOctetStream: true });
    expect(
      (await sbx.commands.run('wc -c < enc/gz.txt; od -An -tx1 enc/raw.bin')).stdout
        .split('\n')
        .map((l) => l.trim()),
    ).toEqual([String(text.length), '00 01 02 ff', '']);
    expect(await sbx.files.read('enc/gz.txt', { gzip: true })).toBe(text);
    expect((await sbx.files.getInfo('enc/gz.txt')).owner).toBe('user');
  });

  it('writes many files in one call', async () => {
    const entries = Array.from({ length: 12 }, (_, i) => ({
      path: `many/d${i % 3}/f${i}.txt`,
      data: `file ${i}`,
    }));
    const infos = await sbx.files.write(entries);
    expect(infos.map((i) => i.path)).toEqual(entries.map((e) => `/home/user/${e.path}`));
    const cat = await sbx.commands.run('for i in $(seq 0 11); do cat many/d$((i % 3))/f$i.txt; echo; done');
    expect(cat.stdout).toBe(entries.map((e) => `${e.data}\n`).join(''));
  });

  it('round-trips a 50 MB file with a matching checksum', async () => {
    const big = randomBytes(50 * 1024 * 1024);
    await sbx.files.write('big.bin', new Blob([Uint8Array.from(big)]));
    const inside = await sbx.commands.run('stat -c %s big.bin; sha256sum big.bin');
    const [size, sum] = inside.stdout.split('\n');
    expect(Number(size)).toBe(big.length);
    expect(sum!.split(' ')[0]).toBe(sha256(big));
    // Read back uncompressed: Node 20's fetch inflates incompressible gzip at about 1 MB/s, which is the
    // client's cost, not the server's (see the report); the SDK's own gzip path is covered with 3 MB below.
    const token = (await server.api('GET', `/sandboxes/${sbx.sandboxId}`)).body.envdAccessToken as string;
    const res = await proxyFetch(server, sbx.sandboxId, ENVD_PORT, '/files?path=big.bin&username=user', {
      headers: { 'accept-encoding': 'identity', 'x-access-token': token },
    });
    expect(res.status).toBe(200);
    const read = Buffer.from(await res.arrayBuffer());
    expect(read.length).toBe(big.length);
    expect(sha256(read)).toBe(sha256(big));
    await sbx.commands.run('head -c 3145728 big.bin > part.bin && rm big.bin');
    const part = await sbx.files.read('part.bin', { format: 'bytes' });
    expect(sha256(part)).toBe(sha256(big.subarray(0, 3 * 1024 * 1024)));
    await sbx.files.remove('part.bin');
  });

  it('lists with depth in pre-order, and answers exists and getInfo', async () => {
    await sbx.commands.run(
      'mkdir -p tree/b/deep/deeper tree/a && echo 1 > tree/z.txt && echo 22 > tree/a/one && ' +
        'echo 3 > tree/b/deep/two && chmod 700 tree/b && ln -s z.txt tree/link',
    );
    const depth1 = await sbx.files.list('tree');
    expect(depth1.map((e) => e.name)).toEqual(['a', 'b', 'link', 'z.txt']);
    const depth3 = await sbx.files.list('/home/user/tree', { depth: 3 });
    expect(depth3.map((e) => e.path.replace('/home/user/tree/', ''))).toEqual([
      'a',
      'a/one',
      'b',
      'b/deep',
      'b/deep/deeper',
      'b/deep/two',
      'link',
      'z.txt',
    ]);
    const byName = Object.fromEntries(depth1.map((e) => [e.name, e]));
    expect(byName.a!.type).toBe(FileType.DIR);
    expect(byName['z.txt']).toMatchObject({ type: FileType.FILE, size: 2, owner: 'user', group: 'user' });
    expect(byName.b!.permissions).toBe('drwx------');

    expect(await sbx.files.exists('tree/a/one')).toBe(true);
    expect(await sbx.files.exists('tree/nope')).toBe(false);

    const info = await sbx.files.getInfo('tree/a/one');
    expect(info).toMatchObject({
      name: 'one',
      path: '/home/user/tree/a/one',
      type: FileType.FILE,
      size: 3,
      owner: 'user',
      group: 'user',
      permissions: '-rw-r--r--',
    });
    expect(info.mode & 0o777).toBe(0o644);
    expect(info.modifiedTime!.getTime()).toBeGreaterThan(Date.now() - 600_000);
    const link = await sbx.files.getInfo('tree/link');
    expect(link.symlinkTarget).toBe('/home/user/tree/z.txt');
    const rootOwned = await sbx.files.getInfo('/etc/passwd');
    expect(rootOwned).toMatchObject({ owner: 'root', group: 'root' });
    await expect(sbx.files.getInfo('tree/nope')).rejects.toBeInstanceOf(NotFoundError);
    await expect(sbx.files.list('tree/nope')).rejects.toBeInstanceOf(NotFoundError);
  });

  it('renames, removes and makes directories', async () => {
    await sbx.files.write('mv/src.txt', 'moving');
    const moved = await sbx.files.rename('mv/src.txt', 'mv/sub/dst.txt').catch(async () => {
      // Move does not create parents on E2B either; make the parent and retry.
      await sbx.files.makeDir('mv/sub');
      return sbx.files.rename('mv/src.txt', 'mv/sub/dst.txt');
    });
    expect(moved.path).toBe('/home/user/mv/sub/dst.txt');
    expect(await sbx.files.exists('mv/src.txt')).toBe(false);
    expect(await sbx.files.read('mv/sub/dst.txt')).toBe('moving');
    await expect(sbx.files.rename('mv/none', 'mv/other')).rejects.toBeInstanceOf(NotFoundError);

    expect(await sbx.files.makeDir('made/a/b')).toBe(true);
    expect(await sbx.files.makeDir('made/a/b')).toBe(false);
    expect((await sbx.files.getInfo('made/a')).owner).toBe('user');

    await sbx.files.remove('mv');
    expect(await sbx.files.exists('mv')).toBe(false);
    // Removing what is not there is not an error (rm -rf).
    await sbx.files.remove('mv');
  });

  it('watches a directory recursively for create, write and remove', async () => {
    await sbx.files.makeDir('watched/inner');
    const events: FilesystemEvent[] = [];
    const handle = await sbx.files.watchDir('watched', (e) => void events.push(e), {
      recursive: true,
      timeoutMs: 0,
    });
    try {
      const seen = (name: string, type: FilesystemEventType) =>
        events.some((e) => e.name === name && e.type === type);
      await sbx.files.write('watched/top.txt', 'one');
      await eventually(() => seen('top.txt', FilesystemEventType.CREATE), 'create event');
      await sbx.commands.run('echo more >> watched/top.txt');
      await eventually(() => seen('top.txt', FilesystemEventType.WRITE), 'write event');
      await sbx.files.write('watched/inner/nested.txt', 'two');
      await eventually(() => seen('inner/nested.txt', FilesystemEventType.CREATE), 'nested create event');
      await sbx.files.remove('watched/top.txt');
      await eventually(() => seen('top.txt', FilesystemEventType.REMOVE), 'remove event');
    } finally {
      await handle.stop();
    }
    await expect(sbx.files.watchDir('no-such-dir', () => {})).rejects.toBeInstanceOf(NotFoundError);
  });
});
