import { spawn } from 'node:child_process';

export interface RunOptions {
  /** Written to the child's stdin, then stdin is closed. */
  input?: string | Buffer;
  /** Kill the child (SIGKILL) after this many milliseconds. */
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Resolve instead of throwing when the exit code is not 0. */
  allowFailure?: boolean;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  code: number;
}

/** A host command that failed; the message carries the command line and its stderr. */
export class CommandError extends Error {
  constructor(
    readonly command: string,
    readonly args: readonly string[],
    readonly code: number | null,
    readonly stderr: string,
    readonly stdout: string,
  ) {
    const detail = (stderr.trim() || stdout.trim()).split('\n').slice(-5).join('; ');
    super(`${[command, ...args].join(' ')} exited with ${code ?? 'signal'}${detail ? `: ${detail}` : ''}`);
    this.name = 'CommandError';
  }
}

/** Runs a host tool without a shell and collects its output. */
export function run(command: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      env: opts.env ?? process.env,
      cwd: opts.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let timer: NodeJS.Timeout | undefined;
    if (opts.timeoutMs) timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs);
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', (e) => {
      if (timer) clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      const result = {
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
        code: code ?? -1,
      };
      if (code === 0 || opts.allowFailure) resolve(result);
      else reject(new CommandError(command, args, code, result.stderr, result.stdout));
    });
    child.stdin.on('error', () => {});
    child.stdin.end(opts.input);
  });
}
