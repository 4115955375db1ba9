import { readFileSync } from 'node:fs';

/** This package's version (dist/version.js sits one level under package.json). */
export const VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
