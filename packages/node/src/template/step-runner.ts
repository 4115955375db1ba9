// Runs build steps in a build sandbox through envd and keeps the build state up to date.
import { createReadStream } from 'node:fs';
import { posix } from 'node:path';
import { Code, ConnectError, type CommandResult, type EnvdRpcClient } from '@aenv/protocol';
import type { BuildLog } from './build-log.js';
import {
  expansionScript,
  needsExpansion,
  recordExpose,
  recordVolume,
  resolveWorkdir,
  type BuildState,
} from './build-state.js';
import type { TemplateFileStore } from './file-store.js';
import type { BuildStep } from './steps.js';

export class StepError extends Error {
  constructor(
    message: string,
    readonly step: string,
  ) {
    super(message);
    this.name = 'StepError';
  }
}

export interface StepRunnerOptions {
  envd: EnvdRpcClient;
  log: BuildLog;
  files: TemplateFileStore;
  signal: AbortSignal;
}

const MAX_TAIL_LINES = 5;

/** How a failed command is reported. */
interface FailureText {
  /** The command ran and exited non-zero; `last` is its last output line. */
  exited(r: CommandResult, last: string): string;
  /** envd could not run it, or the stream to envd broke. */
  broken(e: unknown): string;
}

/** A step's own command: its label, the exit code and the last line it printed. */
const labelled = (label: string): FailureText => ({
  exited: (r, last) => {
    const why = r.error && !/^exit status \d+$/.test(r.error) ? ` (${r.error})` : '';
    return `${label} failed with exit code ${r.exitCode}${why}${last ? `: ${last}` : ''}`;
  },
  broken: (e) => `${label}: ${(e as Error).message}`,
});

/** Go's name of a Connect code, as E2B's errors print it ("invalid_argument"). */
const connectCodeName = (code: Code) => Code[code].replace(/(?<!^)([A-Z])/g, '_$1').toLowerCase();

/**
 * A failed RUN step, worded as E2B's template builder words it (docs/templates.md): `failed to run command
 * '<cmd>': exit status 3`, or `…: command failed: unauthenticated: invalid username: 'x'` when envd refused or
 * lost the command.
 */
export const runCommandFailure = (cmd: string): FailureText => ({
  exited: (r) => `failed to run command '${cmd}': ${r.status || `exit status ${r.exitCode}`}`,
  broken: (e) => {
    const rpc = e instanceof Error && e.cause instanceof ConnectError ? e.cause : undefined;
    const why = rpc ? `${connectCodeName(rpc.code)}: ${rpc.rawMessage}` : (e as Error).message;
    return `failed to run command '${cmd}': command failed: ${why}`;
  },
});

// COPY: the uploaded archive is unpacked in a scratch dir, the source (the part of the COPY source before any
// glob: the SDK already picked the files) gets its owner and mode there, and is then copied to the destination
// like Docker does: a directory's contents merge into the destination directory; a file lands at the
// destination, or inside it when it ends in "/" or is a directory. Runs as root with the image's own sh/tar/cp.
const COPY_SCRIPT = `set -eu
archive=$1 gz=$2 src=$3 dest=$4 owner=$5 fmode=$6 dmode=$7
work=/tmp/.aenv-build-copy.$$
rm -rf "$work"; mkdir -p "$work/x"
if [ "$gz" = 1 ]; then tar -xzof "$archive" -C "$work/x"; else tar -xof "$archive" -C "$work/x"; fi
rm -f "$archive"
from="$work/x/$src"
if [ ! -e "$from" ] && [ ! -L "$from" ]; then
  echo "COPY: $src is not in the uploaded files" >&2; rm -rf "$work"; exit 2
fi
case "$owner" in *:*) ;; *) owner="$owner:$(id -g "$owner")" ;; esac
if [ -d "$from" ] && [ ! -L "$from" ]; then
  chown -hR "$owner" "$from"
  if [ -n "$fmode" ]; then
    find "$from" -type d -exec chmod "$dmode" {} \\;
    find "$from" ! -type d ! -type l -exec chmod "$fmode" {} \\;
  fi
  if [ ! -d "$dest" ]; then mkdir -p "$dest"; chown "$owner" "$dest"; fi
  cp -a "$from/." "$dest/"
else
  case "$dest" in
    */) target="$dest$(basename "$from")" ;;
    *) if [ -d "$dest" ] && [ ! -L "$dest" ]; then target="$dest/$(basename "$from")"; else target="$dest"; fi ;;
  esac
  chown -h "$owner" "$from"
  if [ -n "$fmode" ] && [ ! -L "$from" ]; then chmod "$fmode" "$from"; fi
  parent=$(dirname "$target")
  if [ ! -d "$parent" ]; then mkdir -p "$parent"; chown "$owner" "$parent"; fi
  rm -f "$target"
  cp -a "$from" "$target"
fi
rm -rf "$work"
`;

