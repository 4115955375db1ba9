// A template's start command and ready check (docs/templates.md#the-build): the start command runs in the
// background as a login shell; the ready command is run until it exits 0 — after 0.1, 0.2, 0.4, 0.8, 1.6 s, then
// every 2 s, for 10 min at most. The start command must still be running, or have exited 0, for the template to
// count as ready.
import type { CommandContext } from '../snapshot/index.js';
import type { BackgroundProcess, CommandOutput, EnvdRpcClient } from '@aenv/protocol';

export interface StartupSpec {
  startCmd?: string;
  readyCmd?: string;
  context: CommandContext;
}

export interface StartupOptions {
  envd: EnvdRpcClient;
  startup: StartupSpec;
  /** Login shell used for both commands (`/bin/bash`, or `/bin/sh` in images without bash). */
  shell?: string;
  onOutput?: (source: 'start' | 'ready', out: CommandOutput) => void;
  onProgress?: (message: string) => void;
  signal?: AbortSignal;
  readyIntervalMs?: number;
  readyTimeoutMs?: number;
  /**
   * Without a ready command: how long the start command must keep running (or exit 0) to count as ready.
   * The reference waits a blind `sleep 20`; a start command that is still up after a few seconds has passed the
   * failures a blind wait would catch, so the default is 5 s.
   */
  defaultReadyMs?: number;
}

export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StartupError';
  }
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/** Starts the start command (if any) and waits until the template is ready. Returns the running start process. */
export async function runStartup(o: StartupOptions): Promise<BackgroundProcess | undefined> {
  const shell = o.shell ?? '/bin/bash';
  const ctx = o.startup.context;
  const base = {
    ...(ctx.user ? { user: ctx.user } : {}),
    ...(ctx.workdir && ctx.workdir !== '/' ? { cwd: ctx.workdir } : {}),
    envs: ctx.envVars,
  };
  const interval = o.readyIntervalMs ?? 2000;
  const deadline = Date.now() + (o.readyTimeoutMs ?? 10 * 60_000);

  let proc: BackgroundProcess | undefined;
  let ended: { exitCode: number; status: string; error?: string } | undefined;
  if (o.startup.startCmd) {
    o.onProgress?.(`starting: ${o.startup.startCmd}`);
    proc = await o.envd.startBackground(
      { cmd: shell, args: ['-l', '-c', o.startup.startCmd], ...base },
      { onOutput: (out) => o.onOutput?.('start', out) },
    );
    void proc.ended.then((r) => (ended = r));
  }
  const startFailed = (): string | undefined =>
    ended && ended.exitCode !== 0
      ? `the start command exited with code ${ended.exitCode}${ended.error ? ` (${ended.error})` : ''} before the template was ready`
      : undefined;

  try {
    if (!o.startup.readyCmd) {
      if (!proc) return undefined;
      const wait = o.defaultReadyMs ?? 5000;
      o.onProgress?.(`no ready command: waiting ${wait / 1000} s for the start command to stay up`);
      const until = Date.now() + wait;
      while (Date.now() < until && !ended) await sleep(Math.min(200, until - Date.now()), o.signal);
      const failed = startFailed();
      if (failed) throw new StartupError(failed);
      return proc;
    }
    o.onProgress?.(`waiting for the ready command: ${o.startup.readyCmd}`);
    for (let attempt = 1; ; attempt++) {
      o.signal?.throwIfAborted();
      const r = await o.envd.run(
        { cmd: shell, args: ['-l', '-c', o.startup.readyCmd], ...base },
        { onOutput: (out) => o.onOutput?.('ready', out), ...(o.signal ? { signal: o.signal } : {}) },
      );
      const failed = startFailed();
      if (failed) throw new StartupError(failed);
      if (r.exitCode === 0) {
        o.onProgress?.(`ready after ${attempt} check${attempt === 1 ? '' : 's'}`);
        return proc;
      }
      // Quick first checks (most start commands are up within a second), then every `interval`.
      const wait = Math.min(interval, 100 * 2 ** (attempt - 1));
      if (Date.now() + wait > deadline) {
        throw new StartupError(
          `the ready command did not succeed within ${Math.round((o.readyTimeoutMs ?? 600_000) / 1000)} s (last exit code ${r.exitCode})`,
        );
      }
      await sleep(wait, o.signal);
    }
  } catch (e) {
    proc?.detach();
    throw e;
  }
}
