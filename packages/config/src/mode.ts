import { ConfigError, issue } from './errors.js';
import type { AenvConfig } from './types.js';

/** Sections that only concern the microVM drivers (kvm/pvm); they have no effect in container mode. */
export const MICROVM_ONLY_SECTIONS = [
  'firecracker',
  'kernel',
  'ublk',
  'overlaybd',
  'memory_snapshot',
  'pool.block',
  'pool.firecracker',
  'machine.disk_rate_limit',
  'image.cache.remote_blocks',
  'p2p',
] as const;

/**
 * Called by the server at startup: configuration loading accepts kvm and pvm (so that files
 * written for the reference load), but this build only has the container driver.
 */
export function assertSupportedVirtualizationMode(config: Pick<AenvConfig, 'virtualization_mode'>): void {
  const mode = config.virtualization_mode;
  if (mode === 'container') return;
  throw new ConfigError([
    issue(
      'virtualization_mode',
      mode,
      'this build has no microVM driver yet; set virtualization_mode = "container" (or AENV_VIRTUALIZATION_MODE=container)',
    ),
  ]);
}

/**
 * One log line for container mode saying which configured microVM settings are ignored, or
 * undefined when there is nothing to say. `keys` is LoadedConfig.keysWithoutEffectInContainerMode.
 */
export function containerModeNotice(
  config: Pick<AenvConfig, 'virtualization_mode'>,
  keys: readonly string[],
): string | undefined {
  if (config.virtualization_mode !== 'container' || keys.length === 0) return undefined;
  return `virtualization_mode = "container": these settings only apply to the microVM drivers and are ignored: ${keys.join(', ')}`;
}
