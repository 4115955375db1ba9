import type { Entries, FieldSpec, SectionSpec } from './field.js';

export interface FieldEntry {
  /** Dotted key path, e.g. "image.cache.gc.interval_secs". */
  readonly key: string;
  readonly path: readonly string[];
  readonly field: FieldSpec;
  /** The innermost section holding the key ("" for top-level keys). */
  readonly section: string;
  /** True when the key or one of its enclosing sections concerns only the microVM drivers. */
  readonly microvmOnly: boolean;
}

export interface SectionEntry {
  readonly key: string;
  readonly path: readonly string[];
  readonly section: SectionSpec;
  readonly microvmOnly: boolean;
}

/** Every key of the schema, depth-first in declaration order (a section's own keys before its subsections). */
export function listFields(root: SectionSpec): FieldEntry[] {
  const out: FieldEntry[] = [];
  for (const s of listSections(root)) {
    for (const [name, entry] of Object.entries(s.section.entries)) {
      if (entry.kind !== 'field') continue;
      const path = [...s.path, name];
      out.push({ key: path.join('.'), path, field: entry, section: s.key, microvmOnly: s.microvmOnly });
    }
  }
  return out;
}

/** The root (key "") and every nested section, depth-first in declaration order. */
export function listSections(root: SectionSpec): SectionEntry[] {
  const out: SectionEntry[] = [];
  const visit = (s: SectionSpec, path: string[], microvm: boolean) => {
    const microvmOnly = microvm || Boolean(s.microvmOnly);
    out.push({ key: path.join('.'), path, section: s, microvmOnly });
    for (const [name, entry] of Object.entries(s.entries as Entries)) {
      if (entry.kind === 'section') visit(entry, [...path, name], microvmOnly);
    }
  };
  visit(root, [], false);
  return out;
}

export function getIn(obj: unknown, path: readonly string[]): unknown {
  let cur = obj;
  for (const p of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[p];
  }
  return cur;
}

export function setIn(obj: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let cur = obj;
  for (const p of path.slice(0, -1)) {
    const next = cur[p];
    if (next === null || typeof next !== 'object') cur[p] = {};
    cur = cur[p] as Record<string, unknown>;
  }
  cur[path[path.length - 1]!] = value;
}
