// What a template build needs from the node it runs on: sandboxes to run its steps in (the same sandbox factory
// user sandboxes come from), saved disks between steps, and the captures that become the template's content.
// The node's backend implements it (backend/template-builds.ts); the builder knows nothing of slots, runtimes or
// the capture format.
import type { EnvdRpcClient } from '@aenv/protocol';
import type { PulledImage } from '../image/index.js';
import type { CommandContext, SnapshotRecord } from '../snapshot/index.js';

export interface BuildSandboxSpec {
  id: string;
  templateId: string;
  image: PulledImage;
  /** A saved disk (a cache entry, a parent template's disk) to start on instead of an empty disk. */
  diskSource?: string;
  /** `diskSizeMB` limits what the build writes, as for any sandbox. */
  resources: { cpuCount: number; memoryMB: number; diskSizeMB?: number };
  /** `PATH` of the init's environment (the base's; captures record it for launches). */
  path: string | undefined;
}

/** A running build sandbox, envd answering and `/init`'ed as root. */
export interface BuildSandbox {
  id: string;
  envd: EnvdRpcClient;
}

/** What a capture commits into the (uncommitted) template record. */
export interface TemplateCaptureRequest {
  templateRecordId: string;
  context: CommandContext;
  /** The start command (running in the sandbox when the capture has memory). */
  startup?: { startCmd: string; readyCmd: string };
}

/** Who made a saved disk: a build sandbox, or nobody (every step came from the cache) on `image`. */
export type DiskOrigin = { sandbox: BuildSandbox } | { image: PulledImage; path: string | undefined };

export interface TemplateBuildHost {
  start(spec: BuildSandboxSpec): Promise<BuildSandbox>;
  /** `/init` with the template's env, user and workdir (what launches from a memory capture start with). */
  init(sb: BuildSandbox, ctx: CommandContext): Promise<void>;
  /** Saves the sandbox's disk into `dest`, with its processes frozen for a consistent copy. */
  snapshotDisk(sb: BuildSandbox, dest: string): Promise<void>;
  destroy(sb: BuildSandbox): Promise<void>;
  /** Memory (the start command keeps running) and disk of the running sandbox; it is left running. */
  captureMemory(sb: BuildSandbox, req: TemplateCaptureRequest): Promise<void>;
  /** The saved disk `disk` without memory: launches boot fresh on it. */
  captureDisk(req: TemplateCaptureRequest, disk: string, origin: DiskOrigin): Promise<void>;
  /**
   * Unpacks a committed template's disk into `dest` (a saved disk); resolves with its digest, or undefined when it
   * has none. Throws an Unsupported DomainError naming `what` for a disk this node cannot build on.
   */
  unpackDisk(
    committed: NonNullable<SnapshotRecord['committed']>,
    dest: string,
    what: string,
  ): Promise<string | undefined>;
  removeDisk(path: string): Promise<void>;
  /** Where the files of a saved disk are. */
  diskFilesDir(disk: string): string;
  /** Cleans what build sandboxes a crash cut short left behind (image leases, capture scratch files). */
  reconcile(): Promise<void>;
}
