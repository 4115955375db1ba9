// Regenerates docs/cli.md from the command tree.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildProgram } from '../src/program.js';
import { renderCliDoc } from '../src/docs/render-cli-doc.js';

writeFileSync(fileURLToPath(new URL('../../../docs/cli.md', import.meta.url)), renderCliDoc(buildProgram()));
console.log('wrote docs/cli.md');
