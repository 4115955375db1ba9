// Starts real `aenv server` processes for end-to-end tests and points the e2b SDK at them.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { randomInt } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import Database from 'better-sqlite3';

export const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = join(REPO, 'packages', 'cli', 'dist', 'main.js');

/** The port envd listens on inside every sandbox. */
export { ENVD_PORT } from '@aenv/protocol';

export interface TestServerOptions {
  /** Names the node's state dir and host objects; keep it short ([a-z0-9], ≤ 7). */
  name: string;
  /** Extra TOML appended to the test config (not `[runtime]`, `[pool]` or `[network.internal]`: see `runtime`). */
  toml?: string;
  /** Extra `key = value` lines for the config's `[runtime]` section. */
  runtime?: string[];
  env?: Record<string, string>;
  /** Address the server listens on (default 127.0.0.1); the tests always talk to it over loopback. */
  listenHost?: string;
  /** `[pool].warm_sandboxes` (default 0 here). */
  warm?: number;
  /** Other `[pool]` keys, over the test defaults (`low_watermark = 1`, `high_watermark = 4`). */
  pool?: Record<string, number>;
  /** `[pool].start_captures` (default false here). */
  startCaptures?: boolean;
}

export interface ApiAnswer {
  status: number;
  // Parsed JSON (or the raw text when it is not JSON): tests assert on its shape.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  headers: Headers;
}

export interface TestServer {
  url: string;
  port: number;
  apiKey: string;
  home: string;
  /** `$AENV_RUNTIME` of this node (runc state, netns files). */
  runtimePath: string;
  /** `resource_prefix`: names the node's veths, netns files, nft table and cgroup parent. */
  prefix: string;
  cidrs: { hi: string; veth: string };
  logs(): string;
  /** Graceful stop (SIGTERM); resolves with the exit code. */
  stop(): Promise<number | null>;
  /** kill -9, as a crash. */
  crash(): Promise<void>;
  /** Starts the same node again on the same state. */
  restart(): Promise<TestServer>;
  /** Calls the control plane with the API key. */
  api(method: string, path: string, body?: unknown): Promise<ApiAnswer>;
  /** Kills every sandbox the node knows (test cleanup); returns how many. */
  killAll(): Promise<number>;
  /** Kills every sandbox, then stops the node gracefully; resolves with the exit code. */
  shutdown(): Promise<number | null>;
}

/** Ports freePort handed out in this process: each once. */
const handedOut = new Set<number>();

/**
 * A port free now that the kernel will not hand out by itself: below the ephemeral range, so no connect() or
 * listen(0) can take it between this call and the listen of the server it is for (a node's outgoing
 * connections once took the port picked for the next node: EADDRINUSE). Hosts whose ephemeral range starts
 * too low for that get an ephemeral port, as before.
 */
export async function freePort(): Promise<number> {
  const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  const top = low - 1;
  const bottom = Math.max(10_000, top - 12_000);
  if (!(top - bottom >= 1000)) return listenOn(0);
  for (let i = 0; i < 200; i++) {
    const port = bottom + randomInt(top - bottom + 1);
    if (handedOut.has(port)) continue;
    try {
      handedOut.add(await listenOn(port));
      return port;
    } catch {
      // in use: another one
    }
  }
  throw new Error(`no free port between ${bottom} and ${top}`);
}

/** Listens on `port` (0: any) on loopback, closes, and says which port it was. */
function listenOn(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => {
      const got = (s.address() as { port: number }).port;
      s.close(() => resolve(got));
    });
  });
}

/** What a program run by `runProgram` did. */
export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `node <script> <args>` (a CLI under test) with exactly `env` (nothing inherited), stdin from `input` or
 * /dev/null; resolves with its exit code and output, never rejecting on a failing command.
 */
