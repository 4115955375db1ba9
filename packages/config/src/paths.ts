import { existsSync, realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { issue, type ConfigIssue, type ValueSource } from './errors.js';
import { getIn, setIn, type FieldEntry } from './walk.js';

/** `<repo>/config/default.toml`, found relative to this package (works from src/ and dist/). */
export function defaultConfigPath(): string {
  return fileURLToPath(new URL('../../../config/default.toml', import.meta.url));
}

const PLACEHOLDER = /\$(AENV_HOME|AENV_RUNTIME)(?![A-Za-z0-9_])/g;
const OTHER_VARIABLE = /\$\{?[A-Za-z_][A-Za-z0-9_]*/;

interface PathContext {
  configDir: string;
  sourceOf: (key: string) => ValueSource | undefined;
  issues: ConfigIssue[];
  warnings: string[];
}

/**
 * Resolves every path key in place (docs/configuration.md, extended):
 *  - `home_path`: relative → against the config file's directory; may not use placeholders.
 *  - `runtime_path`: may use `$AENV_HOME`.
 *  - every other path key: `$AENV_HOME` and `$AENV_RUNTIME` are replaced (the reference honours
 *    `$AENV_RUNTIME` only in `ublk.daemon_socket_path`; aenv honours it everywhere), then relative
 *    paths resolve against the config file's directory.
 *  - `runtime.criu_path` / `runtime.tools_dir`: empty → derived from `deps_path`.
 */
export function resolvePaths(
  config: Record<string, unknown>,
  fields: readonly FieldEntry[],
  configDir: string,
  sourceOf: (key: string) => ValueSource | undefined,
): { issues: ConfigIssue[]; warnings: string[] } {
  const ctx: PathContext = { configDir, sourceOf, issues: [], warnings: [] };
  const vars: Record<string, string> = {};

  const home = resolveOne(ctx, 'home_path', config.home_path as string, vars);
  config.home_path = home;
  vars.AENV_HOME = home;
  const runtime = resolveOne(ctx, 'runtime_path', config.runtime_path as string, vars);
  config.runtime_path = runtime;
  vars.AENV_RUNTIME = runtime;

  for (const f of fields) {
    if (!f.field.pathKind || f.key === 'home_path' || f.key === 'runtime_path') continue;
    const value = getIn(config, f.path);
    if (typeof value !== 'string') continue;
    if (f.field.pathKind === 'command' && !value.includes('/')) continue;
    if (value === '') {
      if (f.field.default === '') continue; // derived below
      if (f.field.default === undefined) setIn(config, f.path, undefined);
      else ctx.issues.push(issue(f.key, value, 'must not be empty', sourceOf(f.key)));
      continue;
    }
    setIn(config, f.path, resolveOne(ctx, f.key, value, vars));
  }

  const runtimeSection = config.runtime as Record<string, unknown>;
  const deps = config.deps_path as string;
  if (runtimeSection.criu_path === '')
    runtimeSection.criu_path = join(deps, 'criu', 'current', 'bin', 'criu');
  if (runtimeSection.tools_dir === '') runtimeSection.tools_dir = join(deps, 'tools');
  return { issues: ctx.issues, warnings: ctx.warnings };
}

function resolveOne(ctx: PathContext, key: string, value: string, vars: Record<string, string>): string {
  if (value.trim() === '') {
    ctx.issues.push(issue(key, value, 'must not be empty', ctx.sourceOf(key)));
    return value;
  }
  let unavailable: string | undefined;
  const expanded = value.replace(PLACEHOLDER, (match, name: string) => {
    const replacement = vars[name];
    if (replacement === undefined) {
      unavailable ??= match;
      return match;
    }
    return replacement;
  });
  if (unavailable) {
    const rule =
      key === 'home_path'
        ? 'home_path cannot use placeholders (it defines $AENV_HOME)'
        : `${unavailable} is not available here (runtime_path may use only $AENV_HOME)`;
    ctx.issues.push(issue(key, value, rule, ctx.sourceOf(key)));
    return value;
  }
  const other = OTHER_VARIABLE.exec(expanded);
  if (other) {
    ctx.warnings.push(
      `${key} = ${JSON.stringify(value)}: "${other[0]}" is not a placeholder (only $AENV_HOME and $AENV_RUNTIME are) and is used literally`,
    );
  }
  return isAbsolute(expanded) ? resolve(expanded) : resolve(ctx.configDir, expanded);
}

/**
 * The path with symlinks resolved as far as it exists: the deepest existing ancestor is
 * canonicalised and the rest appended. Lets two spellings of one future file be compared.
 */
export function canonicalPath(p: string): string {
  const abs = resolve(p);
  let existing = abs;
  const rest: string[] = [];
  while (!existsSync(existing)) {
    const parent = dirname(existing);
    if (parent === existing) break;
    rest.unshift(basename(existing));
    existing = parent;
  }
  let real = existing;
  try {
    real = realpathSync(existing);
  } catch {
    // An unreadable ancestor: compare lexically.
  }
  return join(real, ...rest);
}
