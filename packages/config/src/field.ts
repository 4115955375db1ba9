import { z } from 'zod';

/** The shape of a value as it appears in TOML and as it is parsed from an environment variable. */
export type ValueKind = 'string' | 'integer' | 'number' | 'boolean' | 'string[]';

/**
 * One configuration key. `T` is the validated value type; `Opt` is true when the key has no
 * built-in default (the value may then be `undefined` = "unset").
 */
export interface FieldSpec<T = unknown, Opt extends boolean = boolean> {
  readonly kind: 'field';
  readonly valueKind: ValueKind;
  /** Validates a present value (type + per-key rules). Cross-key rules live in validate.ts. */
  readonly schema: z.ZodType<T>;
  /** Human description of the accepted values, for docs. */
  readonly typeLabel: string;
  /** Built-in default; `undefined` = unset. */
  readonly default: T | undefined;
  /** Value written (uncommented) in config/default.toml when it differs from the built-in default. */
  readonly shipped?: T;
  /** One line: what the key does. */
  readonly doc: string;
  /** Environment variable that overrides the file. */
  readonly env?: string;
  /** A blank environment variable means "not set" unless this is true (then it is validated as given). */
  readonly envBlankIsValue?: boolean;
  /** Surrounding whitespace is removed from string values; a blank result means unset. */
  readonly trim?: boolean;
  /** Written commented out in config/default.toml (as the reference does). */
  readonly commented?: boolean;
  /** Value shown (commented out) in config/default.toml for a key that is unset by default. */
  readonly example?: T;
  /** Not in the reference: an aenv addition. */
  readonly aenv?: boolean;
  /** Path handling: `path` = placeholders + relative-to-config-dir; `command` = same when it contains a '/'. */
  readonly pathKind?: 'path' | 'command';
  /** Other spellings accepted in the file (the reference accepts a few camelCase/kebab-case aliases). */
  readonly aliases?: readonly string[];
  /** Never logged or rendered. */
  readonly secret?: boolean;
  /** false = has no effect with the container driver even though its section does. */
  readonly container?: boolean;
  /** Phantom marker used only for type inference. */
  readonly optional?: Opt;
}

export interface SectionSpec<E extends Entries = Entries> {
  readonly kind: 'section';
  readonly doc: string;
  /** The whole section only concerns the microVM drivers (kvm/pvm). */
  readonly microvmOnly?: boolean;
  readonly aenv?: boolean;
  readonly entries: E;
}

export type Entry = FieldSpec | SectionSpec;
export type Entries = { readonly [key: string]: Entry };

/** The plain (mutable) value type described by a section's entries. */
export type InferEntries<E extends Entries> = {
  -readonly [K in keyof E]: E[K] extends FieldSpec<infer T, infer O>
    ? O extends true
      ? T | undefined
      : T
    : E[K] extends SectionSpec<infer S>
      ? InferEntries<S>
      : never;
};

export type DeepReadonly<T> = T extends readonly (infer U)[]
  ? readonly DeepReadonly<U>[]
  : T extends object
    ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
    : T;

interface CommonOptions {
  doc: string;
  example?: unknown;
  env?: string;
  envBlankIsValue?: boolean;
  commented?: boolean;
  aenv?: boolean;
  aliases?: readonly string[];
  secret?: boolean;
  container?: boolean;
}

type Opt<O> = O extends { default: unknown } ? false : true;

function make<T, O extends CommonOptions & { default?: T; shipped?: T }>(
  valueKind: ValueKind,
  schema: z.ZodType<T>,
  typeLabel: string,
  o: O,
  extra: Partial<FieldSpec<T>> = {},
): FieldSpec<T, Opt<O>> {
  return { kind: 'field', valueKind, schema, typeLabel, ...o, default: o.default, ...extra } as FieldSpec<
    T,
    Opt<O>
  >;
}

