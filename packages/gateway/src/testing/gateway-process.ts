// A real `aenv gateway` process for tests and benchmarks: the built CLI, its own config file, a loopback port
// chosen by the kernel and read back from its "gateway listening" log line.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../../cli/dist/main.js', import.meta.url));

export interface GatewayProcess {
  readonly pid: number;
  readonly url: string;
  readonly metricsUrl: string;
  output(): string;
  /** SIGTERM (or `signal`); resolves with the exit code or signal name. */
  stop(signal?: NodeJS.Signals): Promise<number | string | null>;
}

export async function startGatewayProcess(
  gateway: Record<string, unknown>,
  apiKey: string,
  opts: { nodeArgs?: string[] } = {},
): Promise<GatewayProcess> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  const dir = mkdtempSync(join(tmpdir(), 'aenv-gateway-test-'));
  const configPath = join(dir, 'gateway.json');
  const config = {
    log_level: 'info',
    log_format: 'json',
    gateway: { http_listen_addr: '127.0.0.1:0', metrics_listen_addr: '127.0.0.1:0', ...gateway },
  };
  writeFileSync(configPath, JSON.stringify(config), { mode: 0o600 });
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), CLI, 'gateway', '-config', configPath], {
    env: { PATH: process.env.PATH, AENV_API_KEY: apiKey },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | string | null>((resolve) =>
    child.on('exit', (code, signal) => {
      rmSync(dir, { recursive: true, force: true });
      resolve(code ?? signal);
    }),
  );
  const started = await new Promise<{ port: number; metricsPort: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start:\n${out}`)), 30_000);
    const check = () => {
      const line = out.split('\n').find((l) => l.includes('"gateway listening"'));
      if (!line) return;
      clearTimeout(timer);
      resolve(JSON.parse(line) as { port: number; metricsPort: number });
    };
    child.stdout.on('data', check);
    child.on('exit', () => reject(new Error(`gateway exited:\n${out}`)));
  });
  return {
    pid: child.pid!,
    url: `http://127.0.0.1:${started.port}`,
    metricsUrl: `http://127.0.0.1:${started.metricsPort}/metrics`,
    output: () => out,
    stop: (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}
