// The node's own client of a sandbox's envd: Connect RPC (process.Process, filesystem.Filesystem) over
// HTTP/1.1 plus the REST upload. Used by the template builder and by launches that start a template's start
// command. The user a call acts as travels as `Authorization: Basic base64("<user>:")`, as the e2b SDK sends it.
import type { Readable } from 'node:stream';
import { Code, ConnectError, createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { Filesystem, type EntryInfo } from '../../gen/filesystem/filesystem_pb.js';
import { Process, Signal } from '../../gen/process/process_pb.js';
import { ACCESS_TOKEN_HEADER } from '../../envd/headers.js';
import { uploadFile } from './rest.js';

export interface EnvdRpcClientOptions {
  /** `http://<hostInteractionIp>:<port>` */
  baseUrl: string;
  /** envd access token of a secure sandbox. */
  accessToken?: string;
  /** Sent with every call, e.g. the routing headers of a proxy in front of envd. */
  headers?: Record<string, string>;
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

  private startStream(spec: CommandSpec, signal: AbortSignal | undefined) {
    return this.process.start(
      {
        process: {
          cmd: spec.cmd,
          args: spec.args,
          envs: spec.envs ?? {},
          ...(spec.cwd ? { cwd: spec.cwd } : {}),
        },
        stdin: false,
      },
      { headers: this.headers(spec.user), ...(signal ? { signal } : {}) },
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
    opts: { onOutput?: (out: CommandOutput) => void } = {},
  ): Promise<BackgroundProcess> {
    const abort = new AbortController();
    const stream = this.startStream(spec, abort.signal)[Symbol.asyncIterator]();
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
