import { constants } from 'node:os';

/** Go's signal descriptions (syscall.Signal.String on linux), used in "signal: <desc>" statuses. */
const SIGNAL_DESCRIPTIONS: Record<number, string> = {
  1: 'hangup',
  2: 'interrupt',
  3: 'quit',
  4: 'illegal instruction',
  5: 'trace/breakpoint trap',
  6: 'aborted',
  7: 'bus error',
  8: 'floating point exception',
  9: 'killed',
  10: 'user defined signal 1',
  11: 'segmentation fault',
  12: 'user defined signal 2',
  13: 'broken pipe',
  14: 'alarm clock',
  15: 'terminated',
  16: 'stack fault',
  17: 'child exited',
  18: 'continued',
  19: 'stopped (signal)',
  20: 'stopped',
  21: 'stopped (tty input)',
  22: 'stopped (tty output)',
  23: 'urgent I/O condition',
  24: 'CPU time limit exceeded',
  25: 'file size limit exceeded',
  26: 'virtual timer expired',
  27: 'profiling timer expired',
  28: 'window changed',
  29: 'I/O possible',
  30: 'power failure',
  31: 'bad system call',
};

export interface ExitStatus {
  exitCode: number;
  exited: boolean;
  status: string;
  error?: string;
}

/** The EndEvent fields for a process that exited with `code` or was killed by `signal` (Go ProcessState). */
export function exitStatus(
  code: number | null,
  signal: NodeJS.Signals | number | null | undefined,
): ExitStatus {
  const signo = typeof signal === 'string' ? (constants.signals[signal] ?? 0) : (signal ?? 0);
  if (signo) {
    const status = `signal: ${SIGNAL_DESCRIPTIONS[signo] ?? `signal ${signo}`}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  const n = code ?? 0;
  const status = `exit status ${n}`;
  return n === 0
    ? { exitCode: 0, exited: true, status }
    : { exitCode: n, exited: true, status, error: status };
}
