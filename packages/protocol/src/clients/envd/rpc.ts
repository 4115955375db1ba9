// The node's own client of a sandbox's envd: Connect RPC (process.Process, filesystem.Filesystem) over
// HTTP/1.1 plus the REST upload. Used by the template builder and by launches that start a template's start
// command. The user a call acts as travels as `Authorization: Basic base64("<user>:")`, as the e2b SDK sends it.
import type { Readable, Writable } from 'node:stream';
import { Code, ConnectError, createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { Filesystem, type EntryInfo } from '../../gen/filesystem/filesystem_pb.js';
import { Process, Signal } from '../../gen/process/process_pb.js';
import { ACCESS_TOKEN_HEADER } from '../../envd/headers.js';
import { downloadFile, uploadFile } from './rest.js';

export interface EnvdRpcClientOptions {
  /** `http://<hostInteractionIp>:<port>` */
  baseUrl: string;
  /** envd access token of a secure sandbox. */
  accessToken?: string;
  /** Sent with every call, e.g. the routing headers of a proxy in front of envd. */
  headers?: Record<string, string>;
  /** Connect's JSON encoding, as the e2b SDK sends it (default: binary). */
  json?: boolean;
}

export interface CommandSpec {
  /** Executable and arguments (no shell unless you ask for one). */
  cmd: string;
  args: string[];
  /** Sandbox user; envd's default user when omitted. */
  user?: string;
  /** Working directory; the user's home (or envd's default workdir) when omitted. */
  cwd?: string;
  envs?: Record<string, string>;
}

export interface CommandOutput {
  stream: 'stdout' | 'stderr';
  data: Buffer;
}

export interface CommandResult {
  exitCode: number;
  /** envd's status text, e.g. "exit status 1" or "signal: killed". */
  status: string;
  error?: string;
}

export interface RunOptions {
  onOutput?: (out: CommandOutput) => void;
  signal?: AbortSignal;
}

/** A process started in the background: its pid now, its end later. */
export interface BackgroundProcess {
  pid: number;
  /** Resolves when the process ends (or the stream to envd breaks: then `exitCode` is -1 and `error` says why). */
  ended: Promise<CommandResult>;
  /** Stops following its output (the process keeps running). */
  detach(): void;
}

/** How an interactive process is started (`aenv exec`, the shell of `aenv start`/`connect`). */
export interface InteractiveOptions {
  /** Open a stdin pipe the caller writes with `write` (default: stdin is /dev/null). */
  stdin?: boolean;
  /** Run in a PTY of this size; its output arrives as `stdout` and `write` feeds the PTY. */
  pty?: { cols: number; rows: number };
  /** envd kills the process after this long (the call's Connect deadline). */
  timeoutMs?: number;
  onOutput?: (out: CommandOutput) => void;
}

/** A started process the caller talks to: input, PTY size, signals, and its end. */
export interface InteractiveProcess extends BackgroundProcess {
  /** Sends bytes to its stdin (or to its PTY); calls are delivered in order. */
  write(data: Uint8Array): Promise<void>;
  closeStdin(): Promise<void>;
  resize(cols: number, rows: number): Promise<void>;
  signal(signal: 'SIGTERM' | 'SIGKILL'): Promise<void>;
}

export class EnvdCommandError extends Error {
  constructor(
    message: string,
    readonly code?: Code,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'EnvdCommandError';
  }
}

function basicAuth(user: string): string {
  return `Basic ${Buffer.from(`${user}:`).toString('base64')}`;
}

function describeRpcError(e: unknown): string {
  if (e instanceof ConnectError) return `${Code[e.code] ?? e.code}: ${e.rawMessage}`;
  return e instanceof Error ? e.message : String(e);
}

export class EnvdRpcClient {
  private readonly process: Client<typeof Process>;
  private readonly fs: Client<typeof Filesystem>;

  constructor(private readonly opts: EnvdRpcClientOptions) {
    const headers = {
      ...opts.headers,
      ...(opts.accessToken ? { [ACCESS_TOKEN_HEADER]: opts.accessToken } : {}),
    };
    const transport = createConnectTransport({
      baseUrl: opts.baseUrl,
      httpVersion: '1.1',
      ...(opts.json ? { useBinaryFormat: false } : {}),
      interceptors: Object.keys(headers).length
        ? [
            (next) => (req) => {
              for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
              return next(req);
            },
          ]
        : [],
    });
    this.process = createClient(Process, transport);
    this.fs = createClient(Filesystem, transport);
  }

  private headers(user: string | undefined): Record<string, string> {
    return user ? { authorization: basicAuth(user) } : {};
  }

  private startStream(
    spec: CommandSpec,
    signal: AbortSignal | undefined,
    io: Pick<InteractiveOptions, 'stdin' | 'pty' | 'timeoutMs'> = {},
  ) {
    return this.process.start(
      {
        process: {
          cmd: spec.cmd,
          args: spec.args,
          envs: spec.envs ?? {},
          ...(spec.cwd ? { cwd: spec.cwd } : {}),
        },
        stdin: io.stdin ?? false,
        ...(io.pty ? { pty: { size: io.pty } } : {}),
      },
      {
        headers: this.headers(spec.user),
        ...(signal ? { signal } : {}),
        ...(io.timeoutMs !== undefined ? { timeoutMs: io.timeoutMs } : {}),
      },
    );
  }

  /** Runs a command to its end, handing output to `onOutput` as it arrives. */
  async run(spec: CommandSpec, opts: RunOptions = {}): Promise<CommandResult> {
    try {
      for await (const msg of this.startStream(spec, opts.signal)) {
        const ev = msg.event?.event;
        if (!ev) continue;
        if (ev.case === 'data') {
          const out = ev.value.output;
          if (
            (out.case === 'stdout' || out.case === 'stderr' || out.case === 'pty') &&
            out.value.length > 0
          ) {
            opts.onOutput?.({
              stream: out.case === 'stderr' ? 'stderr' : 'stdout',
              data: Buffer.from(out.value),
            });
          }
        } else if (ev.case === 'end') {
          return {
            exitCode: ev.value.exitCode,
            status: ev.value.status,
            ...(ev.value.error ? { error: ev.value.error } : {}),
          };
        }
      }
    } catch (e) {
      if (opts.signal?.aborted) throw opts.signal.reason ?? e;
      throw new EnvdCommandError(
        `envd could not run ${spec.cmd}: ${describeRpcError(e)}`,
        e instanceof ConnectError ? e.code : undefined,
        { cause: e },
      );
    }
    throw new EnvdCommandError(`envd ended the stream of ${spec.cmd} without an end event`);
  }

  /** Runs a command and collects its output (bounded: the last `maxBytes` of each stream are kept). */
  async output(
    spec: CommandSpec,
    opts: { signal?: AbortSignal; maxBytes?: number } = {},
  ): Promise<CommandResult & { stdout: string; stderr: string }> {
    const max = opts.maxBytes ?? 1024 * 1024;
    const chunks = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
    const sizes = { stdout: 0, stderr: 0 };
    const result = await this.run(spec, {
      ...(opts.signal ? { signal: opts.signal } : {}),
      onOutput: ({ stream, data }) => {
        chunks[stream].push(data);
        sizes[stream] += data.length;
        while (sizes[stream] > max && chunks[stream].length > 1)
          sizes[stream] -= chunks[stream].shift()!.length;
      },
    });
    return {
      ...result,
      stdout: Buffer.concat(chunks.stdout).toString('utf8'),
      stderr: Buffer.concat(chunks.stderr).toString('utf8'),
    };
  }

  /** Starts a command and returns once envd reports its pid; output keeps flowing to `onOutput`. */
  async startBackground(
    spec: CommandSpec,
    opts: { onOutput?: (out: CommandOutput) => void } & Pick<
      InteractiveOptions,
      'stdin' | 'pty' | 'timeoutMs'
    > = {},
  ): Promise<BackgroundProcess> {
    const abort = new AbortController();
    const stream = this.startStream(spec, abort.signal, opts)[Symbol.asyncIterator]();
    let detached = false;
    let pid: number | undefined;
    try {
      for (;;) {
        const next = await stream.next();
        if (next.done) throw new EnvdCommandError(`envd ended the stream of ${spec.cmd} before it started`);
        const ev = next.value.event?.event;
        if (ev?.case === 'start') {
          pid = ev.value.pid;
          break;
        }
      }
    } catch (e) {
      abort.abort();
      if (e instanceof EnvdCommandError) throw e;
      throw new EnvdCommandError(`envd could not start ${spec.cmd}: ${describeRpcError(e)}`);
    }
    const ended = (async (): Promise<CommandResult> => {
      try {
        for (;;) {
          const next = await stream.next();
          if (next.done)
            return { exitCode: -1, status: 'unknown', error: 'envd ended the stream without an end event' };
          const ev = next.value.event?.event;
          if (ev?.case === 'data') {
            const out = ev.value.output;
            if (out.case && out.value.length > 0) {
              opts.onOutput?.({
                stream: out.case === 'stderr' ? 'stderr' : 'stdout',
                data: Buffer.from(out.value),
              });
            }
          } else if (ev?.case === 'end') {
            return {
              exitCode: ev.value.exitCode,
              status: ev.value.status,
              ...(ev.value.error ? { error: ev.value.error } : {}),
            };
          }
        }
      } catch (e) {
        return { exitCode: -1, status: detached ? 'detached' : 'unknown', error: describeRpcError(e) };
      }
    })();
    return {
      pid,
      ended,
      detach() {
        detached = true;
        abort.abort();
      },
    };
  }

  /**
   * Starts a process the caller talks to (stdin or a PTY) and returns once envd reports its pid. Input goes
   * by unary SendInput calls, in order: envd's client-streaming StreamInput needs HTTP/2, and this client
   * speaks HTTP/1.1 (what the node's proxy and the e2b SDK use).
   */
  async startInteractive(spec: CommandSpec, opts: InteractiveOptions = {}): Promise<InteractiveProcess> {
    const proc = await this.startBackground(spec, opts);
    const headers = this.headers(spec.user);
    const selector = { selector: { case: 'pid' as const, value: proc.pid } };
    let queue: Promise<unknown> = Promise.resolve();
    const inOrder = <T>(fn: () => Promise<T>): Promise<T> => {
      const next = queue.then(fn);
      queue = next.catch(() => undefined);
      return next;
    };
    return {
      ...proc,
      write: (data) =>
        inOrder(async () => {
          await this.process.sendInput(
            {
              process: selector,
              input: { input: opts.pty ? { case: 'pty', value: data } : { case: 'stdin', value: data } },
            },
            { headers },
          );
        }),
      closeStdin: () =>
        inOrder(async () => {
          await this.process.closeStdin({ process: selector }, { headers });
        }),
      resize: (cols, rows) =>
        inOrder(async () => {
          await this.process.update({ process: selector, pty: { size: { cols, rows } } }, { headers });
        }),
      signal: (signal) => inOrder(() => this.sendSignal(proc.pid, signal, spec.user)),
    };
  }

  async sendSignal(pid: number, signal: 'SIGTERM' | 'SIGKILL', user?: string): Promise<void> {
    await this.process.sendSignal(
      {
        process: { selector: { case: 'pid', value: pid } },
        signal: signal === 'SIGKILL' ? Signal.SIGKILL : Signal.SIGTERM,
      },
      { headers: this.headers(user) },
    );
  }

  /** `filesystem.MakeDir`; an existing directory is not an error. Returns the directory's entry. */
  async makeDir(path: string, user?: string): Promise<EntryInfo> {
    try {
      const r = await this.fs.makeDir({ path }, { headers: this.headers(user) });
      if (r.entry) return r.entry;
    } catch (e) {
      if (!(e instanceof ConnectError && e.code === Code.AlreadyExists)) throw e;
    }
    const st = await this.stat(path, user);
    if (!st) throw new EnvdCommandError(`${path} vanished after MakeDir`);
    return st;
  }

  /** `filesystem.Stat`; undefined when the path does not exist. */
  async stat(path: string, user?: string): Promise<EntryInfo | undefined> {
    try {
      const r = await this.fs.stat({ path }, { headers: this.headers(user) });
      return r.entry;
    } catch (e) {
      if (e instanceof ConnectError && e.code === Code.NotFound) return undefined;
      throw e;
    }
  }

  /** `filesystem.ListDir` to `depth` levels (1: the directory's own entries). */
  async listDir(path: string, depth: number, user?: string): Promise<EntryInfo[]> {
    const r = await this.fs.listDir({ path, depth }, { headers: this.headers(user) });
    return r.entries;
  }

  /** `GET /files?path=&username=`: the file's bytes, streamed into `dest`. */
  downloadFile(path: string, dest: Writable, user: string, timeoutMs = 10 * 60_000): Promise<void> {
    const target = {
      path,
      user,
      ...(this.opts.accessToken ? { accessToken: this.opts.accessToken } : {}),
      ...(this.opts.headers ? { headers: this.opts.headers } : {}),
    };
    return downloadFile(this.opts.baseUrl, target, dest, timeoutMs);
  }

  /** `POST /files?path=&username=` with a raw body streamed from `body` (exactly `size` bytes). */
  uploadFile(
    path: string,
    body: Readable,
    size: number,
    user: string,
    timeoutMs = 10 * 60_000,
  ): Promise<void> {
    const target = {
      path,
      user,
      ...(this.opts.accessToken ? { accessToken: this.opts.accessToken } : {}),
      ...(this.opts.headers ? { headers: this.opts.headers } : {}),
    };
    return uploadFile(this.opts.baseUrl, target, body, size, timeoutMs);
  }
}
