import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parse as parseToml, TomlError } from 'smol-toml';
import { ConfigError, issue, type ConfigIssue, type ValueSource } from './errors.js';
import { defaultsLayer, envLayer, fileLayer, flagsLayer, type ConfigFlags, type Layer } from './layers.js';
import { normalizeConfig } from './normalize.js';
import { defaultConfigPath, resolvePaths } from './paths.js';
import { CONFIG_SCHEMA } from './schema.js';
import type { AenvConfig, MutableConfig } from './types.js';
import { validateConfig } from './validate.js';
import { listFields, setIn, type FieldEntry } from './walk.js';

export interface LoadConfigOptions {
  /** The TOML file (same as `flags.config`, which wins when both are given). */
  configPath?: string;
  /** Environment to read overrides from; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  flags?: ConfigFlags;
}

export interface LoadedConfig {
  config: AenvConfig;
  /** Non-fatal findings for the server to log once (unknown keys, replaced values, ...). */
  warnings: string[];
  /** Absolute path of the file that was read. */
  configPath: string;
  /** Where each key's value came from (keys without a value are absent). */
  sources: ReadonlyMap<string, ValueSource>;
  /**
   * Keys set to something other than their default that have no effect with the container
   * driver (microVM-only sections and a few single keys). For a one-time log line.
   */
  keysWithoutEffectInContainerMode: readonly string[];
}

export const CONFIG_FIELDS: readonly FieldEntry[] = listFields(CONFIG_SCHEMA);

/**
 * Loads the node configuration: built-in defaults < TOML file < environment < CLI flags,
 * then normalises, resolves paths, validates and deep-freezes it.
 * Throws ConfigError naming every bad key, value and rule.
 */
export function loadConfig(opts: LoadConfigOptions = {}): LoadedConfig {
  const env = opts.env ?? process.env;
  const flags = opts.flags ?? {};
  const { path: configPath, source: pathSource } = chooseConfigPath(opts, env);
  const warnings: string[] = [];
  const issues: ConfigIssue[] = [];

  const doc = readTomlFile(configPath, pathSource);
  const file = fileLayer(doc, CONFIG_SCHEMA, configPath);
  warnings.push(...file.warnings);
  issues.push(...file.issues);
  const fromFlags = flagsLayer(flags, CONFIG_FIELDS);
  issues.push(...fromFlags.issues);

  const merged: Layer = new Map();
  for (const layer of [
    defaultsLayer(CONFIG_FIELDS),
    file.layer,
    envLayer(env, CONFIG_FIELDS),
    fromFlags.layer,
  ]) {
    for (const [k, v] of layer) merged.set(k, v);
  }
  const sources = new Map([...merged].map(([k, v]) => [k, v.source]));
  const sourceOf = (key: string) => sources.get(key.replace(/\[\d+\]$/, ''));

  const raw: Record<string, unknown> = {};
  for (const f of CONFIG_FIELDS) {
    const entry = merged.get(f.key);
    const value = entry === undefined ? undefined : checkField(f, entry.value, entry.source, issues);
    setIn(raw, f.path, value);
  }
  if (issues.length > 0) throw new ConfigError(issues);

  const config = raw as MutableConfig;
  const normalized = normalizeConfig(config, sourceOf);
  warnings.push(...normalized.warnings);
  issues.push(...normalized.issues);
  const paths = resolvePaths(raw, CONFIG_FIELDS, dirname(configPath), sourceOf);
  warnings.push(...paths.warnings);
  issues.push(...paths.issues);
  if (issues.length > 0) throw new ConfigError(issues);

  issues.push(...validateConfig(config, sourceOf));
  if (issues.length > 0) throw new ConfigError(issues);

  return {
    config: deepFreeze(config) as AenvConfig,
    warnings,
    configPath,
    sources,
    keysWithoutEffectInContainerMode: keysWithoutEffect(merged),
  };
}

/** `--config` / `configPath` > `AENV_CONFIG_PATH` (trimmed, non-empty) > `<repo>/config/default.toml`. */
function chooseConfigPath(opts: LoadConfigOptions, env: NodeJS.ProcessEnv): { path: string; source: string } {
  const explicit = opts.flags?.config ?? opts.configPath;
  if (explicit !== undefined) {
    if (explicit.trim() === '') throw new ConfigError([issue('--config', explicit, 'must not be empty')]);
    return { path: resolve(explicit.trim()), source: 'flag --config' };
  }
  const fromEnv = env.AENV_CONFIG_PATH?.trim();
  if (fromEnv) return { path: resolve(fromEnv), source: 'env AENV_CONFIG_PATH' };
  return { path: defaultConfigPath(), source: 'the built-in default path' };
}

function readTomlFile(path: string, chosenBy: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT' ? 'does not exist' : code === 'EISDIR' ? 'is a directory' : (e as Error).message;
    throw new ConfigError([issue('config file', path, `${why} (chosen by ${chosenBy})`)]);
  }
  try {
    return parseToml(text) as Record<string, unknown>;
  } catch (e) {
    const detail =
      e instanceof TomlError
        ? `${e.message.split('\n')[0]!.replace(/^Invalid TOML document: /, '')} at line ${e.line}, column ${e.column}`
        : String(e);
    throw new ConfigError([issue('config file', path, `is not valid TOML: ${detail}`)]);
  }
}

/** Trims and type-checks one value with the key's zod schema; records problems in `issues`. */
function checkField(f: FieldEntry, value: unknown, source: ValueSource, issues: ConfigIssue[]): unknown {
  let v = value;
  if (f.field.trim && typeof v === 'string') {
    v = v.trim();
    if (v === '' && f.field.default === undefined) return undefined;
  }
  const result = f.field.schema.safeParse(v);
  if (result.success) return result.data;
  const shown = (x: unknown) => (f.field.secret ? '<redacted>' : x);
  for (const zi of result.error.issues) {
    const index = zi.path.find((p) => typeof p === 'number');
    if (index !== undefined && Array.isArray(v)) {
      issues.push(issue(`${f.key}[${index}]`, shown(v[index]), zi.message, source));
    } else {
      issues.push(issue(f.key, shown(v), zi.message, source));
    }
  }
  return undefined;
}

function keysWithoutEffect(merged: Layer): string[] {
  const out: string[] = [];
  for (const f of CONFIG_FIELDS) {
    if (!f.microvmOnly && f.field.container !== false) continue;
    const entry = merged.get(f.key);
    if (!entry || entry.source.kind === 'default') continue;
    const same = (x: unknown) => x !== undefined && JSON.stringify(x) === JSON.stringify(entry.value);
    if (same(f.field.default) || same(f.field.shipped)) continue;
    out.push(f.key);
  }
  return out;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
