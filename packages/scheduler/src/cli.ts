// `aenv scheduler [-config <path>] [-query-only]`: the reference's flags, Go style (one dash) or GNU style.
import { ClusterConfigError } from './config/cluster-config.js';
import { loadSchedulerConfig } from './config/load.js';
import { createLogger } from './log.js';
import { startScheduler } from './run.js';

const USAGE = `usage: aenv scheduler [-config <path>] [-query-only]

  -config, --config <path>   JSON config file (docs/cluster.md#configuration); defaults apply without one
  -query-only, --query-only  serve only LookupNode, from Redis (needs scheduler.redis_addr)

environment: SCHEDULER_GRPC_LISTEN_ADDR, SCHEDULER_METRICS_LISTEN_ADDR, SCHEDULER_STRATEGY,
SCHEDULER_REDIS_ADDR, SCHEDULER_BINDING_TTL, SCHEDULER_ARTIFACT_STORE_CAPACITY,
SCHEDULER_ARTIFACT_LOOKUP_NODE_LIMIT, LOG_LEVEL, LOG_FORMAT
`;

export interface SchedulerArgs {
  configPath: string | undefined;
  queryOnly: boolean;
  help: boolean;
}

export function parseSchedulerArgs(argv: readonly string[]): SchedulerArgs {
  const args: SchedulerArgs = { configPath: undefined, queryOnly: false, help: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [flag, inline] = arg.includes('=')
      ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)]
      : [arg, undefined];
    switch (flag.replace(/^--?/, '')) {
      case 'config': {
        const value = inline ?? argv[++i];
        if (value === undefined || value === '') throw new Error(`${flag} needs a path`);
        args.configPath = value;
        break;
      }
      case 'query-only':
        if (inline !== undefined && !['true', 'false'].includes(inline))
          throw new Error(`${flag} takes no value`);
        args.queryOnly = inline !== 'false';
        break;
      case 'h':
      case 'help':
        args.help = true;
        break;
      default:
        throw new Error(`unknown argument ${JSON.stringify(arg)}`);
    }
  }
  return args;
}

/** Runs until SIGINT/SIGTERM; resolves with the exit code. */
export async function runSchedulerCommand(argv: readonly string[]): Promise<number> {
  let args: SchedulerArgs;
  try {
    args = parseSchedulerArgs(argv);
  } catch (e) {
    process.stderr.write(`aenv scheduler: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  let config;
  try {
    config = loadSchedulerConfig({ path: args.configPath, queryOnly: args.queryOnly });
  } catch (e) {
    if (!(e instanceof ClusterConfigError)) throw e;
    process.stderr.write(`aenv scheduler: invalid configuration: ${e.message}\n`);
    return 1;
  }
  const log = createLogger(config.logLevel, config.logFormat);
  // One failing call must not end the scheduler: log what escaped and keep serving.
  process.on('uncaughtException', (e) => log.error({ err: e.stack }, 'uncaught exception'));
  process.on('unhandledRejection', (e) =>
    log.error({ err: e instanceof Error ? e.stack : String(e) }, 'unhandled rejection'),
  );
  let running;
  try {
    running = await startScheduler(config, { queryOnly: args.queryOnly, log });
  } catch (e) {
    log.fatal({ err: (e as Error).message }, 'scheduler failed to start');
    return 1;
  }
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  log.info('scheduler shutting down');
  await running.stop();
  return 0;
}
