// `[snapshot].unsigned_records`: what happens to records written before record signing existed
// (docs/snapshots.md#migrating-to-signed-records).
//
//   auto (default)   posix_fs: this node's first start with signing signs the unsigned records it finds (the
//                    directory was trusted until then), and remembers that in $AENV_HOME so that records
//                    planted later are refused; oss (shared by nature): unsigned records are refused.
//   refuse           unsigned records are refused.
//   sign_at_startup  every start signs the unsigned records it finds (a migration step for a shared store the
//                    operator has checked; turn it off afterwards).
//   accept           unsigned records are used unverified (insecure; for a rolling upgrade only).

import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import type { Logger } from '../util/log.js';
import type { SnapshotRepository } from './repository.js';

export type UnsignedRecordsPolicy = 'auto' | 'refuse' | 'sign_at_startup' | 'accept';

/** How the repository treats a document without a signature when it reads one. */
export function unsignedReadMode(policy: UnsignedRecordsPolicy): 'refuse' | 'accept' {
  return policy === 'accept' ? 'accept' : 'refuse';
}

export interface SignAtStartupOptions {
  policy: UnsignedRecordsPolicy;
  backend: 'posix_fs' | 'oss';
  /** Node-local file that records auto's one-time migration (never in the repository: its writers are the threat). */
  markerPath: string;
  logger: Logger;
}

/** Signs the repository's unsigned records when the policy asks for it; call once at startup, before use. */
export async function signUnsignedAtStartup(
  repo: SnapshotRepository,
  o: SignAtStartupOptions,
): Promise<void> {
  const once = o.policy === 'auto' && o.backend === 'posix_fs';
  if (o.policy !== 'sign_at_startup' && !(once && !existsSync(o.markerPath))) return;
  const result = await repo.signUnsigned();
  if (once) {
    await writeFile(
      o.markerPath,
      `${JSON.stringify({ signedAt: new Date().toISOString(), signed: result.signed.length })}\n`,
      { mode: 0o600 },
    );
  }
  o.logger.info(
    { signed: result.signed.length, skipped: result.skipped.length, policy: o.policy },
    once
      ? 'first start with record signing: signed the existing records of the snapshot repository'
      : 'signed the unsigned records of the snapshot repository (snapshot.unsigned_records = "sign_at_startup")',
  );
}
