// Regenerates config/default.toml and docs/configuration.md from the schema.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderConfigurationDoc } from '../src/render-docs.js';
import { renderDefaultToml } from '../src/render-toml.js';

const repo = (p: string) => fileURLToPath(new URL(`../../../${p}`, import.meta.url));

writeFileSync(repo('config/default.toml'), renderDefaultToml());
writeFileSync(repo('docs/configuration.md'), renderConfigurationDoc());
console.log('wrote config/default.toml and docs/configuration.md');
