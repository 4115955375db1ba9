import { mkdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AenvConfig } from '@aenv/config';
import { MASKED_EMPTY_DIR } from '../runtime/drivers/container/container-driver.js';
import { enforceNodeDirModes } from '../util/node-modes.js';
import { lockNodeDirs } from '../util/node-lock.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';

/** CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21) are what netns, nftables, mounts and the runtime driver need. */
async function missingCapabilities(): Promise<string[]> {
  const status = await readFile('/proc/self/status', 'utf8');
  const eff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)/m.exec(status)?.[1] ?? '0'}`);
  const missing: string[] = [];
  if (!(eff & (1n << 12n))) missing.push('CAP_NET_ADMIN');
  if (!(eff & (1n << 21n))) missing.push('CAP_SYS_ADMIN');
  return missing;
}

/**
 * The node's hold on its host: the capabilities it needs, its dirs (private, locked against a second node on
 * the same home or runtime dir). Closing it releases the lock.
 */
export async function startNodeHost(
  config: Pick<AenvConfig, 'home_path' | 'runtime_path' | 'deps_path' | 'image'>,
  logger: Logger,
): Promise<Subsystem> {
  const missing = await missingCapabilities();
  if (missing.length) throw new Error(`aenv server needs ${missing.join(' and ')} (run it as root)`);
  // Sandbox uids must traverse $AENV_HOME to their dirs (search only; secrets/ itself is 0700).
  mkdirSync(config.home_path, { recursive: true, mode: 0o711 });
  const nodeLock = await lockNodeDirs(config);
  const changedModes = await enforceNodeDirModes({
    home: config.home_path,
    runtime: config.runtime_path,
    deps: config.deps_path,
    sandboxes: join(config.home_path, 'sandboxes'),
    contentRoots: [config.image.cache.root_dir, join(config.home_path, 'template-work')],
    driverOwned: [join(config.home_path, MASKED_EMPTY_DIR)],
  });
  if (changedModes)
    logger.info({ changed: changedModes }, 'made node files private (0700 dirs, owner-only files)');
  return { close: () => nodeLock.release() };
}

/** The commit of the checkout the node runs from, for its identity (`unknown` outside a git checkout). */
export async function gitCommit(repoRoot: string): Promise<string> {
  try {
    const head = (await readFile(join(repoRoot, '.git', 'HEAD'), 'utf8')).trim();
    if (!head.startsWith('ref: ')) return head.slice(0, 12);
    return (await readFile(join(repoRoot, '.git', head.slice(5)), 'utf8')).trim().slice(0, 12);
  } catch {
    return 'unknown';
  }
}
