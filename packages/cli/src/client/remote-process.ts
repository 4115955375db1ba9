// Running a process in a sandbox from the terminal: `aenv exec` (pipes, or a PTY with -t) and the
// interactive shell of `start`/`connect` (docs/cli.md "exec", "The shell").
import type { CommandResult, CommandSpec, EnvdRpcClient, InteractiveProcess } from '@aenv/protocol';
import { CliError, usageError } from './errors.js';

/** The exit code a shell would give a process ended by a signal (128 + signo), from envd's status text. */
const SIGNALS: Record<string, number> = {
  hangup: 1,
  interrupt: 2,
  quit: 3,
  killed: 9,
  'segmentation fault': 11,
  'broken pipe': 13,
  terminated: 15,
};

/** The login shell of the sandbox's user: bash when the image has it, else sh. */
export const SHELL: CommandSpec = {
  cmd: '/bin/sh',
  args: ['-c', 'if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi'],
};

function exitCodeOf(r: CommandResult, timeoutSecs: number | undefined): number {
  if (r.exitCode >= 0) return r.exitCode;
  const timedOut =
    timeoutSecs !== undefined && (r.status === 'signal: killed' || r.error?.startsWith('DeadlineExceeded'));
  if (timedOut) throw new CliError('timedOut', `the command timed out after ${timeoutSecs} s`);
  const sig = /^signal: (.*)$/.exec(r.status)?.[1];
  if (sig !== undefined) return 128 + (SIGNALS[sig] ?? 0);
  throw new CliError('unreachable', `lost the connection to the sandbox: ${r.error ?? r.status}`);
}

/** Writes to stdout/stderr, ignoring a reader that went away (`aenv exec … | head`). */
function sink(stream: NodeJS.WriteStream): (data: Buffer) => void {
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
  });
  return (data) => void stream.write(data);
}

export interface PipedRun {
  spec: CommandSpec;
  /** Pass this process's stdin to the command (else the command's stdin is /dev/null). */
  stdin: boolean;
  timeoutSecs?: number;
}

/**
 * Runs a command with its stdout and stderr kept apart, stdin passed when asked; resolves with its exit
 * code. Ctrl-C asks it to end (SIGTERM: envd's process API has no SIGINT), a second Ctrl-C kills it.
 */
export async function runPiped(envd: EnvdRpcClient, run: PipedRun): Promise<number> {
  const out = sink(process.stdout);
  const err = sink(process.stderr);
  const proc = await envd.startInteractive(run.spec, {
    stdin: run.stdin,
    ...(run.timeoutSecs !== undefined ? { timeoutMs: run.timeoutSecs * 1000 } : {}),
    onOutput: ({ stream, data }) => (stream === 'stderr' ? err : out)(data),
  });
  let interrupts = 0;
  const onSigint = () => {
    interrupts++;
    void proc.signal(interrupts === 1 ? 'SIGTERM' : 'SIGKILL').catch(() => undefined);
  };
  process.on('SIGINT', onSigint);
  let ended = false;
  const pump = run.stdin ? pumpStdin(proc, () => ended) : Promise.resolve();
  try {
    const result = await proc.ended;
    ended = true;
    return exitCodeOf(result, run.timeoutSecs);
  } finally {
    process.off('SIGINT', onSigint);
    // Nothing more goes to the command: stop reading, so this process can end.
    if (run.stdin) process.stdin.destroy();
    void pump;
  }
}

async function pumpStdin(proc: InteractiveProcess, ended: () => boolean): Promise<void> {
  try {
    for await (const chunk of process.stdin) {
      if (ended()) return;
      await proc.write(chunk as Buffer);
    }
    if (!ended()) await proc.closeStdin();
  } catch {
    // The process ended (or the sandbox went away) while stdin was still flowing: its end says why.
  }
}

/**
 * Runs `spec` in a PTY sized like this terminal, the terminal in raw mode: keys (Ctrl-C, Ctrl-D included)
 * go to the remote PTY, resizes follow, and the terminal is restored however it ends.
 */
export async function runInTerminal(
  envd: EnvdRpcClient,
  spec: CommandSpec,
  timeoutSecs?: number,
): Promise<number> {
  const stdin = process.stdin;
  const stdout = process.stdout;
  if (!stdin.isTTY || !stdout.isTTY) {
    throw usageError(
      'an interactive shell needs a terminal on stdin and stdout',
      'use `aenv exec` without -t',
    );
  }
  const size = () => ({ cols: stdout.columns || 80, rows: stdout.rows || 24 });
  const out = sink(stdout);
  const proc = await envd.startInteractive(
    { ...spec, envs: { TERM: process.env.TERM || 'xterm-256color', ...spec.envs } },
    {
      pty: size(),
      ...(timeoutSecs !== undefined ? { timeoutMs: timeoutSecs * 1000 } : {}),
      onOutput: ({ data }) => out(data),
    },
  );
  const onData = (d: Buffer) => void proc.write(d).catch(() => undefined);
  const onResize = () => {
    const s = size();
    void proc.resize(s.cols, s.rows).catch(() => undefined);
  };
  const restore = () => {
    if (stdin.isRaw) stdin.setRawMode(false);
  };
  process.once('exit', restore);
  stdin.setRawMode(true);
  stdin.on('data', onData);
  stdin.resume();
  stdout.on('resize', onResize);
  try {
    return exitCodeOf(await proc.ended, timeoutSecs);
  } finally {
    stdout.off('resize', onResize);
    stdin.off('data', onData);
    restore();
    stdin.pause();
    process.off('exit', restore);
  }
}