export function runProgram(
  script: string,
  args: readonly string[],
  opts: { env: Record<string, string>; cwd?: string; input?: string; timeoutMs?: number },
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...opts.env },
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
      stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      timeout: opts.timeoutMs ?? 300_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    if (opts.input !== undefined) child.stdin!.end(opts.input);
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/** Each test node gets its own internal CIDRs so it never overlaps a dev node on 10.11/10.12. */
export function cidrsFor(name: string): { hi: string; veth: string } {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) % 70;
  const base = 100 + h * 2;
  return { hi: `10.${base}.0.0/16`, veth: `10.${base + 1}.0.0/16` };
}

/** Every node started in this test file, by name, with what it printed (shown when a test fails). */
const started = new Map<string, () => string>();

/**
 * What the nodes of this file logged that explains a failure: their warnings and errors, then their last lines.
 * Their logs are JSON at debug level; CI output shows only this, so it must be enough to find a cause.
 */
export function logsForFailure(): string {
  const parts: string[] = [];
  for (const [name, output] of started) {
    const lines = output()
      .split('\n')
      .filter((l) => l.trim() !== '');
    const problems = lines.filter((l) => /"level":(4|5|6)\d/.test(l) || !l.startsWith('{'));
    parts.push(
      `--- node ${name}: warnings and errors (last 40) ---`,
      ...problems.slice(-40),
      `--- node ${name}: last 40 lines ---`,
      ...lines.slice(-40),
    );
  }
  return parts.join('\n');
}

/** The last warnings and errors each node of this file logged, one per line, cut to fit an error message. */
function recentProblems(perNode = 8): string {
  const parts: string[] = [];
  for (const [name, output] of started) {
    const problems = output()
      .split('\n')
      .filter((l) => /"level":(4|5|6)\d/.test(l))
      .slice(-perNode)
      .map((l) => `  ${l.slice(0, 600)}`);
    if (problems.length > 0) parts.push(`node ${name}, last warnings:`, ...problems);
  }
  return parts.length > 0 ? `\n${parts.join('\n')}` : '';
}

