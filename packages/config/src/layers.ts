import { parse as parseToml } from 'smol-toml';
import type { FieldSpec, SectionSpec } from './field.js';
import { issue, type ConfigIssue, type ValueSource } from './errors.js';
import type { FieldEntry } from './walk.js';

/** A value with the place it came from. */
export interface Layered {
  readonly value: unknown;
  readonly source: ValueSource;
}

export type Layer = Map<string, Layered>;

export function defaultsLayer(fields: readonly FieldEntry[]): Layer {
  const out: Layer = new Map();
  for (const f of fields) {
    if (f.field.default !== undefined)
      out.set(f.key, { value: structuredClone(f.field.default), source: { kind: 'default' } });
  }
  return out;
}

/**
 * Maps a parsed TOML document onto the schema. Unknown keys become warnings (typo safety, with a
 * suggestion when a known key is close); a section given a non-table value is an issue.
 */
export function fileLayer(
  doc: Record<string, unknown>,
  root: SectionSpec,
  filePath: string,
): { layer: Layer; warnings: string[]; issues: ConfigIssue[] } {
  const layer: Layer = new Map();
  const warnings: string[] = [];
  const issues: ConfigIssue[] = [];
  const source: ValueSource = { kind: 'file', path: filePath };

  const walk = (table: Record<string, unknown>, section: SectionSpec, prefix: string[]) => {
    for (const [name, value] of Object.entries(table)) {
      const found = lookup(section, name);
      const key = [...prefix, found?.name ?? name].join('.');
      if (!found) {
        const hint = suggest(name, section);
        warnings.push(
          `unknown config key "${[...prefix, name].join('.')}" in ${filePath} (ignored)${hint ? `; did you mean "${hint}"?` : ''}`,
        );
        continue;
      }
      if (found.entry.kind === 'section') {
        if (isTable(value)) walk(value, found.entry, [...prefix, found.name]);
        else issues.push(issue(key, value, 'expected a table (a [section])', source));
        continue;
      }
      if (layer.has(key)) {
        issues.push(
          issue(key, value, `given more than once (aliases: ${aliasList(found.entry, found.name)})`, source),
        );
        continue;
      }
      layer.set(key, { value, source });
    }
  };
  walk(doc, root, []);
  return { layer, warnings, issues };
}

/** Reads overrides from environment variables named in the schema. A blank variable counts as unset. */
export function envLayer(env: NodeJS.ProcessEnv, fields: readonly FieldEntry[]): Layer {
  const layer: Layer = new Map();
  for (const f of fields) {
    const name = f.field.env;
    if (!name) continue;
    const raw = env[name];
    if (raw === undefined) continue;
    if (raw.trim() === '' && !f.field.envBlankIsValue) continue;
    const value = parseTextValue(f.field, raw);
    if (Array.isArray(value) && value.length === 0) continue; // an empty list keeps the file's value
    layer.set(f.key, { value, source: { kind: 'env', name } });
  }
  return layer;
}

/** CLI flags that set one key each; `--set key=value` reaches any key. */
export interface ConfigFlags {
  /** --config <path>: the TOML file to load. */
  config?: string;
  /** --home-path */
  homePath?: string;
  /** --runtime-path */
  runtimePath?: string;
  /** --deps-path */
  depsPath?: string;
  /** --virtualization-mode */
  virtualizationMode?: string;
  /** --api-addr */
  apiAddr?: string;
  /** --log-format */
  logFormat?: string;
  /** --log-level */
  logLevel?: string;
  /** --node-id */
  nodeId?: string;
  /** --set <key>=<value>, repeatable; the value is read like an environment variable (a list may also be a TOML array). */
  set?: readonly string[];
}

/** Named flags → [config key, flag as typed on the command line]. */
export const NAMED_FLAGS: Readonly<
  Record<Exclude<keyof ConfigFlags, 'config' | 'set'>, readonly [string, string]>
> = {
  homePath: ['home_path', '--home-path'],
  runtimePath: ['runtime_path', '--runtime-path'],
  depsPath: ['deps_path', '--deps-path'],
  virtualizationMode: ['virtualization_mode', '--virtualization-mode'],
  apiAddr: ['api_addr', '--api-addr'],
  logFormat: ['log_format', '--log-format'],
  logLevel: ['log_level', '--log-level'],
  nodeId: ['node_identity.node_id', '--node-id'],
};

export function flagsLayer(
  flags: ConfigFlags,
  fields: readonly FieldEntry[],
): { layer: Layer; issues: ConfigIssue[] } {
  const byKey = new Map(fields.map((f) => [f.key, f]));
  const layer: Layer = new Map();
  const issues: ConfigIssue[] = [];
  for (const [prop, [key, flag]] of Object.entries(NAMED_FLAGS)) {
    const raw = flags[prop as keyof typeof NAMED_FLAGS];
    if (raw === undefined) continue;
    const f = byKey.get(key)!;
    layer.set(key, { value: parseTextValue(f.field, raw), source: { kind: 'flag', name: flag } });
  }
  for (const assignment of flags.set ?? []) {
    const eq = assignment.indexOf('=');
    const key = (eq < 0 ? assignment : assignment.slice(0, eq)).trim();
    const source: ValueSource = { kind: 'flag', name: `--set ${key}` };
    if (eq < 0) {
      issues.push(issue(key, assignment, 'expected --set <key>=<value>', source));
      continue;
    }
    const f = byKey.get(key);
    if (!f) {
      issues.push(issue(key, assignment.slice(eq + 1), 'unknown configuration key', source));
      continue;
    }
    layer.set(key, { value: parseTextValue(f.field, assignment.slice(eq + 1)), source });
  }
  return { layer, issues };
}

/**
 * Text (an environment variable or a flag) → the key's value type. Text that does not convert is
 * returned unchanged so that validation reports it with the expected type.
 */
export function parseTextValue(field: FieldSpec, raw: string): unknown {
  const t = raw.trim();
  switch (field.valueKind) {
    case 'string':
      return t;
    case 'integer':
      return /^[+-]?\d+$/.test(t) ? Number(t) : raw;
    case 'number':
      return t !== '' && Number.isFinite(Number(t)) ? Number(t) : raw;
    case 'boolean': {
      const l = t.toLowerCase();
      if (['true', '1', 'yes', 'on'].includes(l)) return true;
      if (['false', '0', 'no', 'off'].includes(l)) return false;
      return raw;
    }
    case 'string[]':
      if (t.startsWith('[')) {
        try {
          return parseToml(`v = ${t}`).v;
        } catch {
          return raw;
        }
      }
      return t
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
  }
}

function lookup(
  section: SectionSpec,
  name: string,
): { name: string; entry: SectionSpec | FieldSpec } | undefined {
  const direct = section.entries[name];
  if (direct) return { name, entry: direct };
  for (const [canonical, entry] of Object.entries(section.entries)) {
    if (entry.kind === 'field' && entry.aliases?.includes(name)) return { name: canonical, entry };
  }
  return undefined;
}

function aliasList(field: FieldSpec, canonical: string): string {
  return [canonical, ...(field.aliases ?? [])].join(', ');
}

function isTable(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

/** The closest known sibling name, if it is plausibly a typo. */
function suggest(name: string, section: SectionSpec): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of Object.keys(section.entries)) {
    const d = editDistance(name.toLowerCase(), candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return bestDistance <= (name.length <= 4 ? 1 : 2) ? best : undefined;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}
