import { readFile } from 'node:fs/promises';
import { CommandError, run } from '../../../util/exec.js';
import { launch } from '../../../util/launcher.js';

export interface RuncState {
  id: string;
  pid: number;
  status: 'creating' | 'created' | 'running' | 'paused' | 'stopped';
  bundle: string;
}

export interface RuncOptions {
  runcPath: string;
  /** runc's state directory (`--root`); private to this server. */
  root: string;
  criuPath: string | null;
  /** Extra environment for CRIU (runc passes its own environment on to `criu swrk`). */
  criuEnv?: Record<string, string>;
}

/** A failed runc call, with runc's own error text (from its log file or stderr). */
export class RuncError extends Error {
  constructor(
    readonly op: string,
    readonly id: string,
    readonly detail: string,
  ) {
    super(`runc ${op} ${id} failed${detail ? `: ${detail}` : ''}`);
    this.name = 'RuncError';
  }
}

const NOT_EXIST_RE = /does not exist|not found|no such file/i;

/** Last error messages runc wrote to its JSON log (`--log-format json`). */
export async function runcLogErrors(logFile: string, max = 3): Promise<string> {
  let text: string;
  try {
    text = await readFile(logFile, 'utf8');
  } catch {
    return '';
  }
  const msgs: string[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    try {
      const rec = JSON.parse(line) as { level?: string; msg?: string };
      if ((rec.level === 'error' || rec.level === 'fatal') && rec.msg) msgs.push(rec.msg);
    } catch {
      msgs.push(line);
    }
  }
  return msgs.slice(-max).join('; ');
}

/**
 * runc for processes that keep running after runc exits (run -d, restore -d). The container inherits runc's
 * stdio, so it gets /dev/null: a pipe to this server would break (SIGPIPE) when the server restarts, and a
 * host file outside the container's mounts makes CRIU fail ("Can't lookup mount for fd=2"). runc's own
 * errors go to its log file instead.
 */
function spawnDetachedRunc(
  path: string,
  args: string[],
  cwd: string,
  timeoutMs: number,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  return launch({ command: path, args, cwd, env, timeoutMs, stdio: 'ignore' }).then((o) => o.code ?? -1);
}

export class Runc {
  constructor(readonly opts: RuncOptions) {}

  private base(logFile?: string): string[] {
    const args = ['--root', this.opts.root];
    if (logFile) args.push('--log', logFile, '--log-format', 'json');
    return args;
  }

  private criuArgs(): string[] {
    if (!this.opts.criuPath) throw new Error('CRIU is not configured');
    return ['--criu', this.opts.criuPath];
  }

  private criuEnv(): NodeJS.ProcessEnv {
    return { ...process.env, ...this.opts.criuEnv };
  }

  /**
   * CRIU runs inside the sandbox's netns: a namespace CRIU shares is neither dumped nor recreated, it is
   * simply inherited. That is what lets a user-namespaced sandbox use a netns owned by the host (CRIU
   * otherwise refuses: "namespaces doesn't belong to the target user namespace"), and it makes a restore
   * land in whatever netns it is started in — the fork's new slot.
   */
  private inNetns(netnsPath: string, args: string[]): [string, string[]] {
    return ['nsenter', [`--net=${netnsPath}`, '--', this.opts.runcPath, ...args]];
  }

  async version(): Promise<string> {
    const { stdout } = await run(this.opts.runcPath, ['--version']);
    return /runc version (\S+)/.exec(stdout)?.[1] ?? stdout.split('\n')[0] ?? '';
  }

  async run(id: string, bundle: string, pidFile: string, logFile: string): Promise<void> {
    const code = await spawnDetachedRunc(
      this.opts.runcPath,
      [...this.base(logFile), 'run', '--detach', '--bundle', bundle, '--pid-file', pidFile, id],
      bundle,
      60_000,
    );
    if (code !== 0) throw new RuncError('run', id, (await runcLogErrors(logFile)) || `exit code ${code}`);
  }

  async restore(
    id: string,
    bundle: string,
    netnsPath: string,
    imagesDir: string,
    workDir: string,
    pidFile: string,
    logFile: string,
    lazyPages = false,
  ): Promise<void> {
    const [cmd, args] = this.inNetns(netnsPath, [
      ...this.base(logFile),
      ...this.criuArgs(),
      'restore',
      ...(lazyPages ? ['--lazy-pages'] : []),
      '--detach',
      '--bundle',
      bundle,
      '--image-path',
      imagesDir,
      '--work-path',
      workDir,
      '--pid-file',
      pidFile,
      id,
    ]);
    const code = await spawnDetachedRunc(cmd, args, bundle, 300_000, this.criuEnv());
    if (code !== 0) throw new RuncError('restore', id, (await runcLogErrors(logFile)) || `exit code ${code}`);
  }

  async checkpoint(
    id: string,
    netnsPath: string,
    imagesDir: string,
    workDir: string,
    leaveRunning: boolean,
    logFile: string,
  ): Promise<void> {
    const runcArgs = [...this.base(logFile), ...this.criuArgs(), 'checkpoint', '--image-path', imagesDir];
    runcArgs.push('--work-path', workDir);
    if (leaveRunning) runcArgs.push('--leave-running');
    runcArgs.push(id);
    const [cmd, args] = this.inNetns(netnsPath, runcArgs);
    try {
      await run(cmd, args, { timeoutMs: 300_000, env: this.criuEnv() });
    } catch (e) {
      if (e instanceof CommandError) {
        throw new RuncError('checkpoint', id, (await runcLogErrors(logFile)) || e.stderr.trim());
      }
      throw e;
    }
  }

  async state(id: string): Promise<RuncState | null> {
    const r = await run(this.opts.runcPath, [...this.base(), 'state', id], { allowFailure: true });
    if (r.code !== 0) {
      if (NOT_EXIST_RE.test(r.stderr)) return null;
      throw new RuncError('state', id, r.stderr.trim());
    }
    return JSON.parse(r.stdout) as RuncState;
  }

  async list(): Promise<RuncState[]> {
    const { stdout } = await run(this.opts.runcPath, [...this.base(), 'list', '--format', 'json']);
    const parsed = JSON.parse(stdout || 'null') as RuncState[] | null;
    return parsed ?? [];
  }

  /** Kills and deletes the container; a container runc does not know is not an error. */
  async forceDelete(id: string): Promise<boolean> {
    const r = await run(this.opts.runcPath, [...this.base(), 'delete', '--force', id], {
      allowFailure: true,
      timeoutMs: 60_000,
    });
    if (r.code === 0) return true;
    if (NOT_EXIST_RE.test(r.stderr)) return false;
    throw new RuncError('delete', id, r.stderr.trim());
  }
}
