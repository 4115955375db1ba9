// A Dockerfile as a template build (docs/cli.md "build"): its base, its steps in the build API's terms
// (TemplateStep), and the start and ready commands. Parsing is dockerfile-ast's; this module decides what each
// instruction means here and refuses, naming the line, what a template build cannot honour.
import { posix } from 'node:path';
import { DockerfileParser, type Instruction, type Property } from 'dockerfile-ast';

/** A Dockerfile instruction that cannot become part of a template build. */
export class DockerfileError extends Error {
  constructor(
    readonly line: number,
    message: string,
    /** `missing`: a COPY source that is not in the context. */
    readonly reason: 'refused' | 'missing' = 'refused',
  ) {
    super(line > 0 ? `Dockerfile line ${line}: ${message}` : `Dockerfile: ${message}`);
    this.name = 'DockerfileError';
  }
}

/** A COPY/ADD of one source from the build context; its files are uploaded before the build starts. */
export interface CopyStep {
  kind: 'copy';
  line: number;
  /** Relative to the context, normalised, never escaping it. */
  src: string;
  dest: string;
  user?: string;
  /** Octal text, as `--chmod` gave it. */
  mode?: string;
}

export interface PlainStep {
  kind: 'step';
  line: number;
  type: 'RUN' | 'ENV' | 'ARG' | 'WORKDIR' | 'USER' | 'EXPOSE' | 'VOLUME' | 'LABEL';
  args: string[];
}

export type PlanStep = CopyStep | PlainStep;

export interface BuildPlan {
  /** FROM's reference, variables expanded: an image, or the name of a template. */
  from: string;
  fromLine: number;
  steps: PlanStep[];
  startCmd?: string;
  readyCmd?: string;
}

type Form = { shell: string } | { exec: string[] };

