// What the steps so far have set: environment, working directory, user and the recorded-only metadata.
// It starts from the base (image config or the parent template's context) and ends up as the committed
// template's `context`, which launches use for envd's /init.
import { posix } from 'node:path';
import type { PulledImage } from '../image/index.js';
import type { CommandContext } from '../snapshot/index.js';

export interface BuildState {
  env: Record<string, string>;
  /** Absolute; undefined until an image WorkingDir or a WORKDIR step sets it (commands then run in the user's home). */
  workdir?: string;
  user: string;
  exposedPorts: string[];
  volumes: string[];
  labels: Record<string, string>;
  entrypoint?: string[];
  cmd?: string[];
}

/** E2B's convention: templates run as `user` (home /home/user) unless the image or a USER step says otherwise. */
export const E2B_DEFAULT_USER = 'user';

export function stateFromImage(image: PulledImage): BuildState {
  const env: Record<string, string> = {};
  for (const line of image.config.env) {
    const eq = line.indexOf('=');
    if (eq > 0) env[line.slice(0, eq)] = line.slice(eq + 1);
  }
  const user = image.config.user?.split(':', 1)[0]?.trim() || E2B_DEFAULT_USER;
  const wd = image.config.workingDir?.trim();
  return {
    env,
    ...(wd && wd !== '/' ? { workdir: wd } : {}),
    user,
    exposedPorts: [...image.config.exposedPorts],
    volumes: [...image.config.volumes],
    labels: { ...image.config.labels },
    ...(image.config.entrypoint ? { entrypoint: [...image.config.entrypoint] } : {}),
    ...(image.config.cmd ? { cmd: [...image.config.cmd] } : {}),
  };
}

export function stateFromContext(ctx: CommandContext): BuildState {
  return {
    env: { ...ctx.envVars },
    ...(ctx.workdir && ctx.workdir !== '/' ? { workdir: ctx.workdir } : {}),
    user: ctx.user || 'root',
    exposedPorts: [...ctx.exposedPorts],
    volumes: [...ctx.volumes],
    labels: { ...ctx.labels },
    ...(ctx.entrypoint ? { entrypoint: [...ctx.entrypoint] } : {}),
    ...(ctx.cmd ? { cmd: [...ctx.cmd] } : {}),
  };
}

export function contextOf(s: BuildState): CommandContext {
  return {
    envVars: { ...s.env },
    workdir: s.workdir ?? '/',
    user: s.user,
    exposedPorts: [...s.exposedPorts],
    volumes: [...s.volumes],
    labels: { ...s.labels },
    ...(s.entrypoint ? { entrypoint: [...s.entrypoint] } : {}),
    ...(s.cmd ? { cmd: [...s.cmd] } : {}),
  };
}

export function cloneState(s: BuildState): BuildState {
  return stateFromContext(contextOf(s));
}

function pushUnique(list: string[], v: string): void {
  if (!list.includes(v)) list.push(v);
}

export function recordExpose(s: BuildState, port: string): void {
  const p = port.trim();
  pushUnique(s.exposedPorts, p.includes('/') ? p : `${p}/tcp`);
}

export function recordVolume(s: BuildState, path: string): void {
  pushUnique(s.volumes, path.trim());
}

/** A WORKDIR argument made absolute: relative paths continue from the current workdir (or the user's home). */
export function resolveWorkdir(current: string | undefined, home: string, arg: string): string {
  return posix.resolve(current ?? home, arg);
}

/** Whether an ENV value needs the shell to expand it (`$VAR`, `${VAR}`, command substitution). */
export function needsExpansion(value: string): boolean {
  return /[$`]/.test(value);
}

/**
 * Shell text that prints `value` as a double-quoted string would expand it. Double quotes and backslashes of the
 * value are kept literal, so only `$…` and backquotes are interpreted (E2B evaluates ENV values with printf).
 */
export function expansionScript(value: string): string {
  const quoted = value.replace(/[\\"]/g, (c) => `\\${c}`);
  return `printf '%s' "${quoted}"`;
}
