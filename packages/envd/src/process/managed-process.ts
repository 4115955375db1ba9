import type { IPty } from 'node-pty';
import { EventQueue } from '../event-queue.js';
import type { ExitStatus } from './exit-status.js';
import type { PipedChild } from './spawn-piped.js';

export interface ProcessConfigData {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

export type OutputStream = 'stdout' | 'stderr' | 'pty';

export type ProcessOutput =
  { kind: 'data'; stream: OutputStream; bytes: Buffer } | { kind: 'end'; status: ExitStatus };

/** Output chunk limits of E2B's envd: 32 KiB for pipes, 16 KiB for a PTY. */
export const PIPE_CHUNK = 32 * 1024;
export const PTY_CHUNK = 16 * 1024;
/** A subscriber holding more than this pauses the process's output until it catches up. */
const HIGH_WATER = 1024 * 1024;

export class StdinError extends Error {}

/**
 * A process started through envd: fans its output out to every attached stream (Start and any number
 * of Connect calls), and owns its stdin / PTY. Output produced while nobody is attached is dropped, as
 * in E2B's envd; the process is never blocked by a missing reader.
 */
export class ManagedProcess {
  readonly subscribers = new Set<EventQueue<ProcessOutput>>();
  status: ExitStatus | undefined;
  private paused = false;
  private stdinOpen: boolean;
  private timeout: NodeJS.Timeout | undefined;
  private readonly finished: Promise<ExitStatus>;
  private resolveFinished!: (s: ExitStatus) => void;

  constructor(
    readonly pid: number,
    readonly config: ProcessConfigData,
    readonly tag: string | undefined,
    private readonly io: { child: PipedChild; pty?: undefined } | { pty: IPty; child?: undefined },
  ) {
    this.stdinOpen = io.pty !== undefined || !!io.child?.stdin;
    this.finished = new Promise((resolve) => (this.resolveFinished = resolve));
  }

  get isPty(): boolean {
    return this.io.pty !== undefined;
  }

  /** Resolves with the exit status once the process ended and its output was delivered. */
  wait(): Promise<ExitStatus> {
    return this.finished;
  }

  subscribe(): EventQueue<ProcessOutput> {
    const q = new EventQueue<ProcessOutput>();
    q.onDrain = () => this.maybeResume();
    if (this.status) {
      q.push({ kind: 'end', status: this.status });
      q.close();
    } else {
      this.subscribers.add(q);
    }
    return q;
  }

  unsubscribe(q: EventQueue<ProcessOutput>): void {
    this.subscribers.delete(q);
    this.maybeResume();
  }

  emitData(stream: OutputStream, bytes: Buffer): void {
    const max = stream === 'pty' ? PTY_CHUNK : PIPE_CHUNK;
    for (let off = 0; off < bytes.length; off += max) {
      const slice = bytes.subarray(off, Math.min(off + max, bytes.length));
      for (const q of this.subscribers) q.push({ kind: 'data', stream, bytes: slice }, slice.length);
    }
    if (!this.paused && [...this.subscribers].some((q) => q.bufferedBytes > HIGH_WATER)) {
      this.paused = true;
      this.setFlowing(false);
    }
  }

  finish(status: ExitStatus): void {
    if (this.status) return;
    this.status = status;
    this.stdinOpen = false;
    if (this.timeout) clearTimeout(this.timeout);
    for (const q of this.subscribers) {
      q.push({ kind: 'end', status });
      q.close();
    }
    this.subscribers.clear();
    this.resolveFinished(status);
  }

  /** Kills the process group after ms (Connect-Timeout-Ms on Start is a hard lifetime limit). */
  limitLifetime(ms: number): void {
    this.timeout = setTimeout(() => this.signal('SIGKILL'), ms);
  }

  /** Signals the whole process group (envd starts every process in its own session). */
  signal(sig: 'SIGKILL' | 'SIGTERM'): void {
    if (this.status) return;
    try {
      process.kill(-this.pid, sig);
    } catch {
      try {
        process.kill(this.pid, sig);
      } catch {
        /* already gone */
      }
    }
  }

  async writeStdin(data: Buffer): Promise<void> {
    const stdin = this.io.child?.stdin;
    if (this.isPty) throw new StdinError('process was started with a PTY: send pty input instead');
    if (!stdin || !this.stdinOpen || stdin.destroyed) throw new StdinError('stdin not enabled or closed');
    await new Promise<void>((resolve, reject) =>
      stdin.write(data, (err) => (err ? reject(new StdinError(`writing stdin: ${err.message}`)) : resolve())),
    );
  }

  writePty(data: Buffer): void {
    if (!this.io.pty) throw new StdinError('process was not started with a PTY');
    if (this.status) throw new StdinError('process has exited');
    this.io.pty.write(data);
  }

  closeStdin(): void {
    if (this.isPty) throw new StdinError('cannot close stdin of a PTY process');
    const stdin = this.io.child?.stdin;
    if (!stdin || !this.stdinOpen) throw new StdinError('stdin not enabled or closed');
    this.stdinOpen = false;
    stdin.end();
  }

  resize(cols: number, rows: number): void {
    if (!this.io.pty) throw new StdinError('process was not started with a PTY');
    if (this.status) return;
    this.io.pty.resize(cols, rows);
  }

  private maybeResume(): void {
    if (!this.paused) return;
    if ([...this.subscribers].some((q) => q.bufferedBytes > q.lowWaterBytes)) return;
    this.paused = false;
    this.setFlowing(true);
  }

  private setFlowing(on: boolean): void {
    if (this.io.pty) {
      if (on) this.io.pty.resume();
      else this.io.pty.pause();
      return;
    }
    for (const s of [this.io.child.stdout, this.io.child.stderr]) {
      if (on) s?.resume();
      else s?.pause();
    }
  }
}