export function section<E extends Entries>(
  doc: string,
  entries: E,
  opts: { microvmOnly?: boolean; aenv?: boolean } = {},
): SectionSpec<E> {
  return { kind: 'section', doc, entries, ...opts };
}

interface StringOptions extends CommonOptions {
  default?: string;
  shipped?: string;
  trim?: boolean;
  /** Extra rule on the (trimmed) value. */
  check?: { test: (v: string) => boolean; rule: string; label?: string };
}

function stringSchema(o: StringOptions): z.ZodType<string> {
  const base = z.string({ error: 'expected a string' });
  return o.check ? base.refine(o.check.test, { error: o.check.rule }) : base;
}

export function str<O extends StringOptions>(o: O): FieldSpec<string, Opt<O>> {
  return make('string', stringSchema(o), o.check?.label ?? 'string', o, { trim: o.trim });
}

/** A filesystem path: `$AENV_HOME` / `$AENV_RUNTIME` placeholders, relative to the config file's directory. */
export function path<O extends CommonOptions & { default?: string; shipped?: string }>(
  o: O,
): FieldSpec<string, Opt<O>> {
  return make('string', z.string({ error: 'expected a string (a path)' }), 'path', o, { pathKind: 'path' });
}

/** A program: a bare name is looked up in PATH; a value containing '/' is a path. */
export function command<O extends CommonOptions & { default?: string }>(o: O): FieldSpec<string, Opt<O>> {
  const schema = z
    .string({ error: 'expected a string (a program name or path)' })
    .refine((v) => v.trim() !== '', { error: 'must not be empty' });
  return make('string', schema, 'program name or path', o, { pathKind: 'command' });
}

interface IntOptions extends CommonOptions {
  default?: number;
  shipped?: number;
  min?: number;
  max?: number;
}

export function int<O extends IntOptions>(o: O): FieldSpec<number, Opt<O>> {
  let schema = z.number({ error: 'expected an integer' }).int({ error: 'expected an integer' });
  if (o.min !== undefined) schema = schema.min(o.min, { error: `must be >= ${o.min}` });
  if (o.max !== undefined) schema = schema.max(o.max, { error: `must be <= ${o.max}` });
  return make('integer', schema, rangeLabel('integer', o.min, o.max), o);
}

interface NumberOptions extends CommonOptions {
  default?: number;
  shipped?: number;
}

export function num<O extends NumberOptions>(o: O): FieldSpec<number, Opt<O>> {
  return make('number', z.number({ error: 'expected a finite number' }), 'number', o);
}

export function bool<O extends CommonOptions & { default?: boolean }>(o: O): FieldSpec<boolean, Opt<O>> {
  return make('boolean', z.boolean({ error: 'expected a boolean (true or false)' }), 'boolean', o);
}

export function oneOf<
  const V extends readonly [string, ...string[]],
  O extends CommonOptions & { default?: V[number] },
>(values: V, o: O): FieldSpec<V[number], Opt<O>> {
  const rule = `must be one of ${values.map((v) => JSON.stringify(v)).join(', ')}`;
  const schema = z.enum(values as unknown as [V[number], ...V[number][]], { error: rule });
  return make('string', schema, values.map((v) => `"${v}"`).join(' | '), o, { trim: true }) as FieldSpec<
    V[number],
    Opt<O>
  >;
}

export function strList<O extends CommonOptions & { default?: string[]; shipped?: string[] }>(
  o: O,
): FieldSpec<string[], Opt<O>> {
  const schema = z.array(z.string({ error: 'expected a string' }), { error: 'expected an array of strings' });
  return make('string[]', schema, 'array of strings', o);
}

function rangeLabel(kind: string, min?: number, max?: number): string {
  if (min !== undefined && max !== undefined) return `${kind} ${min}..${max}`;
  if (min !== undefined) return `${kind} >= ${min}`;
  if (max !== undefined) return `${kind} <= ${max}`;
  return kind;
}
