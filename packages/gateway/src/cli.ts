// `aenv gateway [-config <path>]`: the reference's flag, Go style (one dash) or GNU style.
import { ClusterConfigError, createLogger } from '@aenv/scheduler';
import { loadGatewayConfig, resolveGatewayApiKey } from './config.js';
import { startGateway } from './run.js';

const USAGE = `usage: aenv gateway [-config <path>]

  -config, --config <path>   JSON config file, the "gateway" section (docs/cluster.md#configuration)

environment: GATEWAY_HTTP_LISTEN_ADDR, GATEWAY_METRICS_LISTEN_ADDR, GATEWAY_SCHEDULER_ADDR,
GATEWAY_QUERY_ONLY_SCHEDULER_ADDR, GATEWAY_REQUEST_TIMEOUT, GATEWAY_SANDBOX_PROXY_DOMAINS, GATEWAY_DEBUG_MODE,
AENV_API_KEY (else /run/secrets/api-key), LOG_LEVEL, LOG_FORMAT
`;

export function parseGatewayArgs(argv: readonly string[]): { configPath: string | undefined; help: boolean } {
  const out = { configPath: undefined as string | undefined, help: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf('=');
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    const inline = eq < 0 ? undefined : arg.slice(eq + 1);
    switch (flag.replace(/^--?/, '')) {
      case 'config': {
        const value = inline ?? argv[++i];
        if (value === undefined || value === '') throw new Error(`${flag} needs a path`);
        out.configPath = value;
        break;
      }
      case 'h':
      case 'help':
        out.help = true;
        break;
      default:
        throw new Error(`unknown argument ${JSON.stringify(arg)}`);
    }
  }
  return out;
}

/** Runs until SIGINT/SIGTERM; resolves with the exit code. */
export async function runGatewayCommand(argv: readonly string[], env = process.env): Promise<number> {
  let args;
  try {
    args = parseGatewayArgs(argv);
  } catch (e) {
    process.stderr.write(`aenv gateway: ${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  let config;
  let apiKey;
  try {
    config = loadGatewayConfig(args.configPath, env);
    apiKey = resolveGatewayApiKey(env);
  } catch (e) {
    if (!(e instanceof ClusterConfigError)) throw e;
    process.stderr.write(`aenv gateway: invalid configuration: ${e.message}\n`);
    return 1;
  }
  const log = createLogger(config.logLevel, config.logFormat).child({ service: 'gateway' });
  process.on('uncaughtException', (e) => log.error({ err: e.stack }, 'uncaught exception'));
  process.on('unhandledRejection', (e) =>
    log.error({ err: e instanceof Error ? e.stack : String(e) }, 'unhandled rejection'),
  );
  let running;
  try {
    running = await startGateway(config, apiKey, log);
  } catch (e) {
    log.fatal({ err: (e as Error).message }, 'gateway failed to start');
    return 1;
  }
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  log.info('gateway shutting down');
  await running.stop();
  return 0;
}
