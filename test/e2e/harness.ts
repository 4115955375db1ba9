// Starts real `aenv server` processes for end-to-end tests and points the e2b SDK at them.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';

export const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = join(REPO, 'packages', 'cli', 'dist', 'main.js');

export interface TestServerOptions {
  /** Names the node's state dir and host objects; keep it short ([a-z0-9], ≤ 8). */
  name: string;
  /** Extra TOML appended to the test config. */
  toml?: string;
  env?: Record<string, string>;
}

export interface TestServer {
  url: string;
  apiKey: string;
  home: string;
  logs(): string;
  /** Graceful stop (SIGTERM); resolves with the exit code. */
  stop(): Promise<number | null>;
  /** kill -9, as a crash. */
  crash(): Promise<void>;
  /** Starts the same node again on the same state. */
  restart(): Promise<TestServer>;
  /** Calls the control plane with the API key. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any; headers: Headers }>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

/** Each test node gets its own internal CIDRs so it never overlaps a dev node on 10.11/10.12. */
function cidrsFor(name: string): { hi: string; veth: string } {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) % 40;
  const base = 100 + h * 2;
  return { hi: `10.${base}.0.0/16`, veth: `10.${base + 1}.0.0/16` };
}

export async function startServer(opts: TestServerOptions, port?: number): Promise<TestServer> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  const home = `/var/lib/aenv-e2e/${opts.name}`;
  // Sandbox uids must be able to traverse to their dirs under home: o+x, no read.
  mkdirSync('/var/lib/aenv-e2e', { recursive: true, mode: 0o711 });
  mkdirSync(home, { recursive: true, mode: 0o711 });
  const cidrs = cidrsFor(opts.name);
  const configPath = join(home, 'test-config.toml');
  writeFileSync(
    configPath,
    [
      `home_path = "${home}"`,
      `runtime_path = "/run/aenv-e2e-${opts.name}"`,
      `deps_path = "/var/lib/aenv/deps"`,
      `resource_prefix = "e${opts.name}"`,
      `log_format = "json"`,
      `log_level = "debug"`,
      `[network.internal]`,
      `host_interaction_cidr = "${cidrs.hi}"`,
      `veth_cidr = "${cidrs.veth}"`,
      `[pool]`,
      `low_watermark = 1`,
      `high_watermark = 4`,
      `[runtime]`,
      `cow_volume_size_gb = 16`,
      opts.toml ?? '',
    ].join('\n') + '\n',
  );
  const listenPort = port ?? (await freePort());
  const url = `http://127.0.0.1:${listenPort}`;
  let output = '';
  const child: ChildProcess = spawn(process.execPath, [CLI, 'server', '--config', configPath], {
    env: { ...process.env, API_ADDR: `127.0.0.1:${listenPort}`, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));

  const deadline = Date.now() + 180_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`aenv server exited with ${child.exitCode}:\n${output.slice(-4000)}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 204) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`aenv server did not become healthy:\n${output.slice(-4000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const apiKey = readFileSync(join(home, 'secrets', 'api-key'), 'utf8').trim();
  const server: TestServer = {
    url,
    apiKey,
    home,
    logs: () => output,
    async stop() {
      child.kill('SIGTERM');
      return exited;
    },
    async crash() {
      child.kill('SIGKILL');
      await exited;
    },
    restart: () => startServer(opts, listenPort),
    async api(method, path, body) {
      const r = await fetch(`${url}${path}`, {
        method,
        headers: { 'x-api-key': apiKey, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await r.text();
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        // plain text body
      }
      return { status: r.status, body: parsed, headers: r.headers };
    },
  };
  return server;
}

/** Points the e2b SDK (which reads these at call time) at `server`. */
export function useSdk(server: TestServer): void {
  process.env.E2B_API_URL = server.url;
  process.env.E2B_SANDBOX_URL = server.url;
  process.env.E2B_API_KEY = server.apiKey;
  delete process.env.E2B_DEBUG;
}
