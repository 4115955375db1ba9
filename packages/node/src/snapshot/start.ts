import type { AenvConfig } from '@aenv/config';
import { join } from 'node:path';
import { resolveRecordSigningKey } from '../secrets/index.js';
import type { Logger } from '../util/log.js';
import type { Subsystem } from '../util/subsystem.js';
import { createSnapshotRepository } from './index.js';
import type { SnapshotRepository } from './repository.js';
import { signUnsignedAtStartup, unsignedReadMode } from './unsigned-records.js';

export type SnapshotSection = Pick<AenvConfig, 'snapshot' | 'backend' | 'home_path'>;

/**
 * `[snapshot]` and the repository's `[backend.*]`: the snapshot repository with its record-signing key, records
 * left unsigned by older versions signed (per `[snapshot].unsigned_records`), and reconciled.
 */
export async function startSnapshotRepository(
  config: SnapshotSection,
  deps: { logger: Logger },
): Promise<Subsystem & { repository: SnapshotRepository }> {
  const logger = deps.logger;
  const signingKey = resolveRecordSigningKey({
    homePath: config.home_path,
    explicitSecret: config.snapshot.record_signing_secret,
    sharedRepository: config.snapshot.repository_backend === 'oss',
  });
  for (const w of signingKey.warnings) logger.warn(w);
  const repository = createSnapshotRepository({
    backend: config.snapshot.repository_backend,
    signing: {
      secret: signingKey.secret,
      unsigned: unsignedReadMode(config.snapshot.unsigned_records),
    },
    posixFs: { snapshotStore: config.backend.posix_fs.snapshot_store },
    ...(config.snapshot.repository_backend === 'oss' ? { oss: ossOptions(config.backend.oss) } : {}),
    localCachePath: config.snapshot.local_cache_path,
    cacheMaxSizeGb: config.backend.oss.cache_max_size_gb,
    compression: {
      enabled: config.snapshot.publish_compression.enabled,
      level: config.snapshot.publish_compression.level,
    },
    logger: logger.child({ component: 'repository' }),
  });
  await signUnsignedAtStartup(repository, {
    policy: config.snapshot.unsigned_records,
    backend: config.snapshot.repository_backend,
    markerPath: join(config.home_path, 'snapshot-records-signed'),
    logger,
  });
  await repository.reconcile();
  return { repository, close: () => repository.close() };
}

function ossOptions(o: AenvConfig['backend']['oss']) {
  return {
    endpoint: o.endpoint ?? '',
    bucket: o.bucket ?? '',
    region: o.region ?? '',
    prefix: o.prefix ?? '',
    addressingStyle: o.addressing_style,
    credentialProcess: o.credential_process,
    accessKeyId: o.access_key_id,
    accessKeySecret: o.access_key_secret,
    securityToken: o.security_token,
  };
}
