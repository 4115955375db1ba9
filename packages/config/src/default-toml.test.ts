import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'smol-toml';
import { describe, expect, it } from 'vitest';
import { CONFIG_FIELDS, loadConfig } from './load.js';
import { MICROVM_ONLY_SECTIONS } from './mode.js';
import { renderConfigurationDoc } from './render-docs.js';
import { renderDefaultToml } from './render-toml.js';
import { CONFIG_SCHEMA } from './schema.js';
import { getIn, listSections } from './walk.js';

const repoFile = (p: string) => fileURLToPath(new URL(`../../../${p}`, import.meta.url));
const tomlText = readFileSync(repoFile('config/default.toml'), 'utf8');
const docText = readFileSync(repoFile('docs/configuration.md'), 'utf8');

interface TomlLine {
  key: string;
  commented: boolean;
  valueText: string;
  comment: string;
}

/** Every `key = value` line of the file, commented or not, keyed by full path, with the comment line above it. */
function scanKeyLines(text: string): Map<string, TomlLine> {
  const out = new Map<string, TomlLine>();
  let section = '';
  let previous = '';
  for (const line of text.split('\n')) {
    const header = /^#?\s*\[([A-Za-z0-9_.-]+)\]\s*$/.exec(line);
    const kv = /^(#\s*)?([A-Za-z0-9_-]+)\s*=\s*(.+)$/.exec(line);
    if (header) section = header[1]!;
    else if (kv) {
      const key = section ? `${section}.${kv[2]}` : kv[2]!;
      if (out.has(key)) throw new Error(`${key} listed twice in default.toml`);
      out.set(key, { key, commented: Boolean(kv[1]), valueText: kv[3]!, comment: previous });
    }
    previous = line;
  }
  return out;
}

describe('config/default.toml', () => {
  const lines = scanKeyLines(tomlText);
  const doc = parse(tomlText);

  it('loads with no warnings, in container mode', () => {
    const r = loadConfig({ env: {} });
    expect(r.warnings).toEqual([]);
    expect(doc.virtualization_mode).toBe('container');
    expect(r.config.virtualization_mode).toBe('container');
  });

  it('lists every key of the schema, with its default', () => {
    for (const f of CONFIG_FIELDS) {
      const line = lines.get(f.key);
      expect(line, `${f.key} missing from default.toml`).toBeDefined();
      const written = parse(`v = ${line!.valueText}`).v;
      expect(getIn(doc, f.path), `${f.key} active iff not commented`).toEqual(
        line!.commented ? undefined : written,
      );
      const expected = f.field.shipped ?? f.field.default ?? f.field.example;
      expect(written, `${f.key} value`).toEqual(expected);
      if (f.field.default === undefined && f.field.shipped === undefined)
        expect(line!.commented, f.key).toBe(true);
      expect(line!.comment.startsWith('# '), `${f.key} has a comment line`).toBe(true);
      expect(line!.comment.startsWith('# aenv:'), `${f.key} marked aenv iff an aenv addition`).toBe(
        Boolean(f.field.aenv),
      );
    }
  });

  it('has no key, commented or not, that the schema does not know', () => {
    const known = new Set(CONFIG_FIELDS.map((f) => f.key));
    expect([...lines.keys()].filter((k) => !known.has(k))).toEqual([]);
  });

  it('is what the generator writes (npm run -w @aenv/config gen:docs)', () => {
    expect(tomlText).toBe(renderDefaultToml());
  });
});

describe('docs/configuration.md', () => {
  it('is what the generator writes (npm run -w @aenv/config gen:docs)', () => {
    expect(docText).toBe(renderConfigurationDoc());
  });

  it('documents every key and environment variable', () => {
    for (const s of listSections(CONFIG_SCHEMA)) {
      const names = Object.entries(s.section.entries).filter(([, e]) => e.kind === 'field');
      if (names.length > 0) expect(docText).toContain(s.key === '' ? '### Top level' : `### \`[${s.key}]\``);
    }
    for (const f of CONFIG_FIELDS) {
      expect(docText).toContain(`| \`${f.path[f.path.length - 1]}\` |`);
      if (f.field.env) expect(docText).toContain(`| \`${f.field.env}\` | \`${f.key}\` |`);
    }
  });
});

describe('microVM-only sections', () => {
  it('match the sections flagged in the schema', () => {
    const flagged = listSections(CONFIG_SCHEMA)
      .filter((s) => s.section.microvmOnly)
      .map((s) => s.key);
    expect([...flagged].sort()).toEqual([...MICROVM_ONLY_SECTIONS].sort());
  });
});