// USER: creates a missing account the way the image can (useradd, else busybox adduser).
const ENSURE_USER_SCRIPT = `set -eu
name=$1
if id -u "$name" >/dev/null 2>&1; then exit 0; fi
shell=$(command -v bash || echo /bin/sh)
if command -v useradd >/dev/null 2>&1; then
  useradd -m -s "$shell" "$name"
elif command -v adduser >/dev/null 2>&1; then
  adduser -D -g "" -s "$shell" "$name"
else
  echo "cannot create user $name: the image has neither useradd nor adduser" >&2; exit 127
fi
echo "created user $name"
`;

/** The part of a COPY source before its first glob component, without "./" and trailing "/". */
export function copySourcePrefix(src: string): string {
  const parts = src.split('/').filter((p) => p !== '' && p !== '.');
  const out: string[] = [];
  for (const p of parts) {
    if (/[*?[\]{}]/.test(p)) break;
    out.push(p);
  }
  return out.join('/');
}

/** Directory mode for a COPY mode: like chmod's X, directories get search permission where they are readable. */
export function directoryMode(fileMode: number): number {
  return fileMode | ((fileMode & 0o444) >> 2);
}

export class StepRunner {
  private readonly homes = new Map<string, string>();

  constructor(
    private readonly o: StepRunnerOptions,
    /** Login shell for RUN (`/bin/bash`, `/bin/sh` in images without bash). */
    readonly shell: string,
  ) {}

  /** Runs a command, logging its output under `step`; throws StepError when it fails. */
  private async exec(
    step: string,
    label: string,
    spec: { cmd: string; args: string[]; user?: string; cwd?: string; envs?: Record<string, string> },
    /** `quiet`: output is a value the builder reads, not something to show. */
    level: 'info' | 'quiet' = 'info',
    failure: FailureText = labelled(label),
  ): Promise<string> {
    const out = level === 'quiet' ? { write() {}, flush() {} } : this.o.log.lineWriter(level, step);
    const tail: string[] = [];
    let stdout = '';
    const r = await this.o.envd
      .run(spec, {
        signal: this.o.signal,
        onOutput: ({ stream, data }) => {
          out.write(data);
          if (stream === 'stdout' && stdout.length < 64 * 1024) stdout += data.toString('utf8');
          for (const line of data.toString('utf8').split('\n')) {
            if (line.trim()) tail.push(line);
          }
          while (tail.length > MAX_TAIL_LINES) tail.shift();
        },
      })
      .catch((e: unknown) => {
        out.flush();
        if (this.o.signal.aborted) throw e;
        throw new StepError(failure.broken(e), step);
      });
    out.flush();
    if (r.exitCode !== 0) {
      const last = tail.length ? tail[tail.length - 1]!.trim().slice(0, 300) : '';
      throw new StepError(failure.exited(r, last), step);
    }
    return stdout;
  }

  /** The user's home as envd sets it (from the sandbox's /etc/passwd). */
  private async home(user: string, step: string): Promise<string> {
    const known = this.homes.get(user);
    if (known) return known;
    const out = await this.exec(
      step,
      `looking up the home of ${user}`,
      {
        cmd: '/bin/sh',
        args: ['-c', 'printf %s "$HOME"'],
        user,
      },
      'quiet',
    );
    const home = out.trim() || '/';
    this.homes.set(user, home);
    return home;
  }

  /** Makes sure `user` exists (creating it when missing; numeric ids are taken as they are). */
  async ensureUser(user: string, step: string): Promise<void> {
    if (user === 'root' || /^\d+$/.test(user)) return;
    await this.exec(step, `USER ${user}`, {
      cmd: '/bin/sh',
      args: ['-c', ENSURE_USER_SCRIPT, 'aenv-user', user],
      user: 'root',
    });
  }

