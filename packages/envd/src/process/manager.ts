import { closeSync, constants, openSync } from 'node:fs';
import type * as NodePty from 'node-pty';
import type { Logger } from '../logger.js';
import type { SandboxUser } from '../users/user-db.js';
import { exitStatus, type ExitStatus } from './exit-status.js';
import { ManagedProcess, type ProcessConfigData, type ProcessOutput } from './managed-process.js';
import { spawnPiped, type PipedChild } from './spawn-piped.js';
import type { NativeApi } from '../native.js';
import type { EventQueue } from '../event-queue.js';

export interface StartOptions {
  config: ProcessConfigData;
  /** Absolute, existing working directory. */
  cwd: string;
  /** Full environment of the process. */
  env: Record<string, string>;
  user: SandboxUser;
  tag?: string;
  /** true/undefined = pipe, false = /dev/null. */
  stdin: boolean;
  pty?: { cols: number; rows: number };
  /** Hard lifetime limit (ms); 0/undefined = none. */
  timeoutMs?: number;
}

export interface ProcessManagerOptions {
  /**
   * Path of aenv-init, used as `aenv-init exec-as` to apply uid, gid and supplementary groups where envd cannot:
   * PTYs (node-pty spawns), and commands when the native helper is missing.
   */
  initPath: string;
  /** Spawns through vfork as the command's user when available (see spawn-piped.ts). */
  native?: NativeApi;
  logger: Logger;
  /** How long to wait for output pipes after the process exited before ending the stream anyway. */
  pipeDrainGraceMs?: number;
  /** How many finished processes to remember for late Connect calls. */
  recentExits?: number;
}

export interface RecentExit {
  pid: number;
  tag: string | undefined;
  status: ExitStatus;
}

type PtyModule = typeof NodePty;

function holdPtySlave(term: NodePty.IPty): number | undefined {
  const name = (term as unknown as { ptsName?: string }).ptsName;
  if (!name) return undefined;
  try {
    return openSync(name, constants.O_RDWR | constants.O_NOCTTY);
  } catch {
    return undefined;
  }
}

export class ProcessStartError extends Error {}

/** Commands die before envd when the sandbox runs out of memory. */
const OOM_SCORE_ADJ = 100;

/** Starts processes as sandbox users and keeps track of running and recently finished ones. */
export class ProcessManager {
  private readonly running = new Map<number, ManagedProcess>();
  private readonly tags = new Map<string, number>();
  private readonly recent = new Map<number, RecentExit>();
  private ptyModule: Promise<PtyModule> | undefined;

  constructor(private readonly opts: ProcessManagerOptions) {}

