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
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadNative, type NativeApi } from './native.js';
import { spawnPiped } from './process/spawn-piped.js';

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
