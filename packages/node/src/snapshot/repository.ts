import type {
  BuildStatus,
  CommittedSnapshotDraft,
  LayerRef,
  NewSnapshotRecord,
  SnapshotKind,
  SnapshotRecord,
} from './record.js';
import type { ClaimExpectation, SandboxClaim } from './sandbox-claim.js';
import type { SharedSecret, SharedSecretCreate, SharedSecrets } from './shared-secret.js';
import type { SharedWebhook, SharedWebhooks } from './shared-webhook.js';

/** A file on this node to be stored in the repository. */
export interface LocalFile {
  path: string;
  mediaType: string;
}

export interface PublishInput {
  /** Disk layers, bottom first: stored content-addressed and shared between records. */
  layers: LocalFile[];
  /** Named per-record artifacts (e.g. `memory`: the archive of the runtime's saved memory). */
  artifacts: Record<string, LocalFile>;
  committed: CommittedSnapshotDraft;
}

export type PublishProgress =
  | { step: 'blob-stored'; kind: 'layer' | 'artifact'; name: string; ref: LayerRef; deduplicated: boolean }
  | { step: 'committed'; id: string };

export interface PublishOptions {
  /** Awaited after each stored blob and after the commit marker (progress logs, tests). */
  onProgress?: (event: PublishProgress) => void | Promise<void>;
}

export interface ListFilter {
  kind?: SnapshotKind | SnapshotKind[];
  /** Matches the source sandbox of `sandbox` records and the sandbox of `paused` records. */
  sandboxId?: string;
  alias?: string;
  /** true: only records whose commit marker exists; false: only those without. */
  committed?: boolean;
  buildStatus?: BuildStatus;
}

export interface GcResult {
  /** Digests of layers removed. */
  removed: string[];
  /** Layers kept because a committed record references them. */
  kept: number;
}

export interface ReconcileResult {
  temporariesRemoved: number;
  /** Uncommitted `sandbox`/`paused` records whose publish died, removed. */
  abandonedRecordsRemoved: string[];
  /** Commit markers / artifacts whose record is gone, removed. */
  orphansRemoved: string[];
  /** Alias documents whose record is gone, removed. */
  danglingAliasesRemoved: string[];
}

export interface SignUnsignedResult {
  /** "records/<id>" / "commits/<id>" documents that were unsigned and are signed now. */
  signed: string[];
  /** Documents left alone: unreadable, or with a signature that does not verify. */
  skipped: string[];
}

/**
 * The snapshot repository: one catalog of templates, snapshots and (shared backends) paused sandboxes.
 * Every method throws `RepositoryError` (see errors.ts) on failure.
 */
export interface SnapshotRepository {
  readonly backend: 'posix_fs' | 'oss';

  /** Stores a new, uncommitted record (e.g. a template in `waiting`), binding its alias if it has one. */
  create(record: NewSnapshotRecord): Promise<SnapshotRecord>;
  /**
   * Changes a record under its lock. `mutate` edits a copy (source/build status, resources); throwing from it
   * aborts the update and the error propagates unchanged. id, version, createdAt, alias and committed are fixed.
   */
  update(id: string, mutate: (record: SnapshotRecord) => void | Promise<void>): Promise<SnapshotRecord>;
  /** By id (when it looks like a UUID) first, then by alias. NotFound when neither resolves. */
  get(idOrAlias: string): Promise<SnapshotRecord>;
  /** Like get, but undefined instead of NotFound. */
  find(idOrAlias: string): Promise<SnapshotRecord | undefined>;
  /** Ordered by createdAt descending, then id ascending. */
  list(filter?: ListFilter): Promise<SnapshotRecord[]>;
  /** Points `alias` at record `id`. AliasConflict when it points at another existing record; same id is a no-op. */
  bindAlias(alias: string, id: string): Promise<SnapshotRecord>;
  /** Stores the files, then the commit marker last. The record must exist and not be committed yet. */
  publish(id: string, input: PublishInput, opts?: PublishOptions): Promise<SnapshotRecord>;
  /** A local path holding the layer's verified raw content (posix_fs: the stored file itself — read only!). */
  fetch(ref: LayerRef): Promise<string>;
  /** A local path holding the named artifact of a committed record, verified. */
  fetchArtifact(idOrAlias: string, name: string): Promise<string>;
  /** Idempotent: false when there was nothing to delete. Shared layers stay until `gcLayers`. */
  delete(idOrAlias: string): Promise<boolean>;
  /** Removes layers no committed record references. Never runs concurrently with a publish. */
  gcLayers(): Promise<GcResult>;
  /** Startup clean-up of what crashed publishes/deletes left behind (older than `staleAfterMs`, default 1 h). */
  reconcile(opts?: { staleAfterMs?: number }): Promise<ReconcileResult>;
  /**
   * Signs every record and commit marker that has no signature yet (a store written before record signing, that
   * the operator trusts as it is now: `snapshot.unsigned_records`). Documents with a bad signature stay as they are.
   */
  signUnsigned(): Promise<SignUnsignedResult>;
  /** The owner claim of a sandbox that can move between nodes (docs/cluster.md#sandbox-ownership). */
  readClaim(sandboxId: string): Promise<SandboxClaim | undefined>;
  /** Writes `next` only if the current claim matches `expected` (null: none); false when it did not. */
  swapClaim(sandboxId: string, expected: ClaimExpectation, next: SandboxClaim): Promise<boolean>;
  /** Removes the claim if it matches `expected` (the sandbox is gone for good). */
  deleteClaim(sandboxId: string, expected: ClaimExpectation): Promise<boolean>;
  /** The cluster's webhook definitions (docs/events.md#in-a-cluster). */
  readWebhooks(): Promise<SharedWebhooks>;
  /** Stores a new definition unless `max` exist already or its id is taken: false then, nothing written. */
  createWebhook(webhook: SharedWebhook, max: number): Promise<boolean>;
  /** Replaces a definition under the webhooks lock; undefined when it does not exist. */
  updateWebhook(id: string, mutate: (w: SharedWebhook) => SharedWebhook): Promise<SharedWebhook | undefined>;
  /** false when there was nothing to delete. */
  deleteWebhook(id: string): Promise<boolean>;
  /** The cluster's `/secrets`, values sealed (docs/networking.md#secrets-in-a-cluster). */
  readSecrets(): Promise<SharedSecrets>;
  /** Stores a new secret unless its name is taken or `max` exist already (nothing written then). */
  createSecret(secret: SharedSecret, max: number): Promise<SharedSecretCreate>;
  /** Replaces a secret under the secrets lock (id, name and createdAt kept); undefined when it does not exist. */
  updateSecret(id: string, mutate: (s: SharedSecret) => SharedSecret): Promise<SharedSecret | undefined>;
  /** false when there was nothing to delete. */
  deleteSecret(id: string): Promise<boolean>;
  close(): Promise<void>;
}