  /** Starts a process; the returned queue is attached before any output can be produced. */
  async start(o: StartOptions): Promise<{ proc: ManagedProcess; events: EventQueue<ProcessOutput> }> {
    const argv = [
      'exec-as',
      String(o.user.uid),
      String(o.user.gid),
      o.user.groups.length ? o.user.groups.join(',') : '-',
      '--oom-score-adj',
      String(OOM_SCORE_ADJ),
      '--',
      o.config.cmd,
      ...o.config.args,
    ];
    const pty = o.pty ? await this.loadPty() : undefined;
    let proc: ManagedProcess;
    if (pty && o.pty) {
      let term: NodePty.IPty;
      try {
        term = pty.spawn(this.opts.initPath, argv, {
          name: o.env.TERM || 'xterm-256color',
          cols: o.pty.cols,
          rows: o.pty.rows,
          cwd: o.cwd,
          env: o.env,
          encoding: null,
        });
      } catch (err) {
        throw new ProcessStartError(`error starting process: ${(err as Error).message}`);
      }
      proc = new ManagedProcess(term.pid, o.config, o.tag, { pty: term });
      // Hold the slave open ourselves: otherwise, when the last process on the terminal exits, the master
      // can report EOF before node-pty read what the process wrote last, and that output is lost.
      const slave = holdPtySlave(term);
      term.onData((data: string | Buffer) =>
        proc.emitData('pty', typeof data === 'string' ? Buffer.from(data) : data),
      );
      term.onExit(({ exitCode, signal }) => {
        if (slave !== undefined) closeSync(slave);
        this.finish(proc, exitStatus(exitCode, signal));
      });
    } else {
      let child: PipedChild;
      const options = { cwd: o.cwd, env: o.env, stdin: o.stdin };
      try {
        // The native helper switches to the user itself: one exec (the command's) instead of two.
        child = this.opts.native?.spawn
          ? await spawnPiped(this.opts.native, o.config.cmd, o.config.args, {
              ...options,
              as: { uid: o.user.uid, gid: o.user.gid, groups: o.user.groups, oomScoreAdj: OOM_SCORE_ADJ },
            })
          : await spawnPiped(undefined, this.opts.initPath, argv, options);
      } catch (err) {
        throw new ProcessStartError(`error starting process: ${(err as Error).message}`);
      }
      const { stdout, stderr } = child;
      proc = new ManagedProcess(child.pid, o.config, o.tag, { child });
      child.stdin?.on('error', () => {});
      stdout.on('data', (b: Buffer) => proc.emitData('stdout', b));
      stderr.on('data', (b: Buffer) => proc.emitData('stderr', b));
      let open = 2;
      let exited: ExitStatus | undefined;
      let grace: NodeJS.Timeout | undefined;
      const maybeFinish = () => {
        if (!exited || open > 0) return;
        if (grace) clearTimeout(grace);
        this.finish(proc, exited);
      };
      for (const s of [stdout, stderr]) {
        s.once('close', () => {
          open--;
          maybeFinish();
        });
      }
      void child.exited.then(({ code, signal }) => {
        exited = exitStatus(code, signal);
        // A background grandchild can keep the pipes open forever; do not wait for it.
        grace = setTimeout(() => {
          stdout.destroy();
          stderr.destroy();
          this.finish(proc, exited!);
        }, this.opts.pipeDrainGraceMs ?? 250);
        maybeFinish();
      });
    }
    const events = proc.subscribe();
    this.running.set(proc.pid, proc);
    if (o.tag) this.tags.set(o.tag, proc.pid);
    if (o.timeoutMs && o.timeoutMs > 0) proc.limitLifetime(o.timeoutMs);
    this.opts.logger.debug('process started', {
      pid: proc.pid,
      cmd: o.config.cmd,
      user: o.user.name,
      pty: !!o.pty,
    });
    return { proc, events };
  }

  find(selector: { pid?: number; tag?: string }): ManagedProcess | undefined {
    const pid = selector.tag !== undefined ? this.tags.get(selector.tag) : selector.pid;
    return pid === undefined ? undefined : this.running.get(pid);
  }

  recentExit(selector: { pid?: number; tag?: string }): RecentExit | undefined {
    if (selector.pid !== undefined) return this.recent.get(selector.pid);
    for (const r of this.recent.values()) if (r.tag === selector.tag) return r;
    return undefined;
  }

  list(): ManagedProcess[] {
    return [...this.running.values()];
  }

  /** Kills every running process group (envd shutdown). */
  killAll(): void {
    for (const p of this.running.values()) p.signal('SIGKILL');
  }

  private finish(proc: ManagedProcess, status: ExitStatus): void {
    if (proc.status) return;
    proc.finish(status);
    if (this.running.get(proc.pid) === proc) this.running.delete(proc.pid);
    if (proc.tag && this.tags.get(proc.tag) === proc.pid) this.tags.delete(proc.tag);
    this.recent.delete(proc.pid);
    this.recent.set(proc.pid, { pid: proc.pid, tag: proc.tag, status });
    const max = this.opts.recentExits ?? 1024;
    while (this.recent.size > max) this.recent.delete(this.recent.keys().next().value as number);
    this.opts.logger.debug('process ended', { pid: proc.pid, status: status.status });
  }

  private loadPty(): Promise<PtyModule> {
    this.ptyModule ??= import('node-pty').then(
      (m) => ((m as { default?: PtyModule }).default ?? m) as PtyModule,
    );
    return this.ptyModule;
  }
}
