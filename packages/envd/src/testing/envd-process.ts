import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_PATH } from '@aenv/protocol/envd';

export interface RunningTestEnvd {
  url: string;
  port: number;
  /** Host pid of aenv-init (sandbox) or of node (host run). */
  pid: number;
  logs(): string;
  stop(): Promise<void>;
}

const SCRIPT = join(fileURLToPath(new URL('.', import.meta.url)), 'run-in-sandbox.sh');

function waitForPort(child: ChildProcess, out: { text: string }, timeoutMs = 30_000): Promise<number> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => done(new Error(`envd did not start in ${timeoutMs} ms:\n${out.text}`)),
      timeoutMs,
    );
    const onData = (b: Buffer) => {
      out.text += b.toString();
      const m = /"msg":"envd listening","port":(\d+)/.exec(out.text);
      if (m) done(undefined, Number(m[1]));
    };
    const onExit = (code: number | null) =>
      done(new Error(`envd exited (${code}) before listening:\n${out.text}`));
    const done = (err?: Error, port?: number) => {
      clearTimeout(timer);
      child.stderr?.off('data', onData);
      child.off('exit', onExit);
      child.stderr?.on('data', (b: Buffer) => (out.text += b.toString()));
      if (err) reject(err);
      else resolve(port!);
    };
    child.stderr?.on('data', onData);
    child.on('exit', onExit);
  });
}

async function stopChild(child: ChildProcess, signalPid: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  try {
    process.kill(signalPid, 'SIGTERM');
  } catch {
    /* gone */
  }
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

function childPid(parent: number): number | undefined {
  try {
    const children = readFileSync(`/proc/${parent}/task/${parent}/children`, 'utf8').trim().split(/\s+/);
    return children[0] ? Number(children[0]) : undefined;
  } catch {
    return undefined;
  }
}

const baseEnv = (env: Record<string, string>) => ({
  PATH: DEFAULT_PATH,
  ENVD_PORT: '0',
  ENVD_HOST: '127.0.0.1',
  ENVD_LOG_LEVEL: 'debug',
  ...env,
});

/** A loopback port that was free a moment ago (envd must keep its port across restarts). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** Runs aenv-init → envd as PID 1 of a mount+PID namespace chrooted into rootfs (see run-in-sandbox.sh). */
export async function startSandboxEnvd(
  rootfs: string,
  toolsDir: string,
  env: Record<string, string> = {},
): Promise<RunningTestEnvd> {
  const child = spawn(SCRIPT, [rootfs, toolsDir], {
    env: baseEnv({ ENVD_PORT: String(await freePort()), ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out = { text: '' };
  child.stdout?.on('data', (b: Buffer) => (out.text += b.toString()));
  const port = await waitForPort(child, out);
  const init = childPid(child.pid!);
  if (!init) throw new Error('cannot find aenv-init');
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    pid: init,
    logs: () => out.text,
    stop: () => stopChild(child, init),
  };
}

/** Runs the envd bundle of toolsDir directly on the host with the host node (no chroot, no aenv-init PID 1). */
export async function startHostEnvd(
  toolsDir: string,
  env: Record<string, string> = {},
): Promise<RunningTestEnvd> {
  const flags = readFileSync(join(toolsDir, 'envd', 'node-flags'), 'utf8')
    .split('\n')
    .filter(Boolean);
  const child = spawn(process.execPath, [...flags, join(toolsDir, 'envd', 'envd.cjs')], {
    env: baseEnv({ AENV_TOOLS_DIR: toolsDir, ENVD_STATE_PATH: '', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out = { text: '' };
  child.stdout?.on('data', (b: Buffer) => (out.text += b.toString()));
  const port = await waitForPort(child, out);
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid!,
    logs: () => out.text,
    stop: () => stopChild(child, child.pid!),
  };
}
