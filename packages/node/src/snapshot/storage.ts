/**
 * The storage primitives the repository core is written against. Each backend (posix_fs, oss) implements
 * them with its own atomicity tools (rename/link + fsync + flock, or conditional PUTs + lease objects);
 * the catalog repository (`catalog-repository.ts`) owns every catalog rule so both backends behave identically.
 */

/** Small JSON documents of the catalog. */
export type DocNamespace = 'records' | 'aliases' | 'commits' | 'claims' | 'webhooks' | 'secrets';

/** Where a blob lives: layers are shared and content-addressed; artifacts belong to one record. */
export type BlobLocation =
  { kind: 'layer'; digest: string } | { kind: 'artifact'; snapshotId: string; name: string; digest: string };

/** Lock names: one per record, one per alias, and the layer-store GC lock. */
export type LockName = { kind: 'record'; id: string } | { kind: 'alias'; alias: string } | { kind: 'gc' };

/** GC takes the GC lock exclusive; every publish holds it shared, so GC never runs during a publish. */
export type LockMode = 'exclusive' | 'shared';

export interface LockHandle {
  release(): Promise<void>;
  /** Throws when the lock was lost (a lease backend could not renew it): the holder must not commit. */
  assertHeld(): void;
}

export interface StoredLayer {
  digest: string;
  /** Last write of the stored blob, ms since epoch. */
  modifiedAtMs: number;
}

/** A blob copied into a store's staging area, not yet visible under any name. */
export interface StagedBlob {
  /** sha256 and size of the raw content. */
  digest: string;
  size: number;
  /** Stores it under `loc` atomically (nothing appears under the final name until it is complete). */
  commit(loc: BlobLocation): Promise<void>;
  /** Drops the staged copy; idempotent, and a no-op after commit. */
  discard(): Promise<void>;
}

export interface RepositoryStorage {
  readonly backend: 'posix_fs' | 'oss';

  /** Creates directories/verifies access; called once before anything else. */
  init(): Promise<void>;
  close(): Promise<void>;

  lock(name: LockName, mode: LockMode, timeoutMs: number): Promise<LockHandle>;

  readDoc(ns: DocNamespace, name: string): Promise<string | undefined>;
  /** Atomic, durable replace. With `ifAbsent`, returns false (writing nothing) when the document exists. */
  writeDoc(ns: DocNamespace, name: string, text: string, opts?: { ifAbsent?: boolean }): Promise<boolean>;
  /** Idempotent. */
  deleteDoc(ns: DocNamespace, name: string): Promise<void>;
  listDocs(ns: DocNamespace): Promise<string[]>;
  /** Every document of a namespace by name (a snapshot for listing; documents may change right after). */
  readAllDocs(ns: DocNamespace): Promise<Map<string, string>>;

  /** True when a blob with this size is stored (dedup check; content is verified on fetch). */
  hasBlob(loc: BlobLocation, size: number): Promise<boolean>;
  /**
   * Copies `file` into the store's staging area in one pass, hashing its raw bytes as they stream (and
   * compressing them where the store does): the digest names the blob, and the staged bytes are exactly the
   * hashed ones.
   */
  stageBlob(file: string): Promise<StagedBlob>;
  /** A local path with the blob's raw, verified content. NotFound / IntegrityMismatch on failure. */
  fetchBlob(loc: BlobLocation, size: number): Promise<string>;
  deleteBlob(loc: BlobLocation): Promise<void>;
  listLayers(): Promise<StoredLayer[]>;
  /** Removes every artifact of one record (idempotent). */
  deleteArtifacts(snapshotId: string): Promise<void>;
  /** Ids that own stored artifacts (to find orphans after a crash). */
  listArtifactOwners(): Promise<string[]>;

  /** Removes temporary leftovers of interrupted writes older than `olderThanMs`; returns how many. */
  cleanupTemporaries(olderThanMs: number): Promise<number>;
}
