// The node's small C helpers (packages/node/native/*.c) are compiled with the host's gcc at startup into a
// private dir, once per source version: the file name carries a hash of the source.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from './exec.js';

/**
 * Compiles `source` into `dir/<name>-<hash>` unless that is there already; returns its path. `libs`: linker
 * arguments (`-lnftables`). Throws when the source cannot be read or gcc fails (callers say what the helper was for).
 */
export async function buildNativeHelper(
  source: string,
  dir: string,
  name: string,
  gcc = 'gcc',
  libs: readonly string[] = [],
): Promise<string> {
  const text = await readFile(source);
  const hash = createHash('sha256').update(text).digest('hex').slice(0, 16);
  const bin = join(dir, `${name}-${hash}`);
  if (existsSync(bin)) return bin;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = `${bin}.tmp-${process.pid}`;
  try {
    await run(gcc, ['-O2', '-Wall', '-o', tmp, source, ...libs]);
    await rename(tmp, bin);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  return bin;
}
