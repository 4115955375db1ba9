// The progress of a long operation (pull, build, snapshot, pause, resume) on stderr (docs/cli.md "Progress"):
// a spinner with the elapsed time on an interactive terminal, plain lines when stderr is not one, nothing with
// `--output json` or `--quiet` (stdout then carries only the result).
import yoctoSpinner, { type Spinner } from 'yocto-spinner';

export type ProgressMode = 'spinner' | 'lines' | 'silent';

/**
 * The mode for a command run. A terminal counts as interactive as the spinner library sees it (a TTY, TERM not
 * `dumb`, no `CI` variable), so the two never disagree.
 */
export function progressMode(
  f: { outputFlag?: string; quiet?: boolean },
  stderr: { isTTY?: boolean } = process.stderr,
  env: NodeJS.ProcessEnv = process.env,
): ProgressMode {
  if (f.quiet || f.outputFlag === 'json') return 'silent';
  const interactive = stderr.isTTY === true && env.TERM !== 'dumb' && !('CI' in env);
  return interactive ? 'spinner' : 'lines';
}

const elapsed = (ms: number) => {
  const s = Math.floor(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
};

/** One operation's progress: a status that changes, and log lines printed above it. */
export class Progress {
  private spinner?: Spinner;
  private ticker?: NodeJS.Timeout;
  private status = '';
  private startedAt = 0;

  constructor(
    readonly mode: ProgressMode,
    private readonly write: (s: string) => void = (s) => void process.stderr.write(s),
  ) {}

  /** Starts showing `status` (a spinner line, or one plain line). */
  start(status: string): void {
    this.status = status;
    this.startedAt = Date.now();
    if (this.mode === 'lines') this.write(`${status}\n`);
    if (this.mode !== 'spinner') return;
    // Ctrl-C (or SIGTERM) while it spins: the library shows the cursor again and exits 130 (143); what was
    // asked of the server goes on there (a build: `aenv template watch` follows it again).
    this.spinner = yoctoSpinner({ text: this.line(), handleSignals: true }).start();
    this.ticker = setInterval(() => {
      if (this.spinner) this.spinner.text = this.line();
    }, 1000);
    this.ticker.unref();
  }

  /** A new status: the spinner's text, or a plain line when it changed. */
  update(status: string): void {
    if (status === this.status) return;
    this.status = status;
    if (this.mode === 'lines') this.write(`${status}\n`);
    if (this.spinner) this.spinner.text = this.line();
  }

  /** A log line (a build's output), printed above the spinner. */
  log(line: string): void {
    if (this.mode === 'silent') return;
    // The spinner library clears its line before a write to stderr and draws it again after.
    this.write(`${line}\n`);
  }

  /** Ends the display; on a terminal the spinner line is replaced by `final` (✔/✖), or removed. */
  stop(outcome?: { ok: boolean; text: string }): void {
    if (this.ticker) clearInterval(this.ticker);
    this.ticker = undefined;
    const spinner = this.spinner;
    this.spinner = undefined;
    if (!spinner) return;
    if (!outcome) spinner.stop();
    else if (outcome.ok) spinner.success(`${outcome.text} (${elapsed(Date.now() - this.startedAt)})`);
    else spinner.error(`${outcome.text} (${elapsed(Date.now() - this.startedAt)})`);
  }

  /** Runs `fn` under `status`; a failure stops the display before the error line is printed. */
  async run<T>(status: string, fn: () => Promise<T>): Promise<T> {
    this.start(status);
    try {
      const r = await fn();
      this.stop({ ok: true, text: status });
      return r;
    } catch (e) {
      this.stop({ ok: false, text: status });
      throw e;
    }
  }

  private line(): string {
    return `${this.status} ${elapsed(Date.now() - this.startedAt)}`;
  }
}