const SAFE_WORD = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** One word for `sh -c`: as is when nothing in it is special, else single-quoted. */
export function shellQuote(word: string): string {
  return SAFE_WORD.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

const VAR_RE = /\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g;

/**
 * Docker's variable substitution in instructions other than RUN (RUN's shell expands its own): `$X`, `${X}`,
 * `${X:-word}`, `${X:+word}`, `\$` for a dollar. A variable this file does not set is left as written: it may
 * come from the base image's environment, which only the build sees.
 */
export function expandVars(text: string, vars: ReadonlyMap<string, string>): string {
  return text.replace(VAR_RE, (whole, braced?: string, op?: string, word?: string, bare?: string) => {
    if (whole === '\\$') return '$';
    const name = (braced ?? bare)!;
    const value = vars.get(name);
    if (op === ':-') return value ? value : (word ?? '');
    if (op === ':+') return value ? (word ?? '') : '';
    return value ?? whole;
  });
}

const lineOf = (i: Instruction) => i.getRange().start.line + 1;

/** The text after the instruction's `--flags`, continuation lines joined. */
function argumentText(i: Instruction): string {
  const text = (i.getArgumentsContent() ?? '').trim();
  return text.replace(/^(?:--[A-Za-z][\w-]*(?:=(?:"[^"]*"|\S*))?\s+)*/, '');
}

/** The exec (JSON array) or shell form of RUN, CMD, ENTRYPOINT, HEALTHCHECK CMD. */
function formOf(i: Instruction, text = argumentText(i)): Form {
  if (text.startsWith('[')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Docker runs an invalid JSON array as a shell command; so does this.
      return { shell: text };
    }
    if (Array.isArray(parsed) && parsed.every((p) => typeof p === 'string')) {
      if (parsed.length === 0) throw new DockerfileError(lineOf(i), `${i.getKeyword()} has an empty command`);
      return { exec: parsed };
    }
  }
  if (!text) throw new DockerfileError(lineOf(i), `${i.getKeyword()} has no command`);
  return { shell: text };
}

const commandLine = (f: Form) => ('shell' in f ? f.shell : f.exec.map(shellQuote).join(' '));

/** ENTRYPOINT and CMD together, as Docker combines them, as one command line for the start command. */
function startCommand(entrypoint?: Form, cmd?: Form): string | undefined {
  if (!entrypoint) return cmd ? commandLine(cmd) : undefined;
  if ('shell' in entrypoint) return entrypoint.shell;
  const tail = !cmd ? [] : 'exec' in cmd ? cmd.exec : ['/bin/sh', '-c', cmd.shell];
  return [...entrypoint.exec, ...tail].map(shellQuote).join(' ');
}

function words(i: Instruction): string[] {
  const text = argumentText(i);
  if (text.startsWith('[')) {
    try {
      const parsed: unknown = JSON.parse(text);
      if (Array.isArray(parsed) && parsed.every((p) => typeof p === 'string')) return parsed;
    } catch {
      // Not JSON: whitespace-separated words, as Docker reads it.
    }
  }
  return text.split(/\s+/).filter((w) => w !== '');
}

function properties(i: Instruction): Property[] {
  return 'getProperties' in i ? (i as unknown as { getProperties(): Property[] }).getProperties() : [];
}

function flags(i: Instruction): { name: string; value: string | null }[] {
  return 'getFlags' in i
    ? (i as unknown as { getFlags(): { getName(): string; getValue(): string | null }[] })
        .getFlags()
        .map((f) => ({ name: f.getName(), value: f.getValue() }))
    : [];
}

const URL_RE = /^(?:[a-z][a-z0-9+.-]*:\/\/|git@)/i;
const ARCHIVE_RE = /\.(?:tar|tar\.gz|tgz|tar\.bz2|tbz2?|tar\.xz|txz|tar\.zst)$/i;

/** A COPY source relative to the context; `..` out of it and absolute paths are refused. */
function contextPath(line: number, keyword: string, src: string): string {
  const norm = posix.normalize(src);
  if (posix.isAbsolute(src) || norm === '..' || norm.startsWith('../')) {
    throw new DockerfileError(line, `${keyword} ${src}: the source is outside the build context`);
  }
  return norm === '.' || norm === './' ? '.' : norm.replace(/\/+$/, '');
}

const NOT_HONOURED: Record<string, string> = {
  SHELL: 'SHELL is not supported: RUN steps run in the login shell of the image (bash, else sh)',
  ONBUILD: 'ONBUILD is not supported: a template has no build triggers',
  STOPSIGNAL: 'STOPSIGNAL is not supported: sandboxes are stopped by pausing or killing the whole sandbox',
  MAINTAINER: 'MAINTAINER is deprecated and not supported: use LABEL maintainer=…',
};

export interface TranslateOptions {
  /** `--build-arg NAME=VALUE`: values for ARG instructions; one no ARG declares is an error. */
  buildArgs?: Record<string, string>;
}

/** Translates a Dockerfile's text into a build plan, or throws a DockerfileError naming the line. */
export function translateDockerfile(text: string, opts: TranslateOptions = {}): BuildPlan {
  const df = DockerfileParser.parse(text);
  const instructions = df.getInstructions();
  const froms = instructions.filter((i) => i.getKeyword() === 'FROM');
  if (froms.length === 0) {
    const first = instructions[0];
    throw new DockerfileError(first ? lineOf(first) : 1, 'no FROM instruction: the Dockerfile needs a base');
  }
  if (froms.length > 1) {
    throw new DockerfileError(
      lineOf(froms[1]!),
      `multi-stage Dockerfiles are not supported (FROM on lines ${froms.map(lineOf).join(', ')}): a template build has one base`,
    );
  }
  const buildArgs = new Map(Object.entries(opts.buildArgs ?? {}));
  const declared = new Set<string>();
  const vars = new Map<string, string>();
  let beforeFrom = new Map<string, string>();
  const steps: PlanStep[] = [];
  let from: { ref: string; line: number } | undefined;
  let entrypoint: Form | undefined;
  let cmd: Form | undefined;
  let readyCmd: string | undefined;

  for (const i of instructions) {
    const keyword = i.getKeyword();
    const line = lineOf(i);
    const x = (s: string) => expandVars(s, vars);
    if (!from && keyword !== 'FROM' && keyword !== 'ARG') {
      throw new DockerfileError(line, `${keyword} before FROM: only ARG may come before FROM`);
    }
    switch (keyword) {
      case 'FROM': {
        const f = flags(i);
        if (f.length) throw new DockerfileError(line, `FROM --${f[0]!.name} is not supported`);
        const ref = x(words(i)[0] ?? '');
        if (!ref) throw new DockerfileError(line, 'FROM needs an image or a template name');
        if (ref === 'scratch')
          throw new DockerfileError(line, 'FROM scratch is not supported: a sandbox needs an OS image');
        from = { ref, line };
        // ARGs before FROM serve FROM only (as in Docker): the build's own environment starts empty.
        beforeFrom = new Map(vars);
        vars.clear();
        break;
      }
      case 'ARG': {
        for (const p of properties(i)) {
          const name = p.getName();
          declared.add(name);
          const given = buildArgs.get(name);
          // `ARG NAME` after FROM takes the value an ARG before FROM gave it.
          const value =
            given ?? (p.getValue() !== null ? x(p.getValue()!) : from ? beforeFrom.get(name) : undefined);
          if (value === undefined) continue;
          vars.set(name, value);
          if (from) steps.push({ kind: 'step', line, type: 'ARG', args: [name, value] });
        }
        break;
      }
      case 'ENV': {
        const args: string[] = [];
        for (const p of properties(i)) {
          const value = x(p.getValue() ?? '');
          vars.set(p.getName(), value);
          args.push(p.getName(), value);
        }
        if (!args.length) throw new DockerfileError(line, 'ENV needs NAME=VALUE');
        steps.push({ kind: 'step', line, type: 'ENV', args });
        break;
      }
      case 'LABEL': {
        const args = properties(i).flatMap((p) => [x(p.getName()), x(p.getValue() ?? '')]);
        if (!args.length) throw new DockerfileError(line, 'LABEL needs KEY=VALUE');
        steps.push({ kind: 'step', line, type: 'LABEL', args });
        break;
      }
      case 'RUN': {
        const f = flags(i);
        if (f.length) {
          throw new DockerfileError(
            line,
            `RUN --${f[0]!.name} is not supported (no BuildKit mounts or network modes)`,
          );
        }
        const text = argumentText(i);
        if (text.startsWith('<<'))
          throw new DockerfileError(line, 'RUN with a here-document is not supported');
        steps.push({ kind: 'step', line, type: 'RUN', args: [commandLine(formOf(i, text))] });
        break;
      }
      case 'WORKDIR':
      case 'USER': {
        const w = words(i);
        if (w.length !== 1) throw new DockerfileError(line, `${keyword} takes one argument`);
        steps.push({ kind: 'step', line, type: keyword, args: [x(w[0]!)] });
        break;
      }
      case 'EXPOSE':
      case 'VOLUME': {
        const w = words(i).map(x);
        if (!w.length) throw new DockerfileError(line, `${keyword} needs an argument`);
        for (const a of w) steps.push({ kind: 'step', line, type: keyword, args: [a] });
        break;
      }
      case 'COPY':
      case 'ADD': {
        let user: string | undefined;
        let mode: string | undefined;
        for (const f of flags(i)) {
          if (f.name === 'chown' && f.value) user = x(f.value);
          else if (f.name === 'chmod' && f.value && /^[0-7]{3,4}$/.test(f.value)) mode = f.value;
          else if (f.name === 'link') continue;
          else if (f.name === 'from') {
            throw new DockerfileError(
              line,
              `${keyword} --from is not supported: there are no other stages or images to copy from`,
            );
          } else
            throw new DockerfileError(
              line,
              `${keyword} --${f.name}${f.value !== null ? `=${f.value}` : ''} is not supported`,
            );
        }
        const w = words(i).map(x);
        if (w.length < 2) throw new DockerfileError(line, `${keyword} needs a source and a destination`);
        const dest = w[w.length - 1]!;
        const sources = w.slice(0, -1);
        if (sources.length > 1 && !dest.endsWith('/')) {
          throw new DockerfileError(line, `${keyword} of several sources needs a destination ending in /`);
        }
        for (const raw of sources) {
          if (keyword === 'ADD' && URL_RE.test(raw)) {
            throw new DockerfileError(
              line,
              `ADD ${raw}: downloads are not supported; RUN curl or wget instead`,
            );
          }
          if (keyword === 'ADD' && ARCHIVE_RE.test(raw)) {
            throw new DockerfileError(
              line,
              `ADD ${raw}: archives are not unpacked here; COPY it and RUN tar -x`,
            );
          }
          steps.push({
            kind: 'copy',
            line,
            src: contextPath(line, keyword, raw),
            dest,
            ...(user ? { user } : {}),
            ...(mode ? { mode } : {}),
          });
        }
        break;
      }
      case 'CMD':
        cmd = formOf(i);
        break;
      case 'ENTRYPOINT':
        entrypoint = formOf(i);
        break;
      case 'HEALTHCHECK': {
        // --interval and the like do not apply: the ready command is polled every 2 s (docs/templates.md).
        const text = argumentText(i);
        if (/^NONE$/i.test(text)) {
          readyCmd = undefined;
          break;
        }
        const m = /^CMD\s+([\s\S]*)$/i.exec(text);
        if (!m) throw new DockerfileError(line, 'HEALTHCHECK needs CMD <command> or NONE');
        readyCmd = commandLine(formOf(i, m[1]!.trim()));
        break;
      }
      default:
        throw new DockerfileError(
          line,
          NOT_HONOURED[keyword] ?? `unknown instruction ${JSON.stringify(i.getInstruction())}`,
        );
    }
  }
  for (const name of buildArgs.keys()) {
    if (!declared.has(name)) {
      throw new DockerfileError(0, `--build-arg ${name}: the Dockerfile declares no ARG ${name}`);
    }
  }
  const startCmd = startCommand(entrypoint, cmd);
  return {
    from: from!.ref,
    fromLine: from!.line,
    steps,
    ...(startCmd ? { startCmd } : {}),
    ...(readyCmd ? { readyCmd } : {}),
  };
}
