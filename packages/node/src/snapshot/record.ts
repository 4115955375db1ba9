import { z } from 'zod';
import { invalidRequest, RepositoryError } from './errors.js';
import { isSnapshotId } from '@aenv/protocol';

export const SNAPSHOT_RECORD_VERSION = 1;

const ALIAS_RE = /^[A-Za-z0-9_-]+$/;
/** Tags one record may carry (a bound on what a caller can make it store). */
export const MAX_TAGS = 64;
/** One path component on every filesystem we store aliases on (the E2B API sets no length limit). */
export const MAX_ALIAS_LENGTH = 255;
// A template tag (E2B `name:tag`), as Docker tags are spelled.
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
/** The tag every template has: its build (`name` alone means `name:default`). */
export const DEFAULT_TAG = 'default';
const ARTIFACT_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
const RFC3339_MS_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

export type BuildStatus = 'waiting' | 'building' | 'ready' | 'error';
export type SnapshotKind = 'template' | 'sandbox' | 'paused';

export interface BuildError {
  message: string;
  step?: string;
}

export interface TemplateBuild {
  status: BuildStatus;
  startedAt?: string;
  finishedAt?: string;
  error?: BuildError;
}

/** A template build: template list APIs show these. */
export interface TemplateSource {
  kind: 'template';
  build: TemplateBuild;
}

/** A snapshot taken of a running sandbox: snapshot APIs show these. */
export interface SandboxSource {
  kind: 'sandbox';
  sourceSandboxId: string;
}

/** A paused sandbox's state, stored here when the repository is shared so another node can resume it. */
export interface PausedSource {
  kind: 'paused';
  sandboxId: string;
  /**
   * The node that paused it dropped its own copy (a drain handed it over): this copy is the only one, and no node
   * lists the sandbox until one takes it over (docs/cluster.md#sandboxes-held-by-no-node).
   */
  handedOver?: boolean;
}

export type SnapshotSource = TemplateSource | SandboxSource | PausedSource;

export interface Resources {
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
}

/** A stored blob: content-addressed by the sha256 of its raw bytes. */
export interface LayerRef {
  digest: string;
  size: number;
  mediaType: string;
}

export interface CommandContext {
  envVars: Record<string, string>;
  workdir: string;
  user?: string;
  exposedPorts: string[];
  entrypoint?: string[];
  cmd?: string[];
  volumes: string[];
  labels: Record<string, string>;
}

export interface StartupCommand {
  startCmd: string;
  readyCmd: string;
  context: CommandContext;
}

export interface CommittedSnapshot {
  context: CommandContext;
  startup?: StartupCommand;
  /** envd, tools and the runtime driver's host components. */
  runtimeVersions: Record<string, string>;
  virtualizationMode: string;
  baseImage?: { reference: string; manifestDigest: string };
  /** Disk layers, bottom first. */
  layers: LayerRef[];
  /** Named per-record artifacts, e.g. `memory` → the archive of the runtime's saved memory. */
  artifacts: Record<string, LayerRef>;
  extra?: Record<string, unknown>;
}

/** What the publisher describes; the repository fills in `layers` and `artifacts` from the files it stored. */
export type CommittedSnapshotDraft = Omit<CommittedSnapshot, 'layers' | 'artifacts'>;

/** A tag of a template record (`name:tag` names the record). */
export interface TemplateTag {
  tag: string;
  /** RFC3339 UTC with milliseconds: when it was assigned. */
  createdAt: string;
}

export interface SnapshotRecord {
  version: 1;
  id: string;
  alias?: string;
  /** Tags besides `default` (which every record has implicitly). */
  tags?: TemplateTag[];
  /** E2B's `public` flag as last set (`PATCH /v2/templates/{id}`); absent = public. */
  public?: boolean;
  source: SnapshotSource;
  resources: Resources;
  /** RFC3339 UTC with milliseconds. */
  createdAt: string;
  updatedAt: string;
  /** Present once the commit marker exists; the marker is the only source of this field. */
  committed?: CommittedSnapshot;
}

/** The record as stored in the catalog: everything but `committed`, which lives in the commit marker. */
export type StoredRecord = Omit<SnapshotRecord, 'committed'>;

export interface NewSnapshotRecord {
  /** UUIDv7 (lowercase); generated when omitted. */
  id?: string;
  alias?: string;
  tags?: TemplateTag[];
  source: SnapshotSource;
  resources: Resources;
}

// ---- zod schemas (validation on every read and before every write) ----

const timestamp = z.string().regex(RFC3339_MS_RE, 'must be an RFC3339 UTC timestamp with milliseconds');
const stringMap = z.record(z.string(), z.string());

const buildErrorSchema = z.object({ message: z.string(), step: z.string().optional() });

const sourceSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('template'),
    build: z.object({
      status: z.enum(['waiting', 'building', 'ready', 'error']),
      startedAt: timestamp.optional(),
      finishedAt: timestamp.optional(),
      error: buildErrorSchema.optional(),
    }),
  }),
  z.object({ kind: z.literal('sandbox'), sourceSandboxId: z.string().min(1) }),
  z.object({ kind: z.literal('paused'), sandboxId: z.string().min(1), handedOver: z.boolean().optional() }),
]);

