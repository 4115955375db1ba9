// The services `aenv` runs: a node (`server`), the cluster's `scheduler` and `gateway`.
import type { Command } from 'commander';

export function registerServiceCommands(program: Command): void {
  program
    .command('server')
    .description('run a node: the E2B-compatible API, the sandbox proxy and the runtime')
    .option('--config <path>', 'config file (default: $AENV_CONFIG_PATH or config/default.toml)')
    .option('--setup-only', 'install host dependencies (Debian packages, CRIU prefix, tools dir) and exit')
    .option('--api-addr <host:port>', 'listen address (default: $API_ADDR or 0.0.0.0:8000)')
    .option('--home <dir>', 'state directory (default: $AENV_HOME_PATH or /var/lib/aenv)')
    .action(async (opts: { config?: string; setupOnly?: boolean; apiAddr?: string; home?: string }) => {
      const { runServer } = await import('@aenv/node');
      const code = await runServer({
        configPath: opts.config,
        setupOnly: opts.setupOnly ?? false,
        // One failing request must not end the node (docs/security.md).
        processGuards: true,
        flags: { apiAddr: opts.apiAddr, homePath: opts.home },
      });
      process.exitCode = code;
    });

  program
    .command('scheduler')
    .description(
      'cluster scheduler: placement, sandbox bindings and heartbeats over gRPC (-config, -query-only)',
    )
    // Its own flags, Go style as the reference's (`-config <path>`), parsed by @aenv/scheduler.
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .action(async (_opts: unknown, cmd: Command) => {
      const { runSchedulerCommand } = await import('@aenv/scheduler');
      process.exitCode = await runSchedulerCommand(cmd.args);
    });

  program
    .command('gateway')
    .description(
      'cluster gateway: the E2B API and sandbox traffic of a cluster, routed to its nodes (-config)',
    )
    // Its own flags, Go style as the reference's (`-config <path>`), parsed by @aenv/gateway.
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .action(async (_opts: unknown, cmd: Command) => {
      const { runGatewayCommand } = await import('@aenv/gateway');
      process.exitCode = await runGatewayCommand(cmd.args);
    });
}
