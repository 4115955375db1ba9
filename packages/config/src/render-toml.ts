import { stringify } from 'smol-toml';
import type { FieldSpec } from './field.js';
import { CONFIG_SCHEMA } from './schema.js';
import { listSections } from './walk.js';

const HEADER = `# aenv node configuration: every key with its default value.
#
# Generated from packages/config/src/schema.ts by \`npm run -w @aenv/config gen:docs\`; edit the
# schema, not this file. To change settings, copy this file and point --config or
# AENV_CONFIG_PATH at the copy; see docs/configuration.md for every key and environment variable.
#
# Precedence: CLI flag > environment variable > this file > built-in default.
# Paths: "$AENV_HOME" (home_path) and "$AENV_RUNTIME" (runtime_path) may start any path; relative
# paths resolve against the directory of this file.
# Comments starting with "aenv:" mark aenv additions to the AgentENV reference configuration.
# Sections marked "microVM only" have no effect with virtualization_mode = "container".
`;

/** The text of config/default.toml. */
export function renderDefaultToml(): string {
  const out: string[] = [HEADER.trimEnd()];
  for (const s of listSections(CONFIG_SCHEMA)) {
    const fields = Object.entries(s.section.entries).filter(
      (e): e is [string, FieldSpec] => e[1].kind === 'field',
    );
    if (fields.length === 0) continue;
    out.push('');
    if (s.key !== '') {
      const tags = [s.section.aenv ? 'aenv:' : '', s.section.microvmOnly ? '(microVM only)' : '']
        .filter(Boolean)
        .join(' ');
      out.push(`# ${tags ? `${tags} ` : ''}${s.section.doc}`);
      out.push(`[${s.key}]`);
    }
    for (const [name, field] of fields) {
      out.push(`# ${field.aenv ? 'aenv: ' : ''}${field.doc}`);
      out.push(renderKeyLine(name, field));
    }
  }
  return `${out.join('\n')}\n`;
}

function renderKeyLine(name: string, field: FieldSpec): string {
  const value = field.shipped ?? field.default ?? field.example;
  if (value === undefined) throw new Error(`schema key ${name} needs a default or an example`);
  const line = stringify({ [name]: value }).trimEnd();
  const commented = field.commented || (field.default === undefined && field.shipped === undefined);
  return commented ? `# ${line}` : line;
}
