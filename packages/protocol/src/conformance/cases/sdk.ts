// The real e2b SDK against envd: commands, PTYs, files, watchers and path handling, as an SDK user sees them.
import { randomBytes } from 'node:crypto';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  AuthenticationError,
  CommandExitError,
  FileType,
  FilesystemEventType,
  InvalidArgumentError,
  NotEnoughSpaceError,
  NotFoundError,
  SandboxError,
  TimeoutError,
  type FilesystemEvent,
  type Sandbox,
} from 'e2b';
import { lacks } from '../helpers.js';
import { SDK } from '../profiles.js';
import type { ConformanceTarget, TargetSandbox } from '../target.js';

export function sdkCases(target: ConformanceTarget): void {
  describe('e2b SDK', () => {
    let ids: TargetSandbox;
    let sbx: Sandbox;
    beforeAll(async () => {
      ids = await target.sandbox(SDK);
      sbx = ids.sdk();
    });
    afterEach((ctx) => {
      if (ctx.task.result?.state === 'fail' && ids?.logs)
        console.error(`envd log tail:\n${ids.logs().slice(-6000)}`);
    });

    async function isAlive(pid: number): Promise<boolean> {
      const r = await sbx.commands.run(`kill -0 ${pid} 2>/dev/null && echo yes || echo no`, { user: 'root' });
      return r.stdout.trim() === 'yes';
    }

    describe('commands', () => {
      it('runs a command and returns stdout, stderr and the exit code', async () => {
        const r = await sbx.commands.run('echo out; echo err >&2');
        expect(r).toMatchObject({ exitCode: 0, stdout: 'out\n', stderr: 'err\n' });

        const failed = await sbx.commands.run('echo nope >&2; exit 3').catch((e: unknown) => e);
        expect(failed).toBeInstanceOf(CommandExitError);
        expect((failed as CommandExitError).exitCode).toBe(3);
        expect((failed as CommandExitError).stderr).toBe('nope\n');
        expect((failed as CommandExitError).error).toBe('exit status 3');
      });

      it('runs in the home directory by default and honours cwd', async () => {
        expect((await sbx.commands.run('pwd')).stdout).toBe('/home/user\n');
        expect((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout).toBe('/tmp\n');
        await expect(sbx.commands.run('pwd', { cwd: '/does/not/exist' })).rejects.toThrow(
          InvalidArgumentError,
        );
      });

      it('builds the environment from PATH, the user, /init envVars and per-call envs without leaking them', async () => {
        const r = await sbx.commands.run(
          'echo "$HOME|$USER|$LOGNAME|$GLOBAL_VAR|$E2B_SANDBOX|$E2B_SANDBOX_ID|$E2B_TEMPLATE_ID|$ONE_OFF"',
          {
            envs: { ONE_OFF: 'x', GLOBAL_VAR: 'overridden' },
          },
        );
        expect(r.stdout).toBe(`/home/user|user|user|overridden|true|${ids.sandboxId}|${ids.templateId}|x\n`);
        const again = await sbx.commands.run('echo "$GLOBAL_VAR|${ONE_OFF:-unset}"');
        expect(again.stdout).toBe('from-init|unset\n');
        expect((await sbx.commands.run('echo $PATH')).stdout).toContain('/usr/bin');
      });

      it.skipIf(lacks(target.features, 'test-rootfs'))(
        'runs as root or as user with uid, gid and supplementary groups',
        async () => {
          expect((await sbx.commands.run('id -u; id -g')).stdout).toBe('1000\n1000\n');
          const groups = (await sbx.commands.run('id -G')).stdout
            .trim()
            .split(' ')
            .map(Number)
            .sort((a, b) => a - b);
          expect(groups).toEqual([27, 1000, 2000]);
          expect((await sbx.commands.run('id -u; echo $HOME', { user: 'root' })).stdout).toBe('0\n/root\n');
          await expect(sbx.commands.run('true', { user: 'nosuchuser' as 'root' })).rejects.toThrow(
            AuthenticationError,
          );
        },
      );

      it('kills a command that outlives timeoutMs', async () => {
        const started = Date.now();
        const err = await sbx.commands
          .run('echo $$ > /tmp/timeout.pid; sleep 30', { timeoutMs: 1500 })
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(TimeoutError);
        expect(Date.now() - started).toBeLessThan(25_000);
        const pid = Number((await sbx.files.read('/tmp/timeout.pid')).trim());
        for (let i = 0; i < 50 && (await isAlive(pid)); i++) await new Promise((r) => setTimeout(r, 100));
        expect(await isAlive(pid)).toBe(false);
      });

      it('runs in the background, survives disconnect, reconnects, and is killed by pid', async () => {
        const handle = await sbx.commands.run('echo started; sleep 30', { background: true, timeoutMs: 0 });
        expect(handle.pid).toBeGreaterThan(1);
        expect(await isAlive(handle.pid)).toBe(true);
        await handle.disconnect();
        expect(await isAlive(handle.pid)).toBe(true);
        const listed = await sbx.commands.list();
        expect(listed.map((p) => p.pid)).toContain(handle.pid);
        expect(listed.find((p) => p.pid === handle.pid)?.cmd).toBe('/bin/bash');

        const again = await sbx.commands.connect(handle.pid, { timeoutMs: 0 });
        expect(await sbx.commands.kill(handle.pid)).toBe(true);
        const err = await again.wait().catch((e: unknown) => e);
        expect(err).toBeInstanceOf(CommandExitError);
        expect((err as CommandExitError).exitCode).toBe(-1);
        expect((err as CommandExitError).error).toBe('signal: killed');
        expect(await isAlive(handle.pid)).toBe(false);
        expect(await sbx.commands.kill(handle.pid)).toBe(false);
      });

      it('delivers the end event to a late connect after the process exited', async () => {
        const handle = await sbx.commands.run('echo done', { background: true });
        const result = await handle.wait();
        expect(result.stdout).toBe('done\n');
        const late = await sbx.commands.connect(handle.pid);
        expect((await late.wait()).exitCode).toBe(0);
        await expect(sbx.commands.connect(999_999)).rejects.toThrow(NotFoundError);
      });

      it('feeds stdin with sendStdin and closes it with closeStdin', async () => {
        const handle = await sbx.commands.run('cat', { background: true, stdin: true });
        await sbx.commands.sendStdin(handle.pid, 'hello ');
        await handle.sendStdin('world\n');
        await sbx.commands.closeStdin(handle.pid);
        const r = await handle.wait();
        expect(r.stdout).toBe('hello world\n');
      });

      it('gives a command without stdin /dev/null', async () => {
        const r = await sbx.commands.run('cat; echo rc=$?');
        expect(r.stdout).toBe('rc=0\n');
      });

      it('streams output through onStdout as it is produced', async () => {
        const chunks: string[] = [];
        const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.1; done', {
          onStdout: (d) => void chunks.push(d),
        });
        expect(r.stdout).toBe('line1\nline2\nline3\n');
        expect(chunks.join('')).toBe(r.stdout);
        expect(chunks.length).toBeGreaterThan(1);
      });

      it('passes large output through intact', async () => {
        const r = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" a');
        expect(r.stdout.length).toBe(3_000_000);
      });
    });

    describe('pty', () => {
      it('creates a terminal, takes input, resizes and is killed', async () => {
        let output = '';
        const decoder = new TextDecoder();
        const term = await sbx.pty.create({
          cols: 80,
          rows: 24,
          onData: (d) => void (output += decoder.decode(d)),
          timeoutMs: 0,
        });
        await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "tty=$(tty) term=$TERM"\n'));
        await sbx.pty.resize(term.pid, { cols: 100, rows: 40 });
        await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'));
        for (
          let i = 0;
          i < 100 && !(output.includes('40 100') && /tty=\/dev\/pts\/\d+ term=xterm-256color/.test(output));
          i++
        ) {
          await new Promise((r) => setTimeout(r, 50));
        }
        expect(output).toMatch(/tty=\/dev\/pts\/\d+ term=xterm-256color/);
        expect(output).toContain('40 100');
        expect(await sbx.pty.kill(term.pid)).toBe(true);
        const err = await term.wait().catch((e: unknown) => e);
        expect((err as CommandExitError).exitCode).toBe(-1);
        await expect(sbx.commands.closeStdin(term.pid)).rejects.toThrow();
      });
    });

    describe('files', () => {
      it('writes and reads text, bytes, blobs and streams', async () => {
        const info = await sbx.files.write('notes/a.txt', 'hello');
        expect(info).toMatchObject({ path: '/home/user/notes/a.txt', name: 'a.txt', type: FileType.FILE });
        expect(await sbx.files.read('notes/a.txt')).toBe('hello');
        expect(await sbx.files.read('/home/user/notes/a.txt')).toBe('hello');
        expect(await sbx.files.read('~/notes/a.txt')).toBe('hello');

        const bytes = randomBytes(1024 * 1024 + 17);
        await sbx.files.write(
          'bin.dat',
          bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length) as ArrayBuffer,
        );
        expect(Buffer.from(await sbx.files.read('bin.dat', { format: 'bytes' })).equals(bytes)).toBe(true);
        const blob = await sbx.files.read('bin.dat', { format: 'blob' });
        expect(blob.size).toBe(bytes.length);

        const stream = new ReadableStream<Uint8Array>({
          start(c) {
            c.enqueue(new TextEncoder().encode('streamed '));
            c.enqueue(new TextEncoder().encode('upload'));
            c.close();
          },
        });
        await sbx.files.write('streamed.txt', stream);
        const readStream = await sbx.files.read('streamed.txt', { format: 'stream' });
        expect(await new Response(readStream).text()).toBe('streamed upload');

        await sbx.files.write('empty.txt', '');
        expect(await sbx.files.read('empty.txt')).toBe('');
      });

      it('compresses uploads and downloads with gzip', async () => {
        const text = 'compress me '.repeat(10_000);
        await sbx.files.write('gz.txt', text, { gzip: true });
        expect(await sbx.files.read('gz.txt', { gzip: true })).toBe(text);
        expect(await sbx.files.read('gz.txt')).toBe(text);
      });

      it('writes many files in one request', async () => {
        const entries = Array.from({ length: 20 }, (_, i) => ({
          path: `many/dir${i % 3}/f${i}.txt`,
          data: `content ${i}`,
        }));
        const infos = await sbx.files.write(entries);
        expect(infos.map((i) => i.path)).toEqual(entries.map((e) => `/home/user/${e.path}`));
        for (const e of entries.slice(0, 5)) expect(await sbx.files.read(e.path)).toBe(e.data);
      });

      it('reports entry info with owner, group, permissions and symlink targets', async () => {
        await sbx.files.write('info/file.txt', '12345');
        const info = await sbx.files.getInfo('info/file.txt');
        expect(info).toMatchObject({
          name: 'file.txt',
          type: FileType.FILE,
          path: '/home/user/info/file.txt',
          size: 5,
          mode: 0o644,
          permissions: '-rw-r--r--',
          owner: 'user',
          group: 'user',
        });
        expect(info.modifiedTime!.getTime()).toBeGreaterThan(Date.now() - 60_000);
        const dir = await sbx.files.getInfo('info');
        expect(dir).toMatchObject({ type: FileType.DIR, permissions: 'drwxr-xr-x', owner: 'user' });

        await sbx.commands.run('cd ~/info && ln -s file.txt rel-link && ln -s /tmp tmp-link');
        const link = await sbx.files.getInfo('info/rel-link');
        expect(link).toMatchObject({
          type: FileType.SYMLINK,
          symlinkTarget: '/home/user/info/file.txt',
          mode: 0o644,
        });
        expect((await sbx.files.getInfo('info/tmp-link')).symlinkTarget).toBe('/tmp');
        expect((await sbx.files.getInfo('/tmp')).permissions).toBe('dtrwxrwxrwx');

        await expect(sbx.files.getInfo('info/missing')).rejects.toThrow(NotFoundError);
        expect(await sbx.files.exists('info/file.txt')).toBe(true);
        expect(await sbx.files.exists('info/missing')).toBe(false);
      });

      it('lists directories to a depth in pre-order without following symlinks', async () => {
        await sbx.files.write([
          { path: 'tree/b.txt', data: 'b' },
          { path: 'tree/a/x.txt', data: 'x' },
          { path: 'tree/a/deep/y.txt', data: 'y' },
          { path: 'tree/c/z.txt', data: 'z' },
        ]);
        await sbx.commands.run('ln -s /etc ~/tree/link');
        const one = await sbx.files.list('tree');
        expect(one.map((e) => e.name)).toEqual(['a', 'b.txt', 'c', 'link']);
        const two = await sbx.files.list('tree', { depth: 2 });
        expect(two.map((e) => e.path.replace('/home/user/tree/', ''))).toEqual([
          'a',
          'a/deep',
          'a/x.txt',
          'b.txt',
          'c',
          'c/z.txt',
          'link',
        ]);
        expect(two.find((e) => e.name === 'link')?.type).toBe(FileType.SYMLINK);
        await expect(sbx.files.list('tree/b.txt')).rejects.toThrow(InvalidArgumentError);
        await expect(sbx.files.list('no-such-dir')).rejects.toThrow(NotFoundError);
      });

      it('makes directories, renames and removes', async () => {
        expect(await sbx.files.makeDir('mk/a/b')).toBe(true);
        expect(await sbx.files.makeDir('mk/a/b')).toBe(false);
        expect((await sbx.files.getInfo('mk/a')).owner).toBe('user');
        await sbx.files.write('mk/a/b/f.txt', 'f');
        const moved = await sbx.files.rename('mk/a', 'mk/renamed');
        expect(moved).toMatchObject({ path: '/home/user/mk/renamed', type: FileType.DIR });
        expect(await sbx.files.read('mk/renamed/b/f.txt')).toBe('f');
        await expect(sbx.files.rename('mk/missing', 'mk/x')).rejects.toThrow(NotFoundError);
        await sbx.files.remove('mk');
        expect(await sbx.files.exists('mk')).toBe(false);
        await sbx.files.remove('mk'); // removing a missing path is fine
      });

      it('acts with the permissions of the requesting user, except for uploads (root writes, then chowns)', async () => {
        // E2B's envd: an upload lands anywhere and belongs to the requesting user.
        await sbx.files.write('/root/by-user.txt', 'x');
        expect(await sbx.files.getInfo('/root/by-user.txt', { user: 'root' })).toMatchObject({
          owner: 'user',
        });
        await sbx.files.remove('/root/by-user.txt', { user: 'root' });
        await expect(sbx.files.list('/root')).rejects.toThrow(/permission_denied/);
        await expect(sbx.files.makeDir('/opt/nope')).rejects.toThrow(/permission_denied/);

        await sbx.files.write('/root/secret.txt', 'root only', { user: 'root' });
        await sbx.commands.run('chmod 600 /root/secret.txt', { user: 'root' });
        expect(await sbx.files.read('/root/secret.txt', { user: 'root' })).toBe('root only');
        expect((await sbx.files.getInfo('/root/secret.txt', { user: 'root' })).owner).toBe('root');
        await expect(sbx.files.read('/root/secret.txt')).rejects.toThrow(/permission denied/);
        await expect(sbx.files.remove('/root/secret.txt')).rejects.toThrow(/permission_denied/);
      });

      it.skipIf(lacks(target.features, 'test-rootfs'))('answers 507 when the disk is full', async () => {
        const big = new Uint8Array(1024 * 1024);
        await expect(sbx.files.write('/small/big.bin', big.buffer)).rejects.toThrow(NotEnoughSpaceError);
        await expect(sbx.files.write('/small/big.bin', big.buffer, { useOctetStream: true })).rejects.toThrow(
          NotEnoughSpaceError,
        );
      });

      it('stores and reports file metadata', async () => {
        await sbx.files.write('meta.txt', 'm', { metadata: { Owner: 'alice', purpose: 'test' } });
        const info = await sbx.files.getInfo('meta.txt');
        expect(info.metadata).toEqual({ owner: 'alice', purpose: 'test' });
        await sbx.files.write('meta.txt', 'm2', { metadata: { only: 'this' } });
        expect((await sbx.files.getInfo('meta.txt')).metadata).toEqual({ only: 'this' });
      });

      it('watches a directory, recursively and for new subdirectories', async () => {
        await sbx.files.makeDir('watched/nested');
        const events: FilesystemEvent[] = [];
        const seen = (pred: (e: FilesystemEvent) => boolean) => events.some(pred);
        const until = async (pred: (e: FilesystemEvent) => boolean) => {
          for (let i = 0; i < 100 && !seen(pred); i++) await new Promise((r) => setTimeout(r, 50));
          return seen(pred);
        };
        const handle = await sbx.files.watchDir('watched', (e) => void events.push(e), { recursive: true });
        await sbx.files.write('watched/top.txt', '1');
        await sbx.files.write('watched/nested/inner.txt', '2');
        await sbx.files.makeDir('watched/added');
        expect(await until((e) => e.type === FilesystemEventType.CREATE && e.name === 'added')).toBe(true);
        await sbx.files.write('watched/added/late.txt', '3');
        await sbx.files.rename('watched/top.txt', 'watched/top2.txt');
        await sbx.files.remove('watched/top2.txt');
        expect(await until((e) => e.type === FilesystemEventType.WRITE && e.name === 'top.txt')).toBe(true);
        expect(
          await until((e) => e.type === FilesystemEventType.WRITE && e.name === 'nested/inner.txt'),
        ).toBe(true);
        expect(await until((e) => e.type === FilesystemEventType.WRITE && e.name === 'added/late.txt')).toBe(
          true,
        );
        expect(await until((e) => e.type === FilesystemEventType.RENAME && e.name === 'top.txt')).toBe(true);
        expect(await until((e) => e.type === FilesystemEventType.CREATE && e.name === 'top2.txt')).toBe(true);
        expect(await until((e) => e.type === FilesystemEventType.REMOVE && e.name === 'top2.txt')).toBe(true);
        await handle.stop();

        await expect(sbx.files.watchDir('no-such-dir', () => {})).rejects.toThrow(NotFoundError);
        await sbx.files.write('plain.txt', 'x');
        await expect(sbx.files.watchDir('plain.txt', () => {})).rejects.toThrow(SandboxError);
      });

      it('ends a watch at its timeout', async () => {
        await sbx.files.makeDir('watch-timeout');
        const exited = new Promise<Error | undefined>((resolve) => {
          void sbx.files.watchDir('watch-timeout', () => {}, {
            timeoutMs: 1000,
            onExit: (err) => resolve(err),
          });
        });
        expect(await exited).toBeInstanceOf(TimeoutError);
      });

      it.skipIf(lacks(target.features, 'bare-urls'))(
        'serves plain download and upload URLs when the sandbox is not secure',
        async () => {
          await sbx.files.write('url.txt', 'via url');
          const down = await sbx.downloadUrl('url.txt');
          expect(await (await fetch(down)).text()).toBe('via url');
          const up = await sbx.uploadUrl('uploaded.txt');
          const form = new FormData();
          form.append('file', new Blob(['posted']), 'ignored-name.txt');
          const res = await fetch(up, { method: 'POST', body: form });
          expect(res.status).toBe(200);
          expect(await res.json()).toEqual([
            { path: '/home/user/uploaded.txt', name: 'uploaded.txt', type: 'file' },
          ]);
        },
      );
    });

    describe('paths stay inside the sandbox', () => {
      it.skipIf(lacks(target.features, 'test-rootfs'))(
        'resolves .. and absolute symlinks within the sandbox root',
        async () => {
          await sbx.files.write('/tmp/inside.txt', 'inside', { user: 'root' });
          expect(await sbx.files.read('/../../../../tmp/inside.txt')).toBe('inside');
          expect(await sbx.files.read('../../../../../../tmp/inside.txt')).toBe('inside');
          const hostname = await sbx.files.read('/../../../../etc/hostname');
          expect(hostname).toBe('sandbox\n');
          await sbx.commands.run('ln -sf /../../../../etc ~/escape');
          expect(await sbx.files.read('escape/hostname')).toBe('sandbox\n');
          const up = await sbx.files.list('/../../..');
          expect(up.map((e) => e.name)).toContain('agentenv');
        },
      );
    });
  });
}
