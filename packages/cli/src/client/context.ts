// What a client command runs with: the resolved connection, the API client, the printer, and envd clients
// of sandboxes reached through the node's header route (docs/cli.md: `x-agentenv-sandbox-id`,
// `x-agentenv-target-port`, `X-Access-Token`, straight at the base URL).
import type { Command } from 'commander';
import { Option } from 'commander';
import { AenvApiClient, ENVD_PORT, EnvdRpcClient, type SandboxDetail } from '@aenv/protocol';
import { VERSION } from '../version.js';
import { credentialsPath, readCredentials, resolveConnection, type Connection } from './config.js';
import { CliError, describeError } from './errors.js';
import { Output, outputMode } from './output.js';
import { Progress, progressMode } from './progress.js';

export interface GlobalFlags {
  url?: string;
  apiKey?: string;
  output?: string;
  debug?: boolean;
}

const USER_AGENT = `aenv/${VERSION}`;

/** The flags every client command takes. */
export function withGlobalFlags(cmd: Command): Command {
  return cmd
    .option('--url <url>', 'server (node or gateway) URL [env: AENV_URL, E2B_API_URL]')
    .option('--api-key <key>', 'API key [env: AENV_API_KEY, E2B_API_KEY]')
    .addOption(
      new Option(
        '-o, --output <format>',
        'output format (default: table on a terminal, json when piped)',
      ).choices(['table', 'json']),
    )
    .option('--debug', 'print stack traces with errors');
}

export class ClientContext {
  readonly api: AenvApiClient;

  constructor(
    readonly conn: Connection,
    readonly out: Output,
    /** `--output` as given (undefined: chosen by whether stdout is a terminal). */
    readonly outputFlag?: string,
  ) {
    this.api = new AenvApiClient({
      baseUrl: conn.url,
      apiKey: conn.apiKey,
      headers: { 'user-agent': USER_AGENT },
    });
  }

  static fromFlags(flags: GlobalFlags, env = process.env): ClientContext {
    const out = new Output(outputMode(flags.output, process.stdout.isTTY === true));
    const conn = resolveConnection(flags, env, () => readCredentials(credentialsPath(env)));
    return new ClientContext(conn, out, flags.output);
  }

  /** The progress display of a long operation (silent with `--output json` or `quiet`). */
  progress(quiet?: boolean): Progress {
    return new Progress(
      progressMode({ ...(this.outputFlag ? { outputFlag: this.outputFlag } : {}), quiet: quiet === true }),
    );
  }

  /** envd of a sandbox, through the node; a paused sandbox that traffic cannot wake is refused up front. */
  async envd(sandboxId: string): Promise<{ envd: EnvdRpcClient; sandbox: SandboxDetail }> {
    const sandbox = await this.api.sandboxes.get(sandboxId);
    if (sandbox.state === 'paused' && !sandbox.lifecycle.autoResume) {
      throw new CliError(
        'conflict',
        `sandbox ${sandboxId} is paused`,
        `resume it with \`aenv resume ${sandboxId}\``,
      );
    }
    const envd = new EnvdRpcClient({
      baseUrl: this.conn.url,
      ...(sandbox.envdAccessToken ? { accessToken: sandbox.envdAccessToken } : {}),
      headers: {
        'x-agentenv-sandbox-id': sandbox.sandboxID,
        'x-agentenv-target-port': String(ENVD_PORT),
        'user-agent': USER_AGENT,
      },
    });
    return { envd, sandbox };
  }
}

/**
 * The action of a client command: builds its context from the command's flags, runs `fn`, and turns a
 * failure into one line on stderr and an exit code. `fn` may return an exit code (exec's remote one).
 */
export function clientAction<A extends unknown[]>(
  fn: (ctx: ClientContext, ...args: A) => Promise<number | void>,
): (...args: unknown[]) => Promise<void> {
  return async (...args: unknown[]) => {
    const cmd = args[args.length - 1] as Command;
    const flags = cmd.optsWithGlobals<GlobalFlags>();
    try {
      const ctx = ClientContext.fromFlags(flags);
      const code = await fn(ctx, ...(args.slice(0, -1) as A));
      if (typeof code === 'number') process.exitCode = code;
    } catch (e) {
      const d = describeError(e, flags.debug === true);
      if (d.line) process.stderr.write(d.line + '\n');
      process.exitCode = d.exitCode;
    }
  };
}
