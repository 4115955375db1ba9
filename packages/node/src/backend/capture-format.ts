// The on-repository format of captures made by the container backend (snapshots, templates, forks of them):
// layers[0] = the sandbox disk (the files of the runtime's saved disk, archived by disk-archive.ts),
// artifacts.memory = the runtime's saved memory (`RuntimeDriver.memoryMediaTypes`), committed.extra = a
// CaptureExtra (record-state.ts). Whoever publishes a capture for the backend to launch uses these.

import { z } from 'zod';
import { parseNetworkPolicy } from '../network/policy.js';
import type { SandboxNetworkSettings, SandboxRecord } from '../orchestrator/types.js';
import { RecordStateError, type CaptureExtra } from './record-state.js';
import type { CommandContext } from '../snapshot/index.js';
import type { VolumeMountRecord } from '../volume/types.js';

export const DISK_MEDIA_TYPE = 'application/vnd.aenv.disk.tar';

/** The custom extension params a capture's `committed.extra` records, if it is a valid object. */
export function captureExtensionParams(extra: unknown): Record<string, unknown> | undefined {
  const params = (extra as Partial<CaptureExtra> | undefined)?.customExtensionParams;
  return typeof params === 'object' && params !== null && !Array.isArray(params) ? params : undefined;
}

/** The volume mounts a capture's `committed.extra` records (each checked for shape; others are dropped). */
export function captureVolumeMounts(extra: unknown): VolumeMountRecord[] | undefined {
  const mounts = (extra as { volumeMounts?: unknown } | undefined)?.volumeMounts;
  if (!Array.isArray(mounts)) return undefined;
  const ok = mounts.filter(
    (m): m is VolumeMountRecord =>
      typeof m === 'object' &&
      m !== null &&
      typeof (m as VolumeMountRecord).volumeId === 'string' &&
      typeof (m as VolumeMountRecord).name === 'string' &&
      typeof (m as VolumeMountRecord).path === 'string',
  );
  return ok.length ? ok : undefined;
}

const port = z.number().int().min(1).max(65535);
const StoredNetwork = z.object({
  allowPublicTraffic: z.boolean(),
  allowOut: z.array(z.string()),
  denyOut: z.array(z.string()),
  allowInternetAccess: z.boolean().nullable(),
  rules: z.unknown().optional(),
  egressProxy: z
    .object({ address: z.string(), username: z.string().optional(), password: z.string().optional() })
    .optional(),
  httpsPorts: z.array(port).max(64).optional(),
  maskRequestHost: z.string().max(255).optional(),
});

/**
 * The network settings a capture's `committed.extra` records (a snapshot of a sandbox), undefined when it records
 * none (templates, snapshots taken before captures recorded them). The egress part is parsed again as a create's
 * would be, so a launch installs nothing a create could not ask for. A recorded network that does not decode
 * throws RecordStateError naming the snapshot: launching without it would be a looser sandbox than the one
 * captured. Messages name fields and entries, never a header value or a password.
 */
export function captureNetwork(snapshotId: string, extra: unknown): SandboxNetworkSettings | undefined {
  const stored = (extra as { network?: unknown } | undefined)?.network;
  if (stored === undefined) return undefined;
  const what = `snapshot ${snapshotId}: its recorded network`;
  const shape = StoredNetwork.safeParse(stored);
  if (!shape.success) {
    const where = shape.error.issues.map((i) => i.path.join('.') || '(root)').join(', ');
    throw new RecordStateError(`${what} is invalid (${where})`);
  }
  const n = shape.data;
  let policy;
  try {
    policy = parseNetworkPolicy({
      allowOut: n.allowOut,
      denyOut: n.denyOut,
      allowInternetAccess: n.allowInternetAccess,
      rules: n.rules,
      egressProxy: n.egressProxy,
    });
  } catch (err) {
    throw new RecordStateError(`${what} is invalid (${err instanceof Error ? err.message : String(err)})`);
  }
  return {
    allowPublicTraffic: n.allowPublicTraffic,
    ...(n.httpsPorts?.length ? { httpsPorts: n.httpsPorts } : {}),
    ...(n.maskRequestHost !== undefined ? { maskRequestHost: n.maskRequestHost } : {}),
    ...policy,
  };
}

/** The command context a capture of `record` records when nothing else is given: its default user and workdir. */
export function sandboxContext(record: SandboxRecord): CommandContext {
  return {
    envVars: {},
    workdir: record.defaultWorkdir ?? '/',
    user: record.defaultUser,
    exposedPorts: [],
    volumes: [],
    labels: {},
  };
}