export async function startServer(opts: TestServerOptions, port?: number): Promise<TestServer> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  const home = `/var/lib/aenv-e2e/${opts.name}`;
  const runtimePath = `/run/aenv-e2e-${opts.name}`;
  const prefix = `e${opts.name}`;
  // Sandbox uids must be able to traverse to their dirs under home: o+x, no read.
  mkdirSync('/var/lib/aenv-e2e', { recursive: true, mode: 0o711 });
  mkdirSync(home, { recursive: true, mode: 0o711 });
  const cidrs = cidrsFor(opts.name);
  const configPath = join(home, 'test-config.toml');
  writeFileSync(
    configPath,
    [
      `home_path = "${home}"`,
      `runtime_path = "${runtimePath}"`,
      `deps_path = "/var/lib/aenv/deps"`,
      `resource_prefix = "${prefix}"`,
      `log_format = "json"`,
      `log_level = "debug"`,
      `[network.internal]`,
      `host_interaction_cidr = "${cidrs.hi}"`,
      `veth_cidr = "${cidrs.veth}"`,
      `[pool]`,
      ...Object.entries({
        low_watermark: 1,
        high_watermark: 4,
        // Adopted warm sandboxes run under another container id; tests that look at host objects by sandbox
        // id start nodes without them (warm-pool*.test.ts cover the pool).
        warm_sandboxes: opts.warm ?? 0,
        // A start capture is made by a seed container that comes and goes in the background, and cold creates
        // then restore it; start-captures.test.ts covers them, the other tests boot.
        start_captures: opts.startCaptures ?? false,
        ...opts.pool,
      }).map(([k, v]) => `${k} = ${v}`),
      `[runtime]`,
      `cow_volume_size_gb = 16`,
      ...(opts.runtime ?? []),
      opts.toml ?? '',
    ].join('\n') + '\n',
  );
  const listenPort = port ?? (await freePort());
  const url = `http://127.0.0.1:${listenPort}`;
  let output = '';
  const child: ChildProcess = spawn(process.execPath, [CLI, 'server', '--config', configPath], {
    env: { ...process.env, API_ADDR: `${opts.listenHost ?? '127.0.0.1'}:${listenPort}`, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  let key = opts.name;
  for (let n = 2; started.has(key); n++) key = `${opts.name} (start ${n})`;
  started.set(key, () => output);
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));

  const deadline = Date.now() + 180_000;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`aenv server exited with ${child.exitCode}:\n${output.slice(-4000)}`);
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
  const api: TestServer['api'] = async (method, path, body) => {
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
  };
  const killAll = async () => {
    if (child.exitCode !== null) return 0;
    const listed = await api('GET', '/v2/sandboxes');
    if (listed.status !== 200) return 0;
    const ids = (listed.body as { sandboxID: string }[]).map((s) => s.sandboxID);
    await Promise.all(ids.map((id) => api('DELETE', `/sandboxes/${id}`)));
    return ids.length;
  };
  const server: TestServer = {
    url,
    port: listenPort,
    apiKey,
    home,
    runtimePath,
    prefix,
    cidrs,
    logs: () => output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      return exited;
    },
    async crash() {
      child.kill('SIGKILL');
      await exited;
    },
    restart: () => startServer(opts, listenPort),
    api,
    killAll,
    async shutdown() {
      await killAll().catch(() => 0);
      return server.stop();
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

/**
 * A data-plane request through the server's proxy to `port` of a sandbox, routed by headers; `prefix`
 * puts `/proxy` in front of the path (the other routing form, docs/networking.md#data-plane-routing).
 */
export function proxyFetch(
  server: TestServer,
  sandboxId: string,
  port: number,
  path: string,
  init: RequestInit & { prefix?: boolean } = {},
): Promise<Response> {
  const { prefix, headers, ...rest } = init;
  return fetch(`${server.url}${prefix ? '/proxy' : ''}${path}`, {
    ...rest,
    headers: {
      'e2b-sandbox-id': sandboxId,
      'e2b-sandbox-port': String(port),
      ...(headers as Record<string, string>),
    },
  });
}

/** Host objects of a node that belong to sandboxes or slots, found by the node's names. */
export interface HostObjects {
  links: string[];
  netnsFiles: string[];
  runcContainers: string[];
  cgroups: string[];
  slotChains: string[];
  mounts: string[];
}

function sh(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
}

export function dirEntries(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}

export function hostObjects(server: Pick<TestServer, 'prefix' | 'runtimePath' | 'home'>): HostObjects {
  const links = (JSON.parse(sh('ip', ['-j', 'link', 'show']) || '[]') as { ifname: string }[])
    .map((l) => l.ifname)
    .filter((n) => n.startsWith(`${server.prefix}-`));
  const netnsFiles = dirEntries(join(server.runtimePath, 'netns'));
  const runcContainers = dirEntries(join(server.runtimePath, 'runc'));
  const cgroups: string[] = [];
  for (const ctrl of dirEntries('/sys/fs/cgroup')) {
    const parent = join('/sys/fs/cgroup', ctrl, server.prefix);
    for (const e of dirEntries(parent)) {
      if (existsSync(join(parent, e, 'cgroup.procs'))) cgroups.push(`${ctrl}/${server.prefix}/${e}`);
    }
  }
  const table = sh('nft', ['-j', 'list', 'table', 'inet', server.prefix]);
  const nft = table ? (JSON.parse(table) as { nftables: Record<string, { name?: string }>[] }).nftables : [];
  const slotChains = nft.flatMap((o) => (o.chain?.name?.startsWith('slot') ? [o.chain.name] : []));
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(`${server.runtimePath}/netns/`) || m.startsWith(`${server.home}/sandboxes/`));
  return { links, netnsFiles, runcContainers, cgroups, slotChains, mounts };
}

export const NO_HOST_OBJECTS: HostObjects = {
  links: [],
  netnsFiles: [],
  runcContainers: [],
  cgroups: [],
  slotChains: [],
  mounts: [],
};

/** Polls `check` (bounded by `tries` × `everyMs`) until it returns true; throws naming `what` otherwise. */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  what: string,
  tries = 200,
  everyMs = 50,
): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  // CI shows only the end of its output: the nodes' last warnings go in the message that ends up there.
  throw new Error(`timed out waiting for ${what}${recentProblems()}`);
}

