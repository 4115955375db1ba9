// Templates: `aenv pull <image>` (a template from an OCI image), `aenv template list|delete|watch` (`build`:
// commands/build.ts).
import { Option, type Command } from 'commander';
import type { TemplateResponse } from '@aenv/protocol';
import { clientAction, withGlobalFlags, type ClientContext } from '../client/context.js';
import { CliError, usageError } from '../client/errors.js';
import { followBuild } from '../client/build-progress.js';
import type { Column } from '../client/output.js';
import { intIn, seconds } from '../client/parse.js';
import { allPages } from './sandboxes.js';

const TEMPLATE_COLUMNS: Column<TemplateResponse>[] = [
  { header: 'ID', value: (t) => t.templateID },
  { header: 'NAMES', value: (t) => t.names.join(', ') },
  { header: 'STATUS', value: (t) => t.buildStatus },
  { header: 'CPU', value: (t) => t.cpuCount },
  { header: 'MEMORY MB', value: (t) => t.memoryMB },
  { header: 'DISK MB', value: (t) => t.diskSizeMB },
  { header: 'CREATED', value: (t) => t.createdAt },
];

/** `registry/org/name:tag@digest` → `name`: `pull`'s default `--name` (docs/cli.md#aenv-pull). */
export function templateNameOf(image: string): string {
  const noDigest = image.split('@')[0]!;
  const last = noDigest.slice(noDigest.lastIndexOf('/') + 1);
  const name = last.split(':')[0]!;
  if (!name) throw usageError(`cannot derive a template name from ${JSON.stringify(image)}`, 'pass --name');
  return name;
}

/** The resource flags shared by `pull` and `build`, with the reference's aliases hidden. */
export function withResourceFlags(cmd: Command): Command {
  return cmd
    .option(
      '--cpu <n>',
      "vCPUs of its sandboxes (default: the node's [machine] default; also --cpu-count)",
      intIn(1, 1024),
    )
    .addOption(new Option('--cpu-count <n>').argParser(intIn(1, 1024)).hideHelp())
    .option(
      '--memory <mb>',
      'memory of its sandboxes in MiB (also --memory-mb, --mem)',
      intIn(128, 16 * 1024 * 1024),
    )
    .addOption(new Option('--memory-mb <mb>').argParser(intIn(128, 16 * 1024 * 1024)).hideHelp())
    .addOption(new Option('--mem <mb>').argParser(intIn(128, 16 * 1024 * 1024)).hideHelp());
}

export interface ResourceFlags {
  cpu?: number;
  cpuCount?: number;
  memory?: number;
  memoryMb?: number;
  mem?: number;
}

export function resources(f: ResourceFlags): { cpuCount?: number; memoryMB?: number } {
  const cpuCount = f.cpu ?? f.cpuCount;
  const memoryMB = f.memory ?? f.memoryMb ?? f.mem;
  return { ...(cpuCount !== undefined ? { cpuCount } : {}), ...(memoryMB !== undefined ? { memoryMB } : {}) };
}

export interface BuildOutcomeFlags {
  detach?: boolean;
  quiet?: boolean;
  timeout?: number;
}

/** Prints a started build (detached) or follows it to its end and prints the template. */
export async function finishBuild(
  ctx: ClientContext,
  ids: { templateID: string; buildID: string; name: string },
  f: BuildOutcomeFlags,
  describeStep?: (step: string) => string,
): Promise<void> {
  if (f.detach) {
    ctx.out.done(
      { ...ids, status: 'building' },
      `building template ${ids.name} (${ids.templateID}); follow it with \`aenv template watch ${ids.name}\``,
    );
    return;
  }
  const info = await followBuild(ctx.api, ids.templateID, ids.buildID, ctx.progress(f.quiet), {
    label: `template ${ids.name}`,
    ...(describeStep ? { describeStep } : {}),
    ...(f.timeout !== undefined ? { timeoutSecs: f.timeout } : {}),
  });
  ctx.out.done({ ...ids, status: info.status }, `template ${ids.name} (${ids.templateID}) is ready`);
}

interface PullFlags extends ResourceFlags, BuildOutcomeFlags {
  name?: string;
  startCmd?: string;
  readyCmd?: string;
  probe?: number;
}

/** Registers `pull` and `template …`; returns the `template` command (`template build` joins it). */
export function registerTemplateCommands(program: Command): Command {
  withGlobalFlags(
    withResourceFlags(
      program
        .command('pull')
        .argument('<image>', 'OCI image reference')
        .description('make a template of an OCI image (its Env, WorkingDir and User kept)')
        .option('--name <name>', "template name (default: the image's last path segment)"),
    )
      .option('--start-cmd <cmd>', 'command started in each sandbox of it')
      .option('--ready-cmd <cmd>', 'command that succeeds once the start command is ready')
      .option('--probe <port>', 'ready when this TCP port accepts (instead of --ready-cmd)', intIn(1, 65535))
      .option('-d, --detach', 'start the build and return')
      .option('-q, --quiet', 'no progress display and no build log lines')
      .option('--timeout <secs>', 'stop waiting after this long (the build goes on)', seconds),
  ).action(
    clientAction(async (ctx, image: string, f: PullFlags) => {
      if (f.probe !== undefined && f.readyCmd !== undefined) {
        throw usageError('--probe and --ready-cmd cannot both be given');
      }
      const name = f.name ?? templateNameOf(image);
      const req = await ctx.api.templates.requestBuild({ name, ...resources(f) });
      const readyCmd = f.probe !== undefined ? `: >/dev/tcp/127.0.0.1/${f.probe}` : f.readyCmd;
      await ctx.api.templates.startBuild(req.templateID, req.buildID, {
        fromImage: image,
        ...(f.startCmd ? { startCmd: f.startCmd } : {}),
        ...(readyCmd ? { readyCmd } : {}),
      });
      await finishBuild(ctx, { templateID: req.templateID, buildID: req.buildID, name }, f);
    }),
  );

  const template = program
    .command('template')
    .alias('templates')
    .description('templates sandboxes start from');

  withGlobalFlags(template.command('list').alias('ls').description('list templates')).action(
    clientAction(async (ctx) => {
      const rows = await allPages((nextToken) =>
        ctx.api.templates.list({ limit: 100, ...(nextToken ? { nextToken } : {}) }),
      );
      ctx.out.list(rows, TEMPLATE_COLUMNS);
    }),
  );

  withGlobalFlags(
    template
      .command('delete')
      .alias('rm')
      .argument('<template>', 'template id or name')
      .description('delete a template (and the snapshots it is)'),
  ).action(
    clientAction(async (ctx, t: string) => {
      // A name that names nothing is an error here, though the route itself is idempotent.
      const found = await ctx.api.templates.get(t);
      await ctx.api.templates.delete(found.templateID);
      ctx.out.done({ templateID: found.templateID, deleted: true }, `deleted ${t} (${found.templateID})`);
    }),
  );

  withGlobalFlags(
    template
      .command('watch')
      .argument('<template>', 'template id or name')
      .description('follow the latest build of a template to its end')
      .option('-q, --quiet', 'no progress display and no build log lines')
      .option('--timeout <secs>', 'stop waiting after this long', seconds),
  ).action(
    clientAction(async (ctx, t: string, f: BuildOutcomeFlags) => {
      const found = await ctx.api.templates.get(t);
      const build = found.builds[0];
      if (!build) throw new CliError('notFound', `template ${t} has no build`);
      await finishBuild(
        ctx,
        { templateID: found.templateID, buildID: build.buildID, name: found.names[0] ?? t },
        f,
      );
    }),
  );
  return template;
}