  async run(step: BuildStep, state: BuildState): Promise<void> {
    const id = String(step.index);
    switch (step.kind) {
      case 'run':
        await this.exec(
          id,
          step.label,
          {
            cmd: this.shell,
            args: ['-l', '-c', step.cmd],
            user: step.user ?? state.user,
            ...(state.workdir ? { cwd: state.workdir } : {}),
            envs: state.env,
          },
          'info',
          runCommandFailure(step.cmd),
        );
        return;
      case 'env':
        for (const [k, v] of step.vars) {
          state.env[k] = needsExpansion(v)
            ? await this.exec(
                id,
                `${step.label} (expanding ${k})`,
                {
                  cmd: '/bin/sh',
                  args: ['-c', `eval "$1"`, 'aenv-env', expansionScript(v)],
                  user: state.user,
                  envs: state.env,
                },
                'quiet',
              )
            : v;
        }
        return;
      case 'workdir':
        state.workdir = await this.makeWorkdir(step.path, state, id);
        return;
      case 'user':
        await this.ensureUser(step.user, id);
        state.user = step.user;
        return;
      case 'copy':
        await this.copy(step, state, id);
        return;
      case 'expose':
        recordExpose(state, step.port);
        return;
      case 'volume':
        recordVolume(state, step.path);
        return;
      case 'label':
        for (const [k, v] of step.pairs) state.labels[k] = v;
        return;
    }
  }

  /** A path of a step made absolute: relative to the workdir, or to the user's home when none is set. */
  private async absolute(arg: string, state: BuildState, id: string): Promise<string> {
    if (posix.isAbsolute(arg)) return posix.normalize(arg).replace(/(.)\/+$/, '$1');
    return resolveWorkdir(state.workdir, state.workdir ? '/' : await this.home(state.user, id), arg);
  }

  private async makeWorkdir(arg: string, state: BuildState, id: string): Promise<string> {
    const path = await this.absolute(arg, state, id);
    try {
      return (await this.o.envd.makeDir(path, state.user)).path || path;
    } catch (e) {
      if (!(e instanceof ConnectError && e.code === Code.PermissionDenied)) {
        throw new StepError(`WORKDIR ${arg}: ${(e as Error).message}`, id);
      }
    }
    // The user may not create it there (e.g. /app): root does, and hands it to the user.
    await this.exec(id, `WORKDIR ${arg}`, {
      cmd: '/bin/sh',
      args: ['-c', 'mkdir -p "$1" && chown "$2:$(id -g "$2")" "$1"', 'aenv-workdir', path, state.user],
      user: 'root',
    });
    return path;
  }

  private async copy(
    step: Extract<BuildStep, { kind: 'copy' }>,
    state: BuildState,
    id: string,
  ): Promise<void> {
    const stored = await this.o.files.get(step.filesHash);
    if (!stored)
      throw new StepError(
        `${step.label}: the uploaded files (${step.filesHash}) are gone from this node`,
        id,
      );
    await this.o.files.touch(step.filesHash);
    const archive = `/tmp/.aenv-build-copy-${step.filesHash.slice(0, 16)}-${step.index}.tar${stored.gzip ? '.gz' : ''}`;
    try {
      await this.o.envd.uploadFile(archive, createReadStream(stored.path), stored.size, 'root');
    } catch (e) {
      throw new StepError(`${step.label}: ${(e as Error).message}`, id);
    }
    const dest = `${await this.absolute(step.dest, state, id)}${step.dest.endsWith('/') && step.dest !== '/' ? '/' : ''}`;
    const owner = step.user ?? state.user;
    const mode = step.mode !== undefined ? step.mode.toString(8).padStart(4, '0') : '';
    const dmode = step.mode !== undefined ? directoryMode(step.mode).toString(8).padStart(4, '0') : '';
    await this.exec(id, step.label, {
      cmd: '/bin/sh',
      args: [
        '-c',
        COPY_SCRIPT,
        'aenv-copy',
        archive,
        stored.gzip ? '1' : '0',
        copySourcePrefix(step.src),
        dest,
        owner,
        mode,
        dmode,
      ],
      user: 'root',
    });
  }
}
