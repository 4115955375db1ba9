// The host helper behind per-sandbox uid ranges (native/aenv-idmap.c): idmapped views of the image layers
// and ownership shifts of disks that move from one range to another. Built with the host gcc (which the tools
// dir already needs) into the runtime dir, once per source version.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { run } from '../../../util/exec.js';
import { buildNativeHelper } from '../../../util/native-helper.js';
import type { IdRange } from '../../driver.js';
import { RuntimeError } from '../../driver.js';

// packages/node/native, from src/ or dist/runtime/drivers/container.
const SOURCE = join(dirname(fileURLToPath(import.meta.url)), '../../../../native/aenv-idmap.c');

/** Compiles the helper into `dir` unless this source version is there already; returns its path. */
export async function buildIdmapHelper(dir: string): Promise<string> {
  try {
    return await buildNativeHelper(SOURCE, dir, 'aenv-idmap');
  } catch (e) {
    throw new RuntimeError(
      'HostSetup',
      `cannot build the uid mapping helper from ${SOURCE} with gcc: ${(e as Error).message}`,
    );
  }
}

/**
 * argv that mounts an idmapped, read-only, nosuid, nodev view of each `layers[i]` at `mountPoints[i]`, in
 * which files owned by `from` + n appear owned by `to` + n (`writable`: read-write, for volumes). Meant as a prefix: the helper runs whatever
 * follows `--` afterwards (the sandbox's other mounts), so it costs no extra process.
 */
export function idmappedMountArgv(
  helper: string,
  from: IdRange,
  to: IdRange,
  layers: readonly string[],
  mountPoints: readonly string[],
  opts: { writable?: boolean } = {},
): string[] {
  const pairs = layers.flatMap((l, i) => [l, mountPoints[i] as string]);
  const cmd = opts.writable ? 'mount-rw' : 'mount';
  return [helper, cmd, String(from.hostStart), String(to.hostStart), String(to.size), ...pairs, '--'];
}

/**
 * Moves the ownership of `dir` (a disk another range wrote) into `to`: ids of `from` move with it (`from`
 * undefined: not known), ids of other ranges in `span` become `to`'s overflow id, others stay. Setuid bits,
 * file capabilities and ACLs survive.
 */
export async function shiftOwnership(
  helper: string,
  dir: string,
  from: IdRange | undefined,
  to: IdRange,
  span: { start: number; end: number },
): Promise<void> {
  await run(helper, [
    'shift',
    from ? String(from.hostStart) : '-',
    String(to.hostStart),
    String(to.size),
    String(span.start),
    String(span.end),
    dir,
  ]);
}
