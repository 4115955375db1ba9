import type { AenvConfig } from '@aenv/config';
import type { VolumeDisks } from '../runtime/driver.js';
import type { StateDb } from '../state/db.js';
import type { Logger } from '../util/log.js';
import { VolumeService } from './service.js';
import { volumeSettings } from './settings.js';

/** `[volume]`: the node's persistent volumes, on the runtime's volume disks, catalogued in the state db. */
export async function startVolumes(
  config: AenvConfig,
  deps: { db: StateDb; disks: VolumeDisks; apiKey: string; logger: Logger },
): Promise<VolumeService> {
  const volumes = new VolumeService({
    ...volumeSettings(config),
    db: deps.db,
    disks: deps.disks,
    tokenSecret: deps.apiKey,
    logger: deps.logger.child({ component: 'volumes' }),
  });
  await volumes.init();
  return volumes;
}
