// The on-repository format of captures made by the container backend (snapshots, templates, forks of them):
// layers[0] = the sandbox disk (the files of the runtime's saved disk, archived by disk-archive.ts),
// artifacts.memory = the runtime's saved memory (`RuntimeDriver.memoryMediaTypes`), committed.extra = a
// CaptureExtra (record-state.ts). Whoever publishes a capture for the backend to launch uses these.

import type { SandboxRecord } from '../orchestrator/types.js';
import type { CaptureExtra } from './record-state.js';
import type { CommandContext } from '../snapshot/index.js';

export const DISK_MEDIA_TYPE = 'application/vnd.aenv.disk.tar';

/** The custom extension params a capture's `committed.extra` records, if it is a valid object. */
export function captureExtensionParams(extra: unknown): Record<string, unknown> | undefined {
  const params = (extra as Partial<CaptureExtra> | undefined)?.customExtensionParams;
  return typeof params === 'object' && params !== null && !Array.isArray(params) ? params : undefined;
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
