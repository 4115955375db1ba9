// One host command, started and waited for: stdin fed, stdout and stderr collected (or all three /dev/null), a
// time limit. The server's process launcher (launcher-main.ts) runs it for the server; without a launcher the
// server runs it itself.
import { spawn } from 'node:child_process';

export interface SpawnRequest {
  command: string;
  args: readonly string[];
  env: NodeJS.ProcessEnv;
  cwd?: string | undefined;
  /** Written to the child's stdin, then stdin is closed (`collect` only). */
  input?: string | Uint8Array | undefined;
  /** SIGKILL after this many milliseconds. */
  timeoutMs?: number | undefined;
  /**
   * `collect`: stdout and stderr come back, the outcome once both are closed. `ignore`: /dev/null for all three,
   * the outcome at exit (for runc run -d / restore -d, whose container keeps running with runc's stdio).
   */
  stdio: 'collect' | 'ignore';
}

export interface SpawnOutcome {
  /** null when a signal ended it. */
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Rejects only when the command could not be started (ENOENT, EACCES…), with spawn's own error. */
export function spawnCollect(req: SpawnRequest): Promise<SpawnOutcome> {
  return new Promise((resolve, reject) => {
    const collect = req.stdio === 'collect';
    const child = spawn(req.command, req.args, {
      env: req.env,
      cwd: req.cwd,
      stdio: collect ? ['pipe', 'pipe', 'pipe'] : ['ignore', 'ignore', 'ignore'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const timer = req.timeoutMs ? setTimeout(() => child.kill('SIGKILL'), req.timeoutMs) : undefined;
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on(collect ? 'close' : 'exit', (code: number | null) => {
      clearTimeout(timer);
      resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() });
    });
    if (!collect) return;
    child.stdout!.on('data', (b: Buffer) => out.push(b));
    child.stderr!.on('data', (b: Buffer) => err.push(b));
    child.stdin!.on('error', () => {});
    child.stdin!.end(req.input);
  });
}
