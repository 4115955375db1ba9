import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureToolsDir, type ToolsDir } from '@aenv/node';

const PKG = fileURLToPath(new URL('../..', import.meta.url));

/** Bundles envd from the current sources and builds a tools dir under depsPath (as the server would). */
export async function buildTestTools(depsPath: string): Promise<ToolsDir> {
  const bundle = join(depsPath, 'envd.cjs');
  execFileSync(process.execPath, [join(PKG, 'scripts', 'bundle.mjs'), '--out', bundle], { stdio: 'pipe' });
  return ensureToolsDir({ depsPath, bundlePath: bundle });
}
