import type { EgressPolicy } from '../network/types.js';
import type { PausedState, RuntimeBinding, SandboxRecord } from './types.js';

/** What a sandbox is started from: a committed template or snapshot record of the repository. */
export interface LaunchSource {
  templateId: string;
  alias?: string;
  /** The committed record (opaque to the orchestrator; the backend knows how to start it). */
  record: unknown;
  /** Booted straight from an image for one create (`POST /sandboxes-cold`): no pre-started sandboxes for it. */
  cold?: boolean;
}

export interface StartResult {
  binding: RuntimeBinding;
  /** Backend-private data saved with the sandbox record (image digest, tools version, ...). */
  backend: Record<string, unknown>;
}

/** What recover() found for a sandbox record after a server restart. */
export type RecoveryOutcome =
  | { kind: 'running'; binding: RuntimeBinding }
  /** `paused`: what the artifacts on disk say, when the record lacks it (its size, or the whole pause). */
  | { kind: 'paused'; paused?: PausedState }
  | { kind: 'gone' };

/** A capture taken and kept on this node, not yet in the repository. */
export interface CapturedSandbox {
  /** Stores the capture into its repository record (committing it); removes the local work on failure. */
  publish(): Promise<void>;
}

/** Where a new instance of a sandbox is about to run (before its first process starts; docs/hooks.md). */
export interface InstancePlacement {
  /** `fresh`: booted from a template's image; `resume`: restored or booted from saved state. */
  kind: 'fresh' | 'resume';
  /** Fresh per start; the binding of the started instance carries the same id. */
  instanceId: string;
  netnsPath: string;
  hostInteractionIp: string;
}

/**
 * Told before an instance's first process starts (or its frozen processes thaw). Its failure fails the start; what
 * it returns is extra environment of the instance's processes (given to envd with `/init`).
 */
export type BeforeInstanceStart = (
  placement: InstancePlacement,
) => Promise<{ extraEnv?: Record<string, string> }>;

export type ForkChildResult = { ok: true; start: StartResult } | { ok: false; error: Error };

/** Where a capture of a running sandbox goes: an existing, uncommitted record of the snapshot repository. */
export interface CaptureTarget {
  recordId: string;
  /**
   * Creates the (uncommitted) record `recordId`. The backend calls it only after it has noted the capture on
   * disk, so that a crash at any later point lets the next start find and remove the half-made record.
   */
  createRecord?: () => Promise<void>;
  /** Start command recorded with a template capture (it is running in the captured memory). */
  startup?: { startCmd: string; readyCmd: string };
  /** Command context (env, workdir, user, ...) recorded instead of the sandbox's own. */
  context?: {
    envVars: Record<string, string>;
    workdir: string;
    user?: string;
    exposedPorts: string[];
    volumes: string[];
    labels: Record<string, string>;
  };
}

/**
 * The orchestrator's only way to touch the host: network slots, images, the runtime driver and envd.
 * Every method leaves nothing behind when it fails.
 */
/** What a backend tells the orchestrator while it takes a sandbox over from the shared repository. */
export interface AdoptionHooks {
  /**
   * The repository holds a copy this node is about to take (before it is fetched). Not called while the node only
   * looks: the sandbox may be running on another node.
   */
  found?: () => void;
  /** The sandbox, as its pause recorded it, once its claim is this node's (before its record is ready). */
  claimed?: (record: SandboxRecord) => void;
}

export interface SandboxBackend {
  /** Starts a fresh sandbox; resolves when envd is healthy and `/init` is done. */
  start(
    record: SandboxRecord,
    source: LaunchSource,
    policy: EgressPolicy,
    beforeStart?: BeforeInstanceStart,
  ): Promise<StartResult>;
  /** Removes everything of the sandbox on this node (idempotent). */
  destroy(record: SandboxRecord): Promise<void>;
  /**
   * Pauses (freeze + checkpoint + disk capture); the artifacts are durable when it resolves.
   * `memory: false` keeps the disk only: processes start afresh on resume. `admit` is given the bytes the
   * artifacts take once they are written, before they are marked complete: when it throws, they are removed
   * and the sandbox runs on as before (the pause fails with that error).
   */
  pause(
    record: SandboxRecord,
    opts: { memory: boolean; admit?: (bytes: number) => void },
  ): Promise<PausedState>;
  /**
   * Resumes a paused sandbox; resolves when envd is healthy and `/init` is done.
   * `memory: false` boots the saved disk even when memory was kept.
   */
  resume(
    record: SandboxRecord,
    policy: EgressPolicy,
    opts: { memory: boolean; beforeStart?: BeforeInstanceStart },
  ): Promise<StartResult>;
  /** Whether the running sandbox's envd answers `/health` within `timeoutMs`. */
  guestAnswers(record: SandboxRecord, timeoutMs: number): Promise<boolean>;
  /** Replaces the sandbox's egress rules. */
  applyPolicy(record: SandboxRecord, policy: EgressPolicy): Promise<void>;
  /** Called once at startup with every stored record; cleans up everything else on the host. */
  recover(records: readonly SandboxRecord[]): Promise<Map<string, RecoveryOutcome>>;
  /**
   * Captures memory and disk of a running sandbox (it keeps running). The sandbox is only needed until this
   * resolves; publishing what was captured into `target` is the returned handle's job.
   */
  capture(record: SandboxRecord, target: CaptureTarget): Promise<CapturedSandbox>;
  /** One checkpoint of `source`, restored into every child (each with its own slot, id and tokens). */
  fork(
    source: SandboxRecord,
    children: readonly SandboxRecord[],
    beforeStart?: (child: SandboxRecord) => BeforeInstanceStart | undefined,
  ): Promise<ForkChildResult[]>;
  /**
   * Periodic housekeeping (e.g. releasing the memory of sandboxes paused long enough ago); `releaseAll` drops
   * everything paused sandboxes still hold in memory (shutdown).
   */
  maintain(paused: readonly SandboxRecord[], opts?: { releaseAll?: boolean }): Promise<void>;
  /**
   * With a shared repository (docs/cluster.md#sandboxes-that-move): the record of a sandbox another node paused
   * into it, now paused on this node; undefined when there is none. Throws NotFound naming the node that holds
   * (or lost) a sandbox the repository knows of but cannot hand over. `hooks` follow the take-over's steps.
   */
  adoptShared?(sandboxId: string, hooks?: AdoptionHooks): Promise<SandboxRecord | undefined>;
  /** A sandbox started on this node (create, fork, restart): its claim in a shared repository names the node. */
  noteStarted?(sandboxId: string): void;
  /**
   * Drain: drops this node's copy of a paused sandbox whose pause is in the shared repository for another node to
   * take; false (nothing dropped) when it is not there.
   */
  handOver?(record: SandboxRecord): Promise<boolean>;
  /**
   * Drain: why a paused sandbox cannot go to another node (it mounts volumes only this node has), or undefined.
   * Such a sandbox stays here paused, not handed over (docs/cluster.md#draining).
   */
  staysHere?(record: SandboxRecord): string | undefined;
  /** The node that claims the sandbox now, when it is another one (its copy here is stale). */
  movedTo?(sandboxId: string): Promise<string | undefined>;
}

/** A resume refused because another node took the sandbox over (its local copy here is stale). */
export function isSandboxMoved(e: unknown): e is Error & { sandboxMovedTo: string } {
  return e instanceof Error && typeof (e as { sandboxMovedTo?: unknown }).sandboxMovedTo === 'string';
}