// ---- A workload whose survival across pause, resume, fork and snapshots can be checked ----

/** Port of the workload's HTTP server inside the sandbox. */
export const WORKLOAD_PORT = 8000;

// python3's http.server serving ~/wl/www, plus /secret: a random value that only this process's memory holds,
// so the same secret after a resume or in a fork proves the memory (not the disk) came back.
const WORKLOAD_SERVER = `import http.server, secrets, sys
SECRET = secrets.token_hex(16).encode()
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory='/home/user/wl/www', **k)
    def do_GET(self):
        if self.path != '/secret':
            return super().do_GET()
        self.send_response(200)
        self.send_header('content-length', str(len(SECRET)))
        self.end_headers()
        self.wfile.write(SECRET)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(('0.0.0.0', int(sys.argv[1])), Handler).serve_forever()
`;

// The count lives in the shell's memory; the file only mirrors it (written whole, then renamed).
const COUNTER_LOOP =
  'i=0; while :; do i=$((i+1)); echo $i > wl/counter.tmp && mv wl/counter.tmp wl/counter; sleep 0.2; done';

export interface Workload {
  /** PID (inside the sandbox) of the counting shell loop. */
  counterPid: number;
  /** PID of the HTTP server. */
  serverPid: number;
  /** What the server answers at /secret. */
  secret: string;
  /** Content of ~/wl/www/index.txt (on disk). */
  file: string;
}

export interface WorkloadView {
  /** The counting loop still runs under its PID. */
  counterAlive: boolean;
  /** Last value the loop wrote (0 when there is none). */
  counter: number;
  /** The HTTP server still runs under its PID. */
  serverAlive: boolean;
  /** ~/wl/www/index.txt ('' when missing). */
  file: string;
}

/** The subset of the SDK's `Sandbox` the workload helpers use. */
interface WorkloadSandbox {
  sandboxId: string;
  files: { write(path: string, data: string): Promise<unknown> };
  commands: {
    run(cmd: string, opts: { background: true }): Promise<{ pid: number; disconnect(): Promise<void> }>;
    run(cmd: string): Promise<{ stdout: string }>;
  };
}

/** GET of `path` on the workload's port through the proxy: status and body. */
export async function workloadFetch(
  server: TestServer,
  sandboxId: string,
  path: string,
  headers?: Record<string, string>,
): Promise<{ status: number; body: string }> {
  const r = await proxyFetch(server, sandboxId, WORKLOAD_PORT, path, headers ? { headers } : {});
  return { status: r.status, body: await r.text() };
}

/**
 * Starts the counter and the HTTP server in `sbx` (as background commands) and waits until both work; `headers`
 * go with the proxy requests (e.g. `e2b-traffic-access-token` of a sandbox without public traffic).
 */
export async function startWorkload(
  server: TestServer,
  sbx: WorkloadSandbox,
  opts: { headers?: Record<string, string> } = {},
): Promise<Workload> {
  const file = `file-${Math.random().toString(36).slice(2)}`;
  await sbx.files.write('wl/www/index.txt', file);
  await sbx.files.write('wl/server.py', WORKLOAD_SERVER);
  const counter = await sbx.commands.run(COUNTER_LOOP, { background: true });
  const httpd = await sbx.commands.run(`exec python3 wl/server.py ${WORKLOAD_PORT}`, { background: true });
  // No stream may stay open to envd: a pause cuts it, and the SDK would report that as a failure.
  await counter.disconnect();
  await httpd.disconnect();
  let secret = '';
  await eventually(async () => {
    const r = await workloadFetch(server, sbx.sandboxId, '/secret', opts.headers).catch(() => undefined);
    if (r?.status === 200) secret = r.body;
    return secret !== '';
  }, 'the workload HTTP server to answer through the proxy');
  await eventually(
    async () => (await readWorkload(sbx, { counterPid: counter.pid, serverPid: httpd.pid })).counter >= 3,
    'the counter to count',
  );
  return { counterPid: counter.pid, serverPid: httpd.pid, secret, file };
}

