// docs/cli.md, rendered from the command tree itself (`npm run -w @aenv/cli gen:docs`; a unit test fails
// when the file is stale).
import type { Command, Option } from 'commander';
import { DEFAULT_URL } from '../client/config.js';
import { EXIT, EXIT_MEANING, type ExitKind } from '../client/exit-codes.js';
import { EXAMPLES } from './examples.js';

/** The services `aenv` runs, documented elsewhere (docs/operations.md, docs/cluster.md). */
export const SERVICE_COMMANDS = new Set(['server', 'scheduler', 'gateway', 'help']);

export interface LeafCommand {
  path: string;
  cmd: Command;
}

/** Every command that runs something (not a group), depth first, in definition order. */
export function leafCommands(program: Command): LeafCommand[] {
  const out: LeafCommand[] = [];
  const walk = (cmd: Command, prefix: string[]) => {
    for (const c of cmd.commands) {
      const path = [...prefix, c.name()];
      if (c.commands.length) walk(c, path);
      else out.push({ path: path.join(' '), cmd: c });
    }
  };
  walk(program, []);
  return out;
}

/** The flags every client command takes (`withGlobalFlags`), described once at the top. */
const GLOBAL_FLAGS = new Set(['--url', '--api-key', '--output', '--debug']);

const esc = (s: string) => s.replace(/\|/g, '\\|');

function optionRow(o: Option): string {
  const extra = [
    o.argChoices ? `one of: ${o.argChoices.join(', ')}` : '',
    o.defaultValue !== undefined && o.defaultValue !== false ? `default: ${String(o.defaultValue)}` : '',
  ].filter(Boolean);
  return `| \`${esc(o.flags)}\` | ${esc(o.description)}${extra.length ? ` (${extra.join('; ')})` : ''} |`;
}

function usage(path: string, cmd: Command): string {
  const parent = path.split(' ').slice(0, -1);
  return ['aenv', ...parent, cmd.name(), cmd.usage()].join(' ');
}

function commandSection({ path, cmd }: LeafCommand): string {
  const parentAliases = cmd.parent?.aliases() ?? [];
  const aliases = cmd.aliases();
  const lines = [`### \`aenv ${path}\``, '', cmd.description(), ''];
  if (aliases.length || parentAliases.length) {
    const names = [
      ...(parentAliases.length
        ? [`\`${cmd.parent!.name()}\` is also \`${parentAliases.join('`, `')}\``]
        : []),
      ...(aliases.length ? [`\`${cmd.name()}\` is also \`${aliases.join('`, `')}\``] : []),
    ];
    lines.push(`Aliases: ${names.join('; ')}.`, '');
  }
  lines.push('```', usage(path, cmd), '```', '');
  const args = cmd.registeredArguments;
  if (args.length) {
    lines.push('| Argument | |', '|---|---|');
    for (const a of args) {
      const choices = a.argChoices ? ` (one of: ${a.argChoices.join(', ')})` : '';
      lines.push(
        `| \`${a.name()}${a.variadic ? '…' : ''}\`${a.required ? '' : ' (optional)'} | ${esc(a.description)}${choices} |`,
      );
    }
    lines.push('');
  }
  const opts = cmd.options.filter((o) => !o.hidden && (path === 'auth' || !GLOBAL_FLAGS.has(o.long ?? '')));
  if (opts.length) {
    lines.push('| Option | |', '|---|---|', ...opts.map(optionRow), '');
  }
  const example = EXAMPLES[path];
  if (example) lines.push('Example:', '', '```sh', example, '```', '');
  return lines.join('\n');
}

