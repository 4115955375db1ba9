import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildProgram } from '../program.js';
import { EXAMPLES } from './examples.js';
import { leafCommands, renderCliDoc, SERVICE_COMMANDS } from './render-cli-doc.js';

const doc = readFileSync(fileURLToPath(new URL('../../../../docs/cli.md', import.meta.url)), 'utf8');

describe('docs/cli.md', () => {
  it('is what the generator writes (npm run -w @aenv/cli gen:docs)', () => {
    expect(doc).toBe(renderCliDoc(buildProgram()));
  });

  it('has an example for every client command, and no example of a command that is gone', () => {
    const paths = leafCommands(buildProgram())
      .map((l) => l.path)
      .filter((p) => !SERVICE_COMMANDS.has(p));
    expect(paths.filter((p) => !EXAMPLES[p])).toEqual([]);
    expect(Object.keys(EXAMPLES).filter((p) => !paths.includes(p))).toEqual([]);
  });
});
