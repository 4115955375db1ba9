// `aenv exec <id> <cmd…>`: runs argv in the sandbox (no shell: `sh -c '…'` for one) and exits with its code.
import type { Command } from 'commander';
import { clientAction, withGlobalFlags } from '../client/context.js';
import { keyValue, seconds } from '../client/parse.js';
import { runInTerminal, runPiped } from '../client/remote-process.js';

interface ExecFlags {
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  timeout?: number;
  tty?: boolean;
}

export function registerExecCommand(program: Command): void {
  withGlobalFlags(
    program
      .command('exec')
      .argument('<id>', 'sandbox id')
      .argument('<cmd...>', 'the command and its arguments (flags of aenv go before the id)')
      .description('run a command in a sandbox: its stdout, stderr and exit code; stdin passed when piped')
      .option('--user <user>', "run as this user (default: the sandbox's default user)")
      .option('--cwd <dir>', "working directory (default: the user's home)")
      .option('--env <key=value>', 'environment variable (repeatable)', keyValue)
      .option('--timeout <secs>', 'kill the command after this long (exit code 124)', seconds)
      .option('-t, --tty', 'run in a PTY attached to this terminal')
      // Everything after the id is the remote command's, `-l` of `ls -l` included.
      .passThroughOptions(),
  ).action(
    clientAction(async (ctx, id: string, argv: string[], f: ExecFlags) => {
      const { envd } = await ctx.envd(id);
      const spec = {
        cmd: argv[0]!,
        args: argv.slice(1),
        ...(f.user ? { user: f.user } : {}),
        ...(f.cwd ? { cwd: f.cwd } : {}),
        ...(f.env ? { envs: f.env } : {}),
      };
      if (f.tty) return runInTerminal(envd, spec, f.timeout);
      return runPiped(envd, {
        spec,
        stdin: !process.stdin.isTTY,
        ...(f.timeout !== undefined ? { timeoutSecs: f.timeout } : {}),
      });
    }),
  );
}