export function renderCliDoc(program: Command): string {
  const leaves = leafCommands(program).filter((l) => !SERVICE_COMMANDS.has(l.path));
  const exitRows = (Object.keys(EXIT) as ExitKind[]).map((k) => `| ${EXIT[k]} | ${EXIT_MEANING[k]} |`);
  return [
    '# The `aenv` CLI',
    '',
    '<!-- Generated from packages/cli/src (npm run -w @aenv/cli gen:docs); do not edit by hand. -->',
    '',
    'The client commands of `aenv` drive a node (or a gateway) through its E2B-compatible API and, for',
    "commands and files, through the sandbox's envd reached over the node's header route",
    '(`x-agentenv-sandbox-id`, `x-agentenv-target-port: 49983`, `X-Access-Token` for secure sandboxes).',
    'The services `aenv server`, `aenv scheduler` and `aenv gateway` are described in',
    '[operations.md](operations.md) and [cluster.md](cluster.md).',
    '',
    '## Configuration',
    '',
    'Each of the server URL and the API key is taken from the first of:',
    '',
    '1. the flags `--url` and `--api-key`;',
    '2. the environment variables `AENV_URL` and `AENV_API_KEY`;',
    '3. `E2B_API_URL` and `E2B_API_KEY` (what the e2b SDKs read);',
    '4. the credentials file `aenv auth` writes: `$XDG_CONFIG_HOME/aenv/credentials`, else',
    '   `~/.config/aenv/credentials` (TOML: `url`, `api_key`);',
    `5. for the URL only, \`${DEFAULT_URL}\`.`,
    '',
    'The credentials file is written with mode 0600 in a 0700 directory. A credentials file that is not',
    'a regular file, belongs to another user, can be read by group or others, or has keys other than',
    '`url` and `api_key` is refused (exit code 7 or 2) and the message says what to fix. It is read only',
    'when the flags and the environment leave something open.',
    '',
    '## Output',
    '',
    "Lists and records print as a table on a terminal and as JSON (the API's own objects) when stdout is",
    'not a terminal; `-o`/`--output table|json` chooses. Actions (`pause`, `rm`, …) print a sentence on a',
    "terminal and a JSON object otherwise. `start -d` prints only the new sandbox's id (its whole JSON with",
    '`-o json`). `logs -f` prints one JSON object per line when not on a terminal.',
    '',
    '## Progress',
    '',
    'Long operations (`pull`, `build`, `template watch`, `start`, `fork`, `pause`, `resume`,',
    '`snapshot create`) show their progress on stderr: on an interactive terminal (a TTY, `TERM` not',
    '`dumb`, no `CI` variable) a spinner line with the status and the elapsed time, ending in ✔ or ✖; when',
    "stderr is not one, the same statuses as plain lines. A build's log lines stream above it as the build",
    'runs. `-o json` (and `--quiet` where a command has it) shows nothing on stderr but errors, so stdout',
    'carries only the final JSON. The exit code says whether the operation succeeded.',
    '',
    '## Building from a Dockerfile',
    '',
    "`aenv build` (also `aenv template build`) turns a single-stage Dockerfile into the build API's steps",
    '(`POST /v3/templates`, `POST /v2/templates/{id}/builds/{id}`) and, unless `-d`, follows the build with',
    'its log lines until it is ready:',
    '',
    '| Instruction | In the template |',
    '|---|---|',
    '| `FROM` | the base: a template of this server when one has that name, else an OCI image (`--image` overrides it). `ARG`s before `FROM` expand in it. One `FROM` only: multi-stage files, `--platform` and `scratch` are refused |',
    '| `RUN` | a step run by the login shell (`bash -lc`, else `sh`) as the current user in the current directory; exec form is shell-quoted. `--mount`/`--network` flags and here-documents are refused |',
    '| `ENV`, `ARG` | environment of later steps and of the sandboxes (an `ARG` stays in their environment too); `--build-arg NAME=VALUE` sets an `ARG`, one no `ARG` declares is an error |',
    '| `WORKDIR`, `USER` | the directory and user of later steps and of the sandboxes |',
    "| `COPY`, `ADD` | files of the build context (`-c`, default the Dockerfile's directory): a path, a directory tree or a glob, without what `.dockerignore` excludes, uploaded as a tar.gz through `GET /templates/{id}/files/{hash}`'s link; `--chown` and `--chmod` apply (without `--chown` the files are root's, as in Docker). Sources outside the context (`..`, absolute paths, symbolic links out of it), `--from`, `ADD` of URLs and of archives are refused |",
    "| `EXPOSE`, `VOLUME`, `LABEL` | recorded in the template's metadata |",
    '| `CMD`, `ENTRYPOINT` | combined as Docker does into the start command, running in every sandbox of the template |',
    '| `HEALTHCHECK CMD` | the ready command (polled every 2 s; its `--interval` and the like do not apply) |',
    '',
    'Any other instruction (`SHELL`, `ONBUILD`, `STOPSIGNAL`, `MAINTAINER`, unknown ones) is refused with',
    'an error naming its line (exit code 2); a `COPY` source that is not in the context exits 3. Nothing is',
    'created on the server before the whole file and every `COPY` source have been checked; a build that',
    'cannot start (an upload or the start request refused) deletes the template it had registered.',
    '`${VAR}` in instructions other than `RUN` expands to what the file set; other variables are left for',
    "the build (they may come from the base image's environment).",
    '',
    '## Errors and exit codes',
    '',
    'A failure prints one line on stderr: what failed (the call and the HTTP status, or the local cause),',
    "the server's message, and what to do; `--debug` adds the stack trace. `exec` and the interactive shell",
    "exit with the remote command's code (128 + the signal number when a signal ended it).",
    '',
    '| Code | Meaning |',
    '|---|---|',
    ...exitRows,
    '',
    '## Commands',
    '',
    'Every client command also takes `--url`, `--api-key`, `-o/--output` and `--debug` (not repeated',
    'below). Flags go before the positional arguments of `exec`: what follows the sandbox id is the',
    "remote command's.",
    '',
    ...leaves.map(commandSection),
  ]
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trimEnd()
    .concat('\n');
}
