// Sandbox lifecycle: list, start, connect, pause, resume, timeout, fork, delete.
import { Option, type Command } from 'commander';
import type { ForkResult, ListedSandbox, SandboxResponse, SandboxState } from '@aenv/protocol';
import { clientAction, withGlobalFlags, type ClientContext } from '../client/context.js';
import { CliError, usageError } from '../client/errors.js';
import { EXIT, kindOfStatus } from '../client/exit-codes.js';
import type { Column } from '../client/output.js';
import { intIn, keyValue, seconds } from '../client/parse.js';
import { SHELL, runInTerminal } from '../client/remote-process.js';

/** The default lifetime of a sandbox the CLI starts or resumes, the reference CLI's (docs/cli.md#aenv-start). */
export const DEFAULT_TIMEOUT_SECS = 300;

const SANDBOX_COLUMNS: Column<ListedSandbox>[] = [
  { header: 'ID', value: (s) => s.sandboxID },
  { header: 'TEMPLATE', value: (s) => s.alias ?? s.templateID },
  { header: 'STATE', value: (s) => s.state },
  { header: 'CPU', value: (s) => s.cpuCount },
  { header: 'MEMORY MB', value: (s) => s.memoryMB },
  { header: 'STARTED', value: (s) => s.startedAt },
  { header: 'ENDS', value: (s) => s.endAt },
];

/** Follows `nextToken` to the end (bounded: a server that never stops paging is cut off). */
export async function allPages<T>(
  fetchPage: (nextToken?: string) => Promise<{ items: T[]; nextToken?: string }>,
  maxPages = 1000,
): Promise<T[]> {
  const items: T[] = [];
  let token: string | undefined;
  for (let i = 0; i < maxPages; i++) {
    const page = await fetchPage(token);
    items.push(...page.items);
    if (!page.nextToken) return items;
    token = page.nextToken;
  }
  throw new CliError('server', `the server kept paging after ${maxPages} pages`);
}

interface StartFlags {
  cold?: boolean;
  secure?: boolean;
  timeout: number;
  cpu?: number;
  cpuCount?: number;
  memory?: number;
  memoryMb?: number;
  mem?: number;
  diskSizeMb?: number;
  detach?: boolean;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  autoPause?: boolean;
}

async function start(ctx: ClientContext, target: string, f: StartFlags): Promise<number | void> {
  const cpuCount = f.cpu ?? f.cpuCount;
  const memoryMB = f.memory ?? f.memoryMb ?? f.mem;
  const diskSizeMB = f.diskSizeMb;
  if (!f.cold && (cpuCount !== undefined || memoryMB !== undefined || diskSizeMB !== undefined)) {
    throw usageError(
      '--cpu, --memory and --disk-size-mb apply to --cold starts only',
      'a template start has the resources the template was built with',
    );
  }
  if (diskSizeMB !== undefined && diskSizeMB % 1024 !== 0) {
    throw usageError(`--disk-size-mb ${diskSizeMB} is not a multiple of 1024`);
  }
  // Decided before anything is created: a start that cannot attach must not leave a sandbox behind.
  if (!f.detach && !(process.stdin.isTTY && process.stdout.isTTY)) {
    throw usageError('start attaches a shell and needs a terminal', 'use -d to start it detached');
  }
  const common = {
    timeout: f.timeout,
    secure: f.secure ?? false,
    autoPause: f.autoPause ?? false,
    ...(f.env && Object.keys(f.env).length ? { envVars: f.env } : {}),
    ...(f.metadata && Object.keys(f.metadata).length ? { metadata: f.metadata } : {}),
  };
  const sandbox: SandboxResponse = await ctx.progress().run(`starting a sandbox of ${target}`, () =>
    f.cold
      ? ctx.api.sandboxes.createCold({
          ...common,
          image: target,
          ...(cpuCount !== undefined ? { cpuCount } : {}),
          ...(memoryMB !== undefined ? { memoryMB } : {}),
          ...(diskSizeMB !== undefined ? { diskSizeMB } : {}),
        })
      : ctx.api.sandboxes.createV1({ ...common, templateID: target }),
  );
  if (f.detach) {
    if (ctx.outputFlag === 'json') ctx.out.record(sandbox);
    else ctx.out.raw(sandbox.sandboxID + '\n');
    return;
  }
  process.stderr.write(`sandbox ${sandbox.sandboxID} (exit the shell to leave it running)\n`);
  const { envd } = await ctx.envd(sandbox.sandboxID);
  return runInTerminal(envd, SHELL);
}

/** A fork with a failed copy exits as that copy's error would. */
function forkExitCode(results: ForkResult[]): number | void {
  for (const r of results) if ('error' in r) return EXIT[kindOfStatus(r.error.code)];
}

