import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import type { NativeApi, SpawnUser } from '../native.js';

/** A process started with pipes, whichever way it was spawned. */
export interface PipedChild {
  pid: number;
  /** null when stdin is /dev/null. */
  stdin: Writable | null;
  stdout: Readable;
  stderr: Readable;
  /** Resolves when the process exited (its output may still be in the pipes). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | number | null }>;
}

export interface SpawnPipedOptions {
  env: Record<string, string>;
  cwd: string;
  /** true = a pipe, false = /dev/null. */
  stdin: boolean;
  /** Run as this user (the native helper only); else as envd's own. */
  as?: SpawnUser;
}

/**
 * Starts file with args in a new session. With the native helper this is posix_spawn (vfork): Node's
 * own spawn forks the whole envd process, copying its page tables, which costs several milliseconds
 * per command on paravirtualised hosts. Without it, child_process.spawn.
 */
export async function spawnPiped(
  native: NativeApi | undefined,
  file: string,
  args: readonly string[],
  o: SpawnPipedOptions,
): Promise<PipedChild> {
  if (native?.spawn) {
    type Exit = Awaited<PipedChild['exited']>;
    let resolveExit!: (v: Exit) => void;
    const exited = new Promise<Exit>((r) => (resolveExit = r));
    const envp = Object.entries(o.env).map(([k, v]) => `${k}=${v}`);
    const fds = native.spawn(
      file,
      [file, ...args],
      envp,
      o.cwd,
      o.stdin,
      (code, signal) => resolveExit({ code: signal ? null : code, signal: signal || null }),
      o.as,
    );
    return {
      pid: fds.pid,
      stdin: fds.stdin >= 0 ? new Socket({ fd: fds.stdin, readable: false, writable: true }) : null,
      stdout: new Socket({ fd: fds.stdout, readable: true, writable: false }),
      stderr: new Socket({ fd: fds.stderr, readable: true, writable: false }),
      exited,
    };
  }
  if (o.as) throw new Error('starting a process as another user needs the native helper');
  const child = spawn(file, args, {
    cwd: o.cwd,
    env: o.env,
    stdio: [o.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    detached: true,
  });
  if (child.pid === undefined || !child.stdout || !child.stderr) {
    const [err] = (await once(child, 'error')) as [Error];
    throw err;
  }
  return {
    pid: child.pid,
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    exited: new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal }))),
  };
}