/** Looks at the workload's processes and files from inside the sandbox. */
export async function readWorkload(
  sbx: WorkloadSandbox,
  w: Pick<Workload, 'counterPid' | 'serverPid'>,
): Promise<WorkloadView> {
  const cmdline = (pid: number) => `"$(tr '\\0' ' ' < /proc/${pid}/cmdline 2>/dev/null)"`;
  const r = await sbx.commands.run(
    `printf '%s\\n' "$(cat wl/counter 2>/dev/null)" ${cmdline(w.counterPid)} ${cmdline(w.serverPid)} "$(cat wl/www/index.txt 2>/dev/null)"`,
  );
  const [counter = '', counterCmd = '', serverCmd = '', file = ''] = r.stdout.split('\n');
  return {
    counter: Number(counter.trim() || '0'),
    // Matched on text this very command line does not hold: after a fresh boot, the shell running it may get the
    // PID the loop had.
    counterAlive: counterCmd.includes('mv wl/counter.tmp wl/counter'),
    serverAlive: serverCmd.includes('python3 wl/server.py'),
    file,
  };
}

/** Resolves once the workload's counter is past `value` (the loop runs); throws after ~10 s. */
export async function counterPasses(sbx: WorkloadSandbox, w: Workload, value: number): Promise<void> {
  await eventually(async () => (await readWorkload(sbx, w)).counter > value, `the counter to pass ${value}`);
}

