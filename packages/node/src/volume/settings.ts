import { ConfigError, type AenvConfig } from '@aenv/config';
import type { VolumeSettings } from './service.js';

/** `[volume]`, refusing what is not implemented (a shared directory for a cluster: docs/volumes.md). */
export function volumeSettings(config: AenvConfig): VolumeSettings {
  const v = config.volume;
  if (v.storage !== 'node') {
    throw new ConfigError([
      {
        key: 'volume.storage',
        value: v.storage,
        hasValue: true,
        rule: 'only "node" is implemented (volumes on this node\'s CoW volume; a sandbox mounting one runs on its node); a shared directory is not yet (docs/volumes.md)',
      },
    ]);
  }
  return { maxSizeMB: v.max_size_mb, maxVolumeCount: v.max_volume_count };
}