const resourcesSchema = z.object({
  cpuCount: z.number().int().positive(),
  memoryMB: z.number().int().positive(),
  diskSizeMB: z.number().int().nonnegative(),
});

const aliasSchema = z.string().max(MAX_ALIAS_LENGTH).regex(ALIAS_RE);
const idSchema = z.string().refine(isSnapshotId, 'must be a lowercase UUIDv7');

export const layerRefSchema = z.object({
  digest: z.string().regex(DIGEST_RE, 'must be sha256:<64 lowercase hex>'),
  size: z.number().int().nonnegative(),
  mediaType: z.string().min(1),
});

const commandContextSchema = z.object({
  envVars: stringMap,
  workdir: z.string().min(1),
  user: z.string().optional(),
  exposedPorts: z.array(z.string()),
  entrypoint: z.array(z.string()).optional(),
  cmd: z.array(z.string()).optional(),
  volumes: z.array(z.string()),
  labels: stringMap,
});

const committedDraftShape = {
  context: commandContextSchema,
  startup: z.object({ startCmd: z.string(), readyCmd: z.string(), context: commandContextSchema }).optional(),
  runtimeVersions: stringMap,
  virtualizationMode: z.string().min(1),
  baseImage: z.object({ reference: z.string().min(1), manifestDigest: z.string().min(1) }).optional(),
  extra: z.record(z.string(), z.unknown()).optional(),
};

export const committedDraftSchema = z.object(committedDraftShape);

export const committedSchema = z.object({
  ...committedDraftShape,
  layers: z.array(layerRefSchema),
  artifacts: z.record(z.string().regex(ARTIFACT_NAME_RE), layerRefSchema),
});

export const tagsSchema = z
  .array(z.object({ tag: z.string().regex(TAG_RE), createdAt: timestamp }))
  .max(MAX_TAGS)
  .refine((tags) => new Set(tags.map((t) => t.tag)).size === tags.length, 'tags must be distinct');

export const storedRecordSchema = z.object({
  version: z.literal(SNAPSHOT_RECORD_VERSION),
  id: idSchema,
  alias: aliasSchema.optional(),
  tags: tagsSchema.optional(),
  public: z.boolean().optional(),
  source: sourceSchema,
  resources: resourcesSchema,
  createdAt: timestamp,
  updatedAt: timestamp,
});

/** The commit marker's content. */
export const commitMarkerSchema = z.object({
  version: z.literal(SNAPSHOT_RECORD_VERSION),
  id: idSchema,
  committedAt: timestamp,
  committed: committedSchema,
});
export type CommitMarker = z.infer<typeof commitMarkerSchema>;

function describeIssues(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`).join('; ');
}

/** Validates something the caller handed in; failures are InvalidRequest (400). */
export function validateInput<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const r = schema.safeParse(value);
  if (!r.success) throw invalidRequest(`invalid ${what}: ${describeIssues(r.error)}`);
  return r.data;
}

/** Parses something read from storage; failures are Backend errors naming the stored object. */
export function parseStored<T>(schema: z.ZodType<T>, text: string, where: string): T {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    // The parser's message quotes the document: it goes to the log through `cause`, not into the message.
    throw new RepositoryError('Backend', `${where} is not valid JSON`, { cause: err });
  }
  return parseStoredValue(schema, json, where);
}

/** Validates a parsed stored document. */
export function parseStoredValue<T>(schema: z.ZodType<T>, json: unknown, where: string): T {
  const r = schema.safeParse(json);
  if (!r.success)
    throw new RepositoryError('Backend', `${where} is not a valid record: ${describeIssues(r.error)}`);
  return r.data;
}

export function isValidAlias(alias: string): boolean {
  return alias.length > 0 && alias.length <= MAX_ALIAS_LENGTH && ALIAS_RE.test(alias);
}

/** Alias rules of docs/snapshots.md: non-empty, only `[A-Za-z0-9_-]`. */
export function assertValidAlias(alias: string): void {
  if (typeof alias !== 'string' || !isValidAlias(alias)) {
    const shown =
      typeof alias === 'string'
        ? JSON.stringify(alias.length > 80 ? `${alias.slice(0, 80)}…` : alias)
        : String(alias);
    throw invalidRequest(
      `invalid snapshot alias: ${shown}: must be 1-${MAX_ALIAS_LENGTH} characters of A-Z, a-z, 0-9, '_' and '-'`,
    );
  }
}

export function isValidTag(tag: string): boolean {
  return TAG_RE.test(tag);
}

export function isValidArtifactName(name: string): boolean {
  return ARTIFACT_NAME_RE.test(name);
}

export function nowTimestamp(): string {
  return new Date().toISOString();
}

export function sandboxIdOf(record: Pick<SnapshotRecord, 'source'>): string | undefined {
  if (record.source.kind === 'sandbox') return record.source.sourceSandboxId;
  if (record.source.kind === 'paused') return record.source.sandboxId;
  return undefined;
}

/** Catalog order: createdAt descending, then id ascending. */
export function compareCatalogOrder(a: SnapshotRecord, b: SnapshotRecord): number {
  const ta = Date.parse(a.createdAt);
  const tb = Date.parse(b.createdAt);
  if (ta !== tb) return tb - ta;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}
