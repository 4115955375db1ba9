// The on-repository format of captures made by the container backend (snapshots, templates, forks of them):
// layers[0] = the sandbox disk (the files of the runtime's saved disk, archived by disk-archive.ts),
// artifacts.memory = the runtime's saved memory (`RuntimeDriver.memoryMediaTypes`), committed.extra = a
// CaptureExtra (record-state.ts). Whoever publishes a capture for the backend to launch uses these.

import type { SandboxRecord } from '../orchestrator/types.js';
import type { CaptureExtra } from './record-state.js';
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
