// aenv_native.node built by the host gcc: per-thread credentials, xattrs, inotify and posix_spawn.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadNative, type NativeApi } from './native.js';
import { spawnPiped } from './process/spawn-piped.js';
import { collectPiped } from './testing/collect-piped.js';

let dir: string;
let native: NativeApi;

beforeAll(() => {
  dir = mkdtempSync('/tmp/aenv-native-test-');
  chmodSync(dir, 0o755);
  const addon = join(dir, 'aenv_native.node');
  const source = fileURLToPath(new URL('../native/aenv_native.c', import.meta.url));
  execFileSync('gcc', [
    '-shared',
    '-fPIC',
    '-Os',
    '-pthread',
    '-Wall',
    '-Werror',
    '-I/usr/include/node',
    '-o',
    addon,
    source,
  ]);
  native = loadNative(addon);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('runAs', () => {
  it('applies the user’s permissions and ownership, then restores root', () => {
    const shared = join(dir, 'shared');
    mkdirSync(shared, { mode: 0o777 });
    chmodSync(shared, 0o777);
    const locked = join(dir, 'locked');
    mkdirSync(locked, { mode: 0o755 });
    native.runAs(1000, 1000, [1000, 2000], () => writeFileSync(join(shared, 'f'), 'x'));
    expect(statSync(join(shared, 'f'))).toMatchObject({ uid: 1000, gid: 1000 });
    expect(() => native.runAs(1000, 1000, [1000], () => writeFileSync(join(locked, 'f'), 'x'))).toThrow(
      /EACCES/,
    );
    writeFileSync(join(locked, 'root-can'), 'x');

    const groupDir = join(dir, 'group-only');
    mkdirSync(groupDir);
    chownSync(groupDir, 0, 2000);
    chmodSync(groupDir, 0o770);
    native.runAs(1000, 1000, [1000, 2000], () => writeFileSync(join(groupDir, 'via-supplementary'), 'x'));
    expect(() => native.runAs(1000, 1000, [1000], () => writeFileSync(join(groupDir, 'no'), 'x'))).toThrow(
      /EACCES/,
    );
  });

  it('returns the callback value and propagates its exceptions', () => {
    expect(native.runAs(1000, 1000, [], () => 42)).toBe(42);
    expect(() =>
      native.runAs(1000, 1000, [], () => {
        throw new Error('boom');
      }),
    ).toThrow('boom');
    expect(readFileSync('/proc/self/status', 'utf8')).toMatch(/Uid:\s+0\s+0\s+0\s+0/);
  });
});

describe('xattrs', () => {
  it('sets, lists by prefix and removes user xattrs', () => {
    const f = join(dir, 'x.txt');
    writeFileSync(f, 'x');
    native.setXattr(f, 'user.e2b.owner', 'alice');
    native.setXattr(f, 'user.other', 'ignored');
    expect(native.getXattrs(f, 'user.e2b.')).toEqual({ owner: 'alice' });
    native.removeXattr(f, 'user.e2b.owner');
    native.removeXattr(f, 'user.e2b.never-set');
    expect(native.getXattrs(f, 'user.e2b.')).toEqual({});
    expect(() => native.getXattrs(join(dir, 'missing'), 'user.')).toThrow(/ENOENT/);
  });
});

describe('spawn', () => {
  it('runs in a new session with pipes, env and cwd, and reports exit codes and signals', async () => {
    const child = await spawnPiped(native, '/bin/sh', ['-c', 'cat; echo "$X $(pwd)"; echo e >&2; exit 5'], {
      env: { X: 'y' },
      cwd: '/tmp',
      stdin: true,
    });
    const out: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    // Listen for the end before awaiting the exit: the pipe may close while we wait.
    const stdoutClosed = new Promise((r) => child.stdout.once('close', r));
    child.stdin!.end('in\n');
    expect(await child.exited).toEqual({ code: 5, signal: null });
    await stdoutClosed;
    expect(Buffer.concat(out).toString()).toBe('in\ny /tmp\n');

    const sleeper = await spawnPiped(native, '/bin/sleep', ['30'], { env: {}, cwd: '/', stdin: false });
    const stat = readFileSync(`/proc/${sleeper.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    expect(Number(stat[3])).toBe(sleeper.pid); // session id == pid: setsid
    process.kill(-sleeper.pid, 'SIGKILL');
    expect(await sleeper.exited).toEqual({ code: null, signal: 9 });
  });

  it('rejects a missing executable or cwd synchronously', async () => {
    await expect(
      spawnPiped(native, '/no/such/file', [], { env: {}, cwd: '/', stdin: false }),
    ).rejects.toThrow(/ENOENT/);
    await expect(
      spawnPiped(native, '/bin/true', [], { env: {}, cwd: '/no/such/dir', stdin: false }),
    ).rejects.toThrow(/ENOENT/);
  });
});

describe('spawn as a user', () => {
  const as = { uid: 1000, gid: 1001, groups: [27, 1001], oomScoreAdj: 100 };
  async function run(file: string, args: string[], env: Record<string, string>, user = as, cwd = '/tmp') {
    const child = await spawnPiped(native, file, args, { env, cwd, stdin: true, as: user });
    const done = collectPiped(child);
    // A command that does not read its stdin may be gone before it is written.
    child.stdin!.on('error', () => {});
    child.stdin!.end('in\n');
    const { exit, stdout, stderr } = await done;
    return { exit, pid: child.pid, out: stdout, err: stderr };
  }

  it('takes the uid, gid, groups and oom score, and nothing of envd but the pipes', async () => {
    const r = await run(
      'sh',
      [
        '-c',
        'cat; id -u; id -g; id -G; cat /proc/self/oom_score_adj; pwd; ls /proc/self/fd; grep SigBlk /proc/self/status',
      ],
      { PATH: '/usr/bin:/bin' },
    );
    expect(r.err).toBe('');
    expect(r.exit).toEqual({ code: 0, signal: null });
    const [stdin, uid, gid, groups, oom, cwd, ...rest] = r.out.trim().split('\n');
    expect([stdin, uid, gid, oom, cwd]).toEqual(['in', '1000', '1001', '100', '/tmp']);
    expect(
      groups!
        .split(' ')
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual([27, 1001]);
    // 0-2, and the fd `ls` opened on /proc/self/fd: no descriptor of envd leaks into the command.
    expect(
      rest
        .slice(0, -1)
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual([0, 1, 2, 3]);
    expect(rest.at(-1)).toMatch(/^SigBlk:\s+0+$/);
  });

  it('looks the command up on its own PATH, as execvp does, and reports a miss as exec-as did', async () => {
    const bin = mkdtempSync(join(tmpdir(), 'aenv-spawn-path-'));
    chmodSync(bin, 0o755);
    writeFileSync(join(bin, 'hello-from-path'), '#!/bin/sh\necho found "$1"\n', { mode: 0o755 });
    // No #!: execvp hands such a file to /bin/sh.
    writeFileSync(join(bin, 'no-shebang'), 'echo plain "$1"\n', { mode: 0o755 });
    writeFileSync(join(bin, 'not-executable'), 'echo never\n', { mode: 0o644 });
    try {
      const env = { PATH: `/no/such/dir:${bin}:/usr/bin:/bin` };
      expect((await run('hello-from-path', ['x'], env)).out).toBe('found x\n');
      expect((await run('no-shebang', ['y'], env)).out).toBe('plain y\n');
      const missing = await run('no-such-command-anywhere', [], env);
      expect(missing.exit).toEqual({ code: 127, signal: null });
      expect(missing.err).toBe('no-such-command-anywhere: No such file or directory\n');
      const denied = await run(join(bin, 'not-executable'), [], env);
      expect(denied.exit).toEqual({ code: 126, signal: null });
      expect(denied.err).toBe(`${join(bin, 'not-executable')}: Permission denied\n`);
      // envd's own PATH does not count: without one of its own, the command gets execvp's default.
      expect((await run('hello-from-path', [], {})).exit.code).toBe(127);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it('starts with default signal handlers in a session of its own', async () => {
    const r = await run('/bin/sh', ['-c', 'ps -o sid= -p $$; kill -TERM $$; echo not-reached'], {
      PATH: '/usr/bin:/bin',
    });
    expect(Number(r.out.trim())).toBe(r.pid);
    expect(r.exit).toEqual({ code: null, signal: 15 });
  });

  it('fails the spawn on a missing cwd, and refuses ids it cannot set', async () => {
    await expect(
      spawnPiped(native, '/bin/true', [], { env: {}, cwd: '/no/such/dir', stdin: false, as }),
    ).rejects.toThrow(/ENOENT/);
    for (const bad of [
      { ...as, uid: -1 },
      { ...as, gid: 2 ** 32 - 1 },
      { ...as, groups: [1, -5] },
      { ...as, oomScoreAdj: 5000 },
    ])
      expect(() => native.spawn('/bin/true', ['/bin/true'], [], '/', false, () => {}, bad)).toThrow(
        TypeError,
      );
  });
});

describe('inotify', () => {
  it('reports events for watched directories', async () => {
    const w = join(dir, 'watched');
    mkdirSync(w);
    const seen: [number, number, number, string][] = [];
    native.watchStart((events) => seen.push(...events));
    const wd = native.watchAdd(w, 0x100 | 0x2 | 0x200);
    writeFileSync(join(w, 'a'), '1');
    rmSync(join(w, 'a'));
    for (let i = 0; i < 100 && seen.filter((e) => e[3] === 'a').length < 3; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(seen.filter((e) => e[0] === wd).map((e) => [e[1] & 0xfff, e[3]])).toEqual([
      [0x100, 'a'],
      [0x2, 'a'],
      [0x200, 'a'],
    ]);
    native.watchRemove(wd);
  });
});
