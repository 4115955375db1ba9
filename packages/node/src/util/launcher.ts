// Host commands (runc, btrfs, mount helpers, sync…) started by a small launcher process instead of by the server
// itself. Node forks the whole calling process to start a child, and the server holds hundreds of MB: each
// spawn cost ~20–25 ms with its event loop blocked (the fork, then a copy-on-write fault on every page it writes
// next), against ~2 ms from a small process (docs/runtime.md#host-commands).
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { spawnCollect, type SpawnOutcome, type SpawnRequest } from './spawn-collect.js';

interface Pending {
  resolve(o: SpawnOutcome): void;
  reject(e: Error): void;
}

interface Answer {
  id: number;
  outcome?: SpawnOutcome;
  error?: { message: string; code?: string };
}

/** The launcher's program beside this module (dist), or undefined where there is none (sources run by tests). */
export function launcherScript(): string | undefined {
  const path = fileURLToPath(new URL('./launcher-main.js', import.meta.url));
  return existsSync(path) ? path : undefined;
}

export class Launcher {
  private child: ChildProcess | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closed = false;

  /**
   * `script`: the launcher program; `execArgv`: node flags for it (a small heap by default). `env`: its own
   * environment (each command still gets the one its request names).
   */
  constructor(
    private readonly script: string,
    private readonly opts: { env: NodeJS.ProcessEnv; execArgv?: string[] },
  ) {}

  /** The launcher's process id while it runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Starts the launcher now, while the caller is still small (it is started on first use otherwise). */
  start(): this {
    this.ensureChild();
    return this;
  }

  run(req: SpawnRequest): Promise<SpawnOutcome> {
    if (this.closed) return spawnCollect(req);
    const child = this.ensureChild();
    const id = this.nextId++;
    return new Promise<SpawnOutcome>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      child.channel?.ref();
      child.send({ id, req }, (e) => {
        if (e) this.settle(id, { id, error: { message: `process launcher unavailable: ${e.message}` } });
      });
    });
  }

  /** Stops the launcher; commands still running go on, and later requests are run by this process itself. */
  async close(): Promise<void> {
    this.closed = true;
    const child = this.child;
    if (!child) return;
    await new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      // The child is unref'd (it must not keep the server alive): while waiting for its exit, it must, or a
      // caller with nothing else left (the last steps of a shutdown) ends with its await unsettled (exit 13).
      child.ref();
      child.disconnect();
    });
  }

  private ensureChild(): ChildProcess {
    if (this.child) return this.child;
    const child = fork(this.script, [], {
      env: this.opts.env,
      execArgv: this.opts.execArgv ?? ['--max-old-space-size=64'],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child.on('message', (a: Answer) => this.settle(a.id, a));
    child.on('error', () => {});
    child.once('exit', (code, signal) => {
      if (this.child === child) this.child = undefined;
      const why = `process launcher exited (${signal ?? `status ${code}`})`;
      for (const id of [...this.pending.keys()]) this.settle(id, { id, error: { message: why } });
    });
    child.unref();
    child.channel?.unref();
    this.child = child;
    return child;
  }

  private settle(id: number, a: Answer): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (this.pending.size === 0) this.child?.channel?.unref();
    if (a.outcome) return p.resolve(a.outcome);
    const e = new Error(a.error?.message ?? 'process launcher: no answer') as NodeJS.ErrnoException;
    if (a.error?.code) e.code = a.error.code;
    p.reject(e);
  }
}

let installed: Launcher | undefined;

/** Every host command of this process goes through `launcher` from now on (undefined: started directly again). */
export function installLauncher(launcher: Launcher | undefined): void {
  installed = launcher;
}

/** Runs one host command: through the installed launcher, else from this process. */
export function launch(req: SpawnRequest): Promise<SpawnOutcome> {
  return installed ? installed.run(req) : spawnCollect(req);
}

/**
 * Starts a launcher for this process and installs it (`env`: the launcher's own environment, without secrets).
 * undefined where its program is missing (sources run by tests): commands then start from this process.
 */
export function startLauncher(env: NodeJS.ProcessEnv): { close(): Promise<void> } | undefined {
  const script = launcherScript();
  if (!script) return undefined;
  const launcher = new Launcher(script, { env }).start();
  installLauncher(launcher);
  return {
    close: async () => {
      if (installed === launcher) installLauncher(undefined);
      await launcher.close();
    },
  };
}
