// A real `aenv scheduler` process for integration tests: the built CLI, its own config file, loopback
// ports chosen by the kernel (port 0) and read back from its "scheduler listening" log line.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../../cli/dist/main.js', import.meta.url));
const START_TIMEOUT_MS = 30_000;

export interface SchedulerProcess {
  readonly pid: number;
  /** `127.0.0.1:<port>` of the gRPC endpoint. */
  readonly grpcAddress: string;
  readonly grpcPort: number;
  readonly metricsUrl: string;
  /** Everything it printed so far (JSON log lines). */
  output(): string;
  /** SIGTERM (or `signal`), then the exit code (or signal name). */
  stop(signal?: NodeJS.Signals): Promise<number | string | null>;
}

export interface StartOptions {
  args?: string[];
  env?: Record<string, string>;
  /** Reuse ports of an earlier process (a restart at the same address). */
  grpcPort?: number;
}

/** Writes `config` (the scheduler JSON) and starts the scheduler with it. */
export async function startSchedulerProcess(
  config: Record<string, unknown>,
  opts: StartOptions = {},
): Promise<SchedulerProcess> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  const dir = mkdtempSync(join(tmpdir(), 'aenv-scheduler-test-'));
  const configPath = join(dir, 'scheduler.json');
  const scheduler = (config.scheduler ?? {}) as Record<string, unknown>;
  const full = {
    log_level: 'debug',
    log_format: 'json',
    ...config,
    scheduler: {
      grpc_listen_addr: `127.0.0.1:${opts.grpcPort ?? 0}`,
      metrics_listen_addr: '127.0.0.1:0',
      ...scheduler,
    },
  };
  writeFileSync(configPath, JSON.stringify(full), { mode: 0o600 });
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, ...opts.env };
  const child: ChildProcess = spawn(
    process.execPath,
    [CLI, 'scheduler', '-config', configPath, ...(opts.args ?? [])],
    {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  const exited = new Promise<number | string | null>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal)),
  );
  exited.finally(() => rmSync(dir, { recursive: true, force: true }));
  const ports = await new Promise<{ grpc: number; metrics: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`scheduler did not start:\n${out}`)), START_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      for (const line of out.split('\n')) {
        if (!line.includes('"scheduler listening"')) continue;
        const parsed = JSON.parse(line) as { grpcPort: number; metricsPort: number };
        clearTimeout(timer);
        resolve({ grpc: parsed.grpcPort, metrics: parsed.metricsPort });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`scheduler exited (${code}) before listening:\n${out}`));
    });
  });
  return {
    pid: child.pid!,
    grpcAddress: `127.0.0.1:${ports.grpc}`,
    grpcPort: ports.grpc,
    metricsUrl: `http://127.0.0.1:${ports.metrics}/metrics`,
    output: () => out,
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