/** Sandbox store dir of a node (pause artifacts, fork and capture work dirs), on its CoW volume. */
export function storeDir(server: Pick<TestServer, 'home'>): string {
  return join(server.home, 'sandboxes', '.store');
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * A test file's end: kills every sandbox, lists what the host still holds of the node, then stops it
 * gracefully. Expect `{ stray: [], exitCode: 0 }`.
 */
export async function endNode(server: TestServer): Promise<{ stray: string[]; exitCode: number | null }> {
  await server.killAll();
  const stray = await strayHostObjects(server);
  return { stray, exitCode: await server.shutdown() };
}

/**
 * Host objects of `server` that belong to no sandbox it lists: runc containers, cgroups, sandbox dirs and mounts
 * of unknown ids, pause artifacts of sandboxes that are not paused, leftover fork/capture work dirs, slots beyond
 * the listed sandboxes plus the spare pool (`poolMax`), veths or chains without a netns. Empty = nothing leaked.
 */
export async function strayHostObjects(server: TestServer, poolMax = 4): Promise<string[]> {
  // A killed sandbox's slot is torn down after the answer (docs/benchmarks.md#phases): what only such a teardown
  // in progress still holds is given a few seconds to go; a leak stays and is reported.
  let stray = await strayHostObjectsNow(server, poolMax);
  for (let i = 0; i < 100 && stray.length > 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    stray = await strayHostObjectsNow(server, poolMax);
  }
  return stray;
}

/** A reader of the node's GET /metrics as it is now: the sum of the samples of the lines `re` matches. */
export async function metricsNow(server: Pick<TestServer, 'url'>): Promise<(re: RegExp) => number> {
  const lines = (await (await fetch(`${server.url}/metrics`)).text()).split('\n');
  return (re) =>
    lines.filter((l) => re.test(l)).reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

interface StoredRecordView {
  runtime: { hostInteractionIp: string };
  backend?: { containerId?: string };
}

/** A sandbox's record as the node stored it (the fields tests read). */
function storedRecord(server: Pick<TestServer, 'home'>, id: string): StoredRecordView {
  const db = new Database(join(server.home, 'state.db'), { readonly: true, fileMustExist: true });
  try {
    const row = db.prepare('SELECT record FROM sandboxes WHERE id = ?').get(id) as { record: string };
    return JSON.parse(row.record) as StoredRecordView;
  } finally {
    db.close();
  }
}

/** The address the node reaches a sandbox's envd at (its stored record's binding), as a local user could. */
export function envdAddress(server: Pick<TestServer, 'home'>, id: string): string {
  return storedRecord(server, id).runtime.hostInteractionIp;
}

/** The runtime container a sandbox runs in: its own id, or the pre-started one it was handed (`warm-…`). */
export function containerIdOf(server: Pick<TestServer, 'home'>, id: string): string {
  return storedRecord(server, id).backend?.containerId ?? id;
}

/** Pre-started sandboxes (ready or booting, or only those in `state`) of the node's warm pool, from its GET /metrics. */
export async function warmPoolSandboxes(
  server: Pick<TestServer, 'url'>,
  state?: 'ready' | 'booting',
): Promise<number> {
  const sum = await metricsNow(server);
  return sum(
    state ? new RegExp(`^aenv_warm_pool_sandboxes\\{.*state="${state}"`) : /^aenv_warm_pool_sandboxes\{/,
  );
}

async function strayHostObjectsNow(server: TestServer, poolMax: number): Promise<string[]> {
  const listed = await server.api('GET', '/v2/sandboxes');
  if (listed.status !== 200) throw new Error(`GET /v2/sandboxes answered ${listed.status}`);
  const sandboxes = listed.body as { sandboxID: string; state: string }[];
  const live = new Set(sandboxes.map((s) => s.sandboxID));
  const paused = new Set(sandboxes.filter((s) => s.state === 'paused').map((s) => s.sandboxID));
  const o = hostObjects(server);
  const stray: string[] = [];
  // A sandbox resumed while its previous container was still being released runs as `<id>-rN`.
  const owner = (containerId: string) => containerId.replace(/-r\d+$/, '');
  for (const c of o.runcContainers) if (!live.has(owner(c))) stray.push(`runc container ${c}`);
  for (const c of o.cgroups) if (!live.has(owner(c.split('/')[2] ?? ''))) stray.push(`cgroup ${c}`);
  const sandboxesDir = join(server.home, 'sandboxes');
  for (const e of dirEntries(sandboxesDir))
    if (UUID_RE.test(owner(e)) && !live.has(owner(e))) stray.push(`sandbox dir ${e}`);
  for (const m of o.mounts) {
    const id = m.startsWith(`${sandboxesDir}/`) ? m.slice(sandboxesDir.length + 1).split('/')[0]! : '';
    if (UUID_RE.test(owner(id)) && !live.has(owner(id))) stray.push(`mount ${m}`);
  }
  for (const id of dirEntries(join(storeDir(server), 'paused')))
    if (!paused.has(id)) stray.push(`pause artifacts of ${id}`);
  for (const sub of ['forks', 'captures'])
    for (const e of dirEntries(join(storeDir(server), sub))) stray.push(`${sub}/${e}`);
  const slotOf = (name: string, head: string) =>
    name.startsWith(head) ? name.slice(head.length) : undefined;
  const slots = new Set(o.netnsFiles.flatMap((f) => slotOf(f, `${server.prefix}-ns-`) ?? []));
  for (const l of o.links) {
    const slot = slotOf(l, `${server.prefix}-v`);
    if (slot !== undefined && !slots.has(slot)) stray.push(`veth ${l} without its netns`);
  }
  for (const c of o.slotChains)
    if (!slots.has(c.slice('slot'.length))) stray.push(`nft chain ${c} without its netns`);
  // Each pre-started sandbox of the warm pool (ready or booting) holds a slot of its own.
  const preStarted = await warmPoolSandboxes(server);
  if (slots.size > live.size + preStarted + poolMax)
    stray.push(
      `${slots.size} slots for ${live.size} sandboxes and ${preStarted} pre-started (+ at most ${poolMax} spare)`,
    );
  return stray;
}

/** Host pids of the sandbox's envd (found by its cgroup, which is named by the sandbox or container id). */
export function envdPids(sandboxId: string): number[] {
  const pids: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (!readFileSync(`/proc/${e}/cgroup`, 'utf8').includes(`/${sandboxId}`)) continue;
      if (readFileSync(`/proc/${e}/cmdline`, 'utf8').includes('envd.cjs')) pids.push(Number(e));
    } catch {
      // the process ended meanwhile
    }
  }
  return pids;
}
