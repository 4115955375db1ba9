// `aenv build [dockerfile]` (and `aenv template build`): a template from a Dockerfile (docs/cli.md "build").
// The Dockerfile becomes the build API's steps (build/dockerfile.ts), COPY sources are uploaded through the
// server's file links (build/context-files.ts), and the build is followed to its end unless detached.
import { readFile, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { Option, type Command } from 'commander';
import { AenvApiError, type TemplateStep } from '@aenv/protocol';
import {
  copySources,
  packFiles,
  putFile,
  readDockerignore,
  UploadCut,
  UploadFailed,
  type CopySources,
} from '../build/context-files.js';
import { DockerfileError, translateDockerfile, type BuildPlan } from '../build/dockerfile.js';
import { clientAction, withGlobalFlags, type ClientContext } from '../client/context.js';
import { CliError, usageError } from '../client/errors.js';
import { kindOfStatus } from '../client/exit-codes.js';
import { keyValue, seconds } from '../client/parse.js';
import type { Progress } from '../client/progress.js';
import { VERSION } from '../version.js';
import {
  finishBuild,
  resources,
  withResourceFlags,
  type BuildOutcomeFlags,
  type ResourceFlags,
} from './templates.js';

interface BuildFlags extends ResourceFlags, BuildOutcomeFlags {
  name: string;
  context?: string;
  image?: string;
  userImage?: string;
  buildArg?: Record<string, string>;
  cache: boolean;
}

/** A name as a template alias may be (`base`, `py:3`): FROM with one may mean a template of this server. */
const TEMPLATE_NAME_RE = /^[A-Za-z0-9_-]{1,255}(?::[A-Za-z0-9_.-]{1,128})?$/;

/** The Dockerfile's path: the argument, or the `Dockerfile` in the directory it names. */
async function dockerfilePath(arg: string): Promise<string> {
  const p = resolve(arg);
  try {
    return (await stat(p)).isDirectory() ? join(p, 'Dockerfile') : p;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    throw new CliError('notFound', `no Dockerfile at ${arg}`, 'pass the path of one (default: ./Dockerfile)');
  }
}

function asCliError(e: unknown): unknown {
  if (!(e instanceof DockerfileError)) return e;
  return new CliError(e.reason === 'missing' ? 'notFound' : 'usage', e.message);
}

/** FROM as the build API's base: a template of this server when one has that name, else an image. */
async function baseOf(
  ctx: ClientContext,
  plan: BuildPlan,
  image?: string,
): Promise<{ fromImage: string } | { fromTemplate: string }> {
  if (image) return { fromImage: image };
  if (TEMPLATE_NAME_RE.test(plan.from)) {
    try {
      await ctx.api.templates.byAlias(plan.from);
      return { fromTemplate: plan.from };
    } catch (e) {
      if (!(e instanceof AenvApiError && (e.status === 404 || e.status === 400))) throw e;
    }
  }
  return { fromImage: plan.from };
}

function apiSteps(plan: BuildPlan, sources: Map<number, CopySources>): TemplateStep[] {
  return plan.steps.map((s, i) => {
    if (s.kind === 'step') return { type: s.type, args: s.args };
    return {
      type: 'COPY',
      // Without --chown the files are root's, whatever USER is (as Docker does; the SDK's default is USER).
      args: [s.src, s.dest, s.user ?? 'root', s.mode ?? ''],
      filesHash: sources.get(i)!.filesHash,
    };
  });
}

/** Uploads the files of each COPY the server does not have yet (one upload per distinct hash). */
async function uploadSources(
  ctx: ClientContext,
  templateId: string,
  contextDir: string,
  sources: Iterable<CopySources>,
  progress: Progress,
): Promise<void> {
  const done = new Set<string>();
  for (const s of sources) {
    if (done.has(s.filesHash)) continue;
    done.add(s.filesHash);
    const link = await ctx.api.templates.filesUpload(templateId, s.filesHash);
    if (link.present) continue;
    if (!link.url)
      throw new CliError('server', `the server gave no upload link for the files of COPY ${s.step.src}`);
    const url = link.url;
    const packed = await packFiles(contextDir, s.paths);
    try {
      const kib = Math.ceil(packed.size / 1024);
      await progress.run(`uploading COPY ${s.step.src} (${s.paths.length} entries, ${kib} KiB)`, () =>
        putFile(url, packed.path, packed.size, `aenv/${VERSION}`),
      );
    } catch (e) {
      if (e instanceof UploadCut) {
        const message = `Dockerfile line ${s.step.line}: COPY ${s.step.src}: ${e.message}`;
        throw new CliError(kindOfStatus(413), message, 'leave files out with .dockerignore');
      }
      if (!(e instanceof UploadFailed)) throw e;
      throw new CliError(
        kindOfStatus(e.status),
        `Dockerfile line ${s.step.line}: COPY ${s.step.src}: ${e.message}`,
        e.status === 413 ? 'leave files out with .dockerignore' : undefined,
      );
    } finally {
      await packed.cleanup();
    }
  }
}

async function build(ctx: ClientContext, file: string | undefined, f: BuildFlags): Promise<void> {
  const path = await dockerfilePath(file ?? 'Dockerfile');
  const contextDir = resolve(f.context ?? dirname(path));
  if (!(await stat(contextDir).catch(() => undefined))?.isDirectory()) {
    throw usageError(`the build context ${f.context ?? contextDir} is not a directory`);
  }
  const progress = ctx.progress(f.quiet);
  const sources = new Map<number, CopySources>();
  let plan: BuildPlan;
  try {
    plan = translateDockerfile(await readFile(path, 'utf8'), f.buildArg ? { buildArgs: f.buildArg } : {});
    // Every COPY source is checked (and hashed) before anything is created on the server.
    const ig = await readDockerignore(contextDir);
    for (const [i, s] of plan.steps.entries()) {
      if (s.kind === 'copy') sources.set(i, await copySources(contextDir, s, ig));
    }
  } catch (e) {
    throw asCliError(e);
  }
  const base = await baseOf(ctx, plan, f.image ?? f.userImage);
  const req = await ctx.api.templates.requestBuild({ name: f.name, ...resources(f) });
  try {
    await uploadSources(ctx, req.templateID, contextDir, sources.values(), progress);
    await ctx.api.templates.startBuild(req.templateID, req.buildID, {
      ...base,
      steps: apiSteps(plan, sources),
      ...(f.cache ? {} : { force: true }),
      ...(plan.startCmd ? { startCmd: plan.startCmd } : {}),
      ...(plan.readyCmd ? { readyCmd: plan.readyCmd } : {}),
    });
  } catch (e) {
    // A build that never started leaves no template behind (its name stays free for the next try).
    await ctx.api.templates.delete(req.templateID).catch(() => undefined);
    throw e;
  }
  // The server numbers the steps it was sent from 1: a failed one is named by its Dockerfile line too.
  const describeStep = (step: string) => {
    const line = /^\d+$/.test(step) ? plan.steps[Number(step) - 1]?.line : undefined;
    return line ? `step ${step}, Dockerfile line ${line}` : `step ${step}`;
  };
  await finishBuild(ctx, { templateID: req.templateID, buildID: req.buildID, name: f.name }, f, describeStep);
}

function defineBuild(cmd: Command): Command {
  return withGlobalFlags(
    withResourceFlags(
      cmd
        .argument('[dockerfile]', 'the Dockerfile, or a directory with one', 'Dockerfile')
        .description(
          'make a template of a Dockerfile (one stage; COPY from the build context) and wait until it is ready',
        )
        .requiredOption('--name <name>', 'template name')
        .option(
          '-c, --context <dir>',
          "the build context COPY reads from (default: the Dockerfile's directory)",
        )
        .option('--image <ref>', "base image instead of the Dockerfile's FROM (also --user-image)")
        .addOption(new Option('--user-image <ref>').hideHelp())
        .option('--build-arg <key=value>', 'value of an ARG (repeatable)', keyValue)
        .option('--no-cache', 'rebuild every step (no layer cache)'),
    )
      .option('-d, --detach', 'start the build and return (follow it with `aenv template watch`)')
      .option('-q, --quiet', 'no progress display and no build log lines')
      .option('--timeout <secs>', 'stop waiting after this long (the build goes on)', seconds),
  ).action(clientAction(build));
}

export function registerBuildCommands(program: Command, template: Command): void {
  defineBuild(program.command('build'));
  defineBuild(template.command('build'));
}
