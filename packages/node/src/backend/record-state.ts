// What the container backend keeps about a sandbox: on its record (`SandboxRecord.backend`) and in the
// captures it publishes (`committed.extra`). Its own fields are checked here; the rootfs goes through the
// runtime driver's codec, under the driver's keys. A stored object that does not decode is a clear error
// naming the record, never a half-read state.
import { z } from 'zod';
import type { DriveSpec, DriverRecordCodec, RootfsSpec } from '../runtime/driver.js';
import type { SandboxNetworkSettings } from '../orchestrator/types.js';
import type { VolumeMountRecord } from '../volume/types.js';

/** What the container backend keeps in `SandboxRecord.backend` for a sandbox it runs. */
export interface BackendState {
  /** The runtime's container id when it is not the sandbox id (a sandbox handed out by the warm pool). */
  containerId?: string;
  imageRef: string;
  manifestDigest: string;
  rootfs: RootfsSpec;
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

/** What a capture records about the sandbox it was taken from (in `committed.extra`). */
export interface CaptureExtra {
  sourceSandboxId: string;
  /** Whether the envd in the captured memory holds the source's access token. */
  sourceSecure: boolean;
  toolsVersion: string;
  envdEnv: Record<string, string>;
  rootfs: RootfsSpec;
  /** The source's custom extension params: a launch of the capture gets them unless it brings its own. */
  customExtensionParams?: Record<string, unknown>;
  /** The volumes the source mounted: a launch of the capture mounts them again (docs/volumes.md). */
  volumeMounts?: VolumeMountRecord[];
  /**
   * The source's network settings at capture (a snapshot of a sandbox; templates record none): a launch of the
   * capture gets them unless its create brings its own (capture-format.ts `captureNetwork`).
   */
  network?: SandboxNetworkSettings;
}

/** What a launch reads back from a capture (the rootfs comes from the capture's image again). */
export type CaptureSource = Omit<
  CaptureExtra,
  'rootfs' | 'customExtensionParams' | 'volumeMounts' | 'network'
>;

const Env = z.record(z.string(), z.string());

const StoredState = z.object({
  containerId: z.string().min(1).optional(),
  imageRef: z.string().min(1),
  manifestDigest: z.string().min(1),
  toolsVersion: z.string().min(1),
  envdEnv: Env,
  resident: z.boolean().optional(),
  residentSlot: z.number().int().nonnegative().optional(),
  thawable: z.boolean().optional(),
  startCmd: z.string().optional(),
});

const StoredCapture = z.object({
  // Empty for a template whose layers all came from the build cache (no build sandbox ran).
  sourceSandboxId: z.string(),
  sourceSecure: z.boolean(),
  toolsVersion: z.string().min(1),
  envdEnv: Env,
});

/** A stored object that is not what the backend wrote. */
export class RecordStateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RecordStateError';
  }
}

const describeIssues = (err: z.ZodError) =>
  err.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Drops keys whose value is undefined, so that what is encoded is what a JSON round trip keeps. */
const defined = (o: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

export class BackendRecordCodec {
  constructor(private readonly driver: DriverRecordCodec) {}

  encodeState(state: BackendState): Record<string, unknown> {
    const { rootfs, ...own } = state;
    return defined({ ...own, ...this.driver.encode(rootfs) });
  }

  /** The state of sandbox `sandboxId` from its record's `backend`; throws RecordStateError naming it. */
  decodeState(sandboxId: string, stored: unknown): BackendState {
    const what = `sandbox ${sandboxId}: its stored backend state`;
    if (!isObject(stored)) throw new RecordStateError(`${what} is not an object`);
    const own = StoredState.safeParse(stored);
    if (!own.success) throw new RecordStateError(`${what} is invalid (${describeIssues(own.error)})`);
    return { ...own.data, rootfs: this.rootfsOf(what, stored) };
  }

  encodeCapture(extra: CaptureExtra): Record<string, unknown> {
    const { rootfs, ...own } = extra;
    return { ...own, ...this.driver.encode(rootfs) };
  }

  /** What snapshot `snapshotId` records about its source (`committed.extra`); throws RecordStateError. */
  decodeCapture(snapshotId: string, stored: unknown): CaptureSource {
    const what = `snapshot ${snapshotId}: its capture record (committed.extra)`;
    const own = StoredCapture.safeParse(stored ?? {});
    if (!own.success) throw new RecordStateError(`${what} is invalid (${describeIssues(own.error)})`);
    return own.data;
  }

  /** The attached drives a capture was taken with (its layer dirs are the source node's: look them up again). */
  captureDrives(snapshotId: string, stored: Record<string, unknown> | undefined): DriveSpec[] {
    if (!stored || !('lowerDirs' in stored)) return [];
    const what = `snapshot ${snapshotId}: its capture record (committed.extra)`;
    return this.rootfsOf(what, stored).drives ?? [];
  }

  private rootfsOf(what: string, stored: Record<string, unknown>): RootfsSpec {
    try {
      return this.driver.decode(stored);
    } catch (err) {
      throw new RecordStateError(`${what} is invalid (${err instanceof Error ? err.message : String(err)})`);
    }
  }
}
