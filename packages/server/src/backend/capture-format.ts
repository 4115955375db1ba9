// The on-repository format of captures made by the container backend (snapshots, templates, forks of them):
// layers[0] = the sandbox disk (its overlay upper, archived by disk-archive.ts), artifacts.memory = CRIU images,
// committed.extra = CaptureExtra. Whoever publishes a capture for the backend to launch uses these.

import type { SandboxRecord } from '../orchestrator/types.js';
import type { CommandContext } from '../snapshot/index.js';

export const DISK_MEDIA_TYPE = 'application/vnd.aenv.disk.tar';
export const MEMORY_MEDIA_TYPE = 'application/vnd.aenv.criu-images.tar';

/** What a capture records about the sandbox it was taken from (in `committed.extra`). */
export interface CaptureExtra {
  sourceSandboxId: string;
  /** Whether the envd in the captured memory holds the source's access token. */
  sourceSecure: boolean;
  toolsVersion: string;
  envdEnv: Record<string, string>;
  lowerDirs: string[];
  /** The source's custom extension params: a launch of the capture gets them unless it brings its own. */
  customExtensionParams?: Record<string, unknown>;
}

/** The custom extension params a capture's `committed.extra` records, if it is a valid object. */
export function captureExtensionParams(extra: unknown): Record<string, unknown> | undefined {
  const params = (extra as Partial<CaptureExtra> | undefined)?.customExtensionParams;
  return typeof params === 'object' && params !== null && !Array.isArray(params) ? params : undefined;
}

/** What the container backend keeps in `SandboxRecord.backend` for a sandbox it runs. */
export interface BackendState {
  /** The runtime's container id when it is not the sandbox id (a sandbox handed out by the warm pool). */
  containerId?: string;
  imageRef: string;
  manifestDigest: string;
  lowerDirs: string[];
  toolsVersion: string;
  envdEnv: Record<string, string>;
  /** Paused, its container still frozen in memory with its slot (released later, in the background). */
  resident?: boolean;
  residentSlot?: number;
  /** A resident pause that a resume may simply thaw (a memory pause within its grace). */
  thawable?: boolean;
  /** Start command of the template, re-run when the sandbox boots fresh on its saved disk. */
  startCmd?: string;
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