export function registerSandboxCommands(program: Command): void {
  withGlobalFlags(
    program
      .command('list')
      .alias('ls')
      .description('list sandboxes (running and paused)')
      .addOption(new Option('--state <state>', 'only sandboxes in this state').choices(['running', 'paused']))
      .option('--metadata <key=value>', 'only sandboxes with this metadata pair (repeatable)', keyValue)
      .option('--limit <n>', 'page size asked of the server', intIn(1, 100)),
  ).action(
    clientAction(
      async (ctx, f: { state?: SandboxState; metadata?: Record<string, string>; limit?: number }) => {
        const rows = await allPages((nextToken) =>
          ctx.api.sandboxes.list({
            ...(f.state ? { state: [f.state] } : {}),
            ...(f.metadata ? { metadata: f.metadata } : {}),
            ...(f.limit ? { limit: f.limit } : {}),
            ...(nextToken ? { nextToken } : {}),
          }),
        );
        ctx.out.list(rows, SANDBOX_COLUMNS);
      },
    ),
  );

  withGlobalFlags(
    program
      .command('start')
      .argument('<target>', 'template id or alias (an OCI image reference with --cold)')
      .description('start a sandbox and attach a shell to it (-d: print its id and leave it running)')
      .option(
        '--cold',
        'boot from an OCI image instead of a template (POST /sandboxes-cold; no template build first)',
      )
      .option('--secure', "require the envd access token for the sandbox's envd")
      .option('--timeout <secs>', 'seconds until the sandbox ends', seconds, DEFAULT_TIMEOUT_SECS)
      .option('--cpu <n>', 'vCPUs (--cold only; also --cpu-count)', intIn(1, 1024))
      .addOption(new Option('--cpu-count <n>').argParser(intIn(1, 1024)).hideHelp())
      .option(
        '--memory <mb>',
        'memory in MiB (--cold only; also --memory-mb, --mem)',
        intIn(128, 16 * 1024 * 1024),
      )
      .addOption(new Option('--memory-mb <mb>').argParser(intIn(128, 16 * 1024 * 1024)).hideHelp())
      .addOption(new Option('--mem <mb>').argParser(intIn(128, 16 * 1024 * 1024)).hideHelp())
      .option(
        '--disk-size-mb <mb>',
        'root disk size in MiB, a multiple of 1024 (--cold only)',
        intIn(1024, 2 ** 31 - 1),
      )
      .option('-d, --detach', 'print the sandbox id and leave it running')
      .option('--env <key=value>', 'environment variable of the sandbox (repeatable)', keyValue)
      .option('--metadata <key=value>', 'metadata pair (repeatable)', keyValue)
      .option('--auto-pause', 'pause the sandbox when its timeout ends, instead of killing it'),
  ).action(clientAction(start));

  withGlobalFlags(
    program
      .command('connect')
      .alias('cn')
      .argument('<id>', 'sandbox id')
      .description('attach a shell to a sandbox (resumes it when paused)')
      .option('--timeout <secs>', 'seconds the sandbox is kept from now', seconds, DEFAULT_TIMEOUT_SECS),
  ).action(
    clientAction(async (ctx, id: string, f: { timeout: number }) => {
      await ctx.api.sandboxes.connect(id, { timeout: f.timeout });
      if (!(process.stdin.isTTY && process.stdout.isTTY)) {
        throw usageError('connect attaches a shell and needs a terminal', `use \`aenv exec ${id} …\``);
      }
      const { envd } = await ctx.envd(id);
      return runInTerminal(envd, SHELL);
    }),
  );

  withGlobalFlags(
    program
      .command('pause')
      .argument('<id>', 'sandbox id')
      .description('pause a sandbox (memory and disk kept)'),
  ).action(
    clientAction(async (ctx, id: string) => {
      await ctx.progress().run(`pausing ${id}`, () => ctx.api.sandboxes.pause(id));
      ctx.out.done({ sandboxID: id, state: 'paused' }, `paused ${id}`);
    }),
  );

  withGlobalFlags(
    program
      .command('resume')
      .argument('<id>', 'sandbox id')
      .description('resume a paused sandbox')
      .option('--timeout <secs>', 'seconds the sandbox is kept from now', seconds, DEFAULT_TIMEOUT_SECS),
  ).action(
    clientAction(async (ctx, id: string, f: { timeout: number }) => {
      const r = await ctx
        .progress()
        .run(`resuming ${id}`, () => ctx.api.sandboxes.connect(id, { timeout: f.timeout }));
      ctx.out.done(
        { ...r.sandbox, resumed: r.resumed },
        r.resumed ? `resumed ${id}` : `${id} was already running`,
      );
    }),
  );

  withGlobalFlags(
    program
      .command('timeout')
      .argument('<id>', 'sandbox id')
      .argument('<secs>', 'seconds from now', seconds)
      .description('set when a sandbox ends, counted from now'),
  ).action(
    clientAction(async (ctx, id: string, secs: number) => {
      await ctx.api.sandboxes.setTimeout(id, secs);
      ctx.out.done({ sandboxID: id, timeout: secs }, `${id} ends in ${secs} s`);
    }),
  );

  withGlobalFlags(
    program
      .command('fork')
      .argument('<id>', 'sandbox id')
      .description('fork a running sandbox into copies (memory and disk)')
      .option('--count <n>', 'how many copies', intIn(1, 100), 1)
      .option('--timeout <secs>', "seconds the copies live (default: the source's timeout)", seconds),
  ).action(
    clientAction(async (ctx, id: string, f: { count: number; timeout?: number }) => {
      const results = await ctx.progress().run(`forking ${id} into ${f.count}`, () =>
        ctx.api.sandboxes.fork(id, {
          count: f.count,
          ...(f.timeout !== undefined ? { timeout: f.timeout } : {}),
        }),
      );
      ctx.out.list(results, [
        { header: 'SANDBOX', value: (r) => ('sandbox' in r ? r.sandbox.sandboxID : '') },
        { header: 'ERROR', value: (r) => ('error' in r ? r.error.message : '') },
      ]);
      return forkExitCode(results);
    }),
  );

  withGlobalFlags(
    program
      .command('delete')
      .alias('rm')
      .argument('<ids...>', 'sandbox ids')
      .description('kill sandboxes (their state is gone)'),
  ).action(
    clientAction(async (ctx, ids: string[]) => {
      for (const id of ids) {
        await ctx.api.sandboxes.kill(id);
        ctx.out.done({ sandboxID: id, deleted: true }, `deleted ${id}`);
      }
    }),
  );
}
