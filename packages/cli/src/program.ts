// The `aenv` command tree: the services it runs and its client commands (docs/cli.md is generated from this
// tree).
import { Command } from 'commander';
import { registerAuthCommand } from './commands/auth.js';
import { registerBuildCommands } from './commands/build.js';
import { registerCompletionCommand } from './commands/completion.js';
import { registerExecCommand } from './commands/exec.js';
import { registerFileCommands } from './commands/files.js';
import { registerObserveCommands } from './commands/observe.js';
import { registerSandboxCommands } from './commands/sandboxes.js';
import { registerServiceCommands } from './commands/services.js';
import { registerSnapshotCommands } from './commands/snapshots.js';
import { registerTemplateCommands } from './commands/templates.js';
import { registerWebhookCommands } from './commands/webhooks.js';
import { VERSION } from './version.js';

export function buildProgram(): Command {
  const program = new Command('aenv')
    .description('aenv: isolated Linux sandboxes for AI agents on hosts you own (E2B-compatible)')
    .version(VERSION)
    // Options belong to the command they follow: `aenv exec <id> ls -l` hands `-l` to ls.
    .enablePositionalOptions()
    .showHelpAfterError('(add --help for usage)')
    // Usage errors exit 2 (docs/cli.md "Exit codes"); main.ts maps the thrown CommanderError.
    .exitOverride();
  registerAuthCommand(program);
  registerSandboxCommands(program);
  registerExecCommand(program);
  registerFileCommands(program);
  registerSnapshotCommands(program);
  registerBuildCommands(program, registerTemplateCommands(program));
  registerObserveCommands(program);
  registerWebhookCommands(program);
  registerCompletionCommand(program);
  registerServiceCommands(program);
  return program;
}
