import { isAbsolute } from 'node:path';
import { ConfigError, type AenvConfig } from '@aenv/config';
import type { VolumeSettings } from './service.js';

export type VolumeStorage = { kind: 'node' } | { kind: 'shared_dir'; dir: string };

/** `[volume]`, checked: a shared directory needs its path, and a path is refused where it would do nothing. */
export function volumeSettings(config: AenvConfig): VolumeSettings & { storage: VolumeStorage } {
  const v = config.volume;
  const settings = { maxSizeMB: v.max_size_mb, maxVolumeCount: v.max_volume_count };
  const dir = v.shared_dir;
  if (v.storage === 'node') {
    if (dir !== undefined)
      throw new ConfigError([
        {
          key: 'volume.shared_dir',
          value: dir,
          hasValue: true,
          rule: 'is used only with volume.storage = "shared_dir" (volumes are on this node\'s CoW volume now): remove it or set storage = "shared_dir"',
        },
      ]);
    return { ...settings, storage: { kind: 'node' } };
  }
  if (dir === undefined || dir.trim() === '' || !isAbsolute(dir) || dir.includes('\0'))
    throw new ConfigError([
      {
        key: 'volume.shared_dir',
        value: dir,
        hasValue: dir !== undefined,
        rule: 'volume.storage = "shared_dir" needs volume.shared_dir: the absolute path of the directory every node mounts (docs/volumes.md)',
      },
    ]);
  return { ...settings, storage: { kind: 'shared_dir', dir } };
}
