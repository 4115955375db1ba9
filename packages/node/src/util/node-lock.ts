import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { acquireFlock, FlockError, type HeldFlock } from './flock.js';

/**
 * One server per `home_path` and per `runtime_path`: a second one would take the first one's sandboxes, slots
 * and mounts for a crash's leftovers and remove them at startup. The locks are flocks, so a killed server never
 * leaves them held.
 */
export async function lockNodeDirs(dirs: { home_path: string; runtime_path: string }): Promise<HeldFlock> {
  const held: HeldFlock[] = [];
  const release = async () => {
    for (const h of held.reverse()) await h.release();
  };
  try {
    for (const [dir, key] of new Map([
      [resolve(dirs.home_path), 'home_path'],
      [resolve(dirs.runtime_path), 'runtime_path'],
    ]).entries()) {
      held.push(await lockDir(dir, key));
    }
  } catch (err) {
    await release();
    throw err;
  }
  return { release };
}

const RELEASE_GRACE_MS = 3000;

async function lockDir(dir: string, key: string): Promise<HeldFlock> {
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  const pidFile = join(dir, 'server.pid');
  let held: HeldFlock;
  try {
    // A holder killed a moment ago lets go within milliseconds (its flock child sees its pipe close).
    held = await acquireFlock(join(dir, 'server.lock'), 'exclusive', RELEASE_GRACE_MS);
  } catch (err) {
    if (!(err instanceof FlockError) || !/timed out/.test(err.message)) throw err;
    let holder = '';
    try {
      holder = ` (pid ${readFileSync(pidFile, 'utf8').trim()})`;
    } catch {
      // no pid file: the holder is still starting
    }
    throw new Error(
      `another aenv server${holder} is running with ${key} ${dir}; stop it first, or give this one its own home_path, runtime_path, resource_prefix and network CIDRs`,
    );
  }
  writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o600 });
  return held;
}
