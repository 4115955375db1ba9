import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { acquireFlock, FlockError, type HeldFlock } from './flock.js';

/**
 * One server per `home_path`: a second one would take the first one's sandboxes, slots and mounts for a
 * crash's leftovers and remove them at startup. The lock is a flock, so a killed server never leaves it held.
 */
export async function lockHome(homePath: string): Promise<HeldFlock> {
  const pidFile = join(homePath, 'server.pid');
  let held: HeldFlock;
  try {
    held = await acquireFlock(join(homePath, 'server.lock'), 'exclusive', 1);
  } catch (err) {
    if (!(err instanceof FlockError) || !/timed out/.test(err.message)) throw err;
    let holder = '';
    try {
      holder = ` (pid ${readFileSync(pidFile, 'utf8').trim()})`;
    } catch {
      // no pid file: the holder is still starting
    }
    throw new Error(
      `another aenv server${holder} is running with home_path ${homePath}; stop it first, or give this one its own home_path, runtime_path, resource_prefix and network CIDRs`,
    );
  }
  writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o644 });
  return held;
}
