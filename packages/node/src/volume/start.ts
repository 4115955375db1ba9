import type { AenvConfig } from '@aenv/config';
import type { VolumeDisks } from '../runtime/driver.js';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import { NodeVolumeStore } from './node-store.js';
import { VolumeService } from './service.js';
import { volumeSettings } from './settings.js';
import { SharedDirStore } from './shared-dir.js';
import type { VolumeStore } from './store.js';

/**
 * `[volume]`: persistent volumes, on the runtime's volume disks catalogued in the state db, or on the shared
 * directory every node of the cluster mounts (docs/volumes.md).
 */
export async function startVolumes(
  config: AenvConfig,
  deps: { db: StateDb; disks: VolumeDisks; apiKey: string; nodeId: string; logger: Logger },
): Promise<VolumeService> {
  const { storage, ...settings } = volumeSettings(config);
  const logger = deps.logger.child({ component: 'volumes' });
  const store: VolumeStore =
    storage.kind === 'node'
      ? new NodeVolumeStore(deps.db, deps.disks, logger)
      : new SharedDirStore({
          root: storage.dir,
          nodeId: deps.nodeId,
          owner: deps.disks.ownerRange,
          logger,
        });
  const volumes = new VolumeService({ ...settings, store, tokenSecret: deps.apiKey, logger });
  await volumes.init();
  return volumes;
}
