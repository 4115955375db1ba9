import { stat } from 'node:fs/promises';
import { z } from 'zod';
import type { Logger } from '../util/log.js';
import { backendError, invalidRequest, isRepositoryError, notFound, RepositoryError } from './errors.js';
import { isSnapshotId, isUuid, newSnapshotId } from '@aenv/protocol';
import {
  assertValidAlias,
  commitMarkerSchema,
  committedDraftSchema,
  committedSchema,
  compareCatalogOrder,
  isValidAlias,
  isValidArtifactName,
  MAX_ALIAS_LENGTH,
  nowTimestamp,
  parseStored,
  parseStoredValue,
  sandboxIdOf,
  SNAPSHOT_RECORD_VERSION,
  storedRecordSchema,
  validateInput,
  type CommitMarker,
  type CommittedSnapshot,
  type LayerRef,
  type NewSnapshotRecord,
  type SnapshotRecord,
  type StoredRecord,
} from './record.js';
import type {
  GcResult,
  ListFilter,
  LocalFile,
  PublishInput,
  PublishOptions,
  ReconcileResult,
  SignUnsignedResult,
  SnapshotRepository,
} from './repository.js';
import type { BlobLocation, LockHandle, LockMode, LockName, RepositoryStorage } from './storage.js';
import { untrusted, type RecordSigner, type SignedNamespace } from './signing.js';
import {
  claimMatches,
  sandboxClaimSchema,
  type ClaimExpectation,
  type SandboxClaim,
} from './sandbox-claim.js';
import {
  SECRET_ID,
  sharedSecretSchema,
  type SharedSecret,
  type SharedSecretCreate,
  type SharedSecrets,
} from './shared-secret.js';
import { sharedWebhookSchema, type SharedWebhook, type SharedWebhooks } from './shared-webhook.js';

/** One lock for all webhook documents: a create counts them, so creates on two nodes must not interleave. */
const WEBHOOKS_LOCK: LockName = { kind: 'record', id: 'webhooks' };
/** Likewise for secrets: a create checks the name and counts them. */
const SECRETS_LOCK: LockName = { kind: 'record', id: 'secrets' };

export interface CatalogOptions {
  store: RepositoryStorage;
  logger: Logger;
  /** How long an operation waits for a record/alias/GC lock held by someone else. */
  lockTimeoutMs: number;
  /** Signs every record and commit marker written, and verifies every one read (docs/snapshots.md#record-signing). */
  signer: RecordSigner;
  /** Documents without a signature: refused (default), or used unverified (`unsigned_records = "accept"`). */
  unsigned?: 'refuse' | 'accept';
}

const DEFAULT_STALE_AFTER_MS = 60 * 60 * 1000;

const newRecordSchema = z.object({
  id: z.string().refine(isSnapshotId, 'must be a lowercase UUIDv7').optional(),
  alias: z.string().optional(),
  tags: storedRecordSchema.shape.tags,
  source: storedRecordSchema.shape.source,
  resources: storedRecordSchema.shape.resources,
});

const localFileSchema = z.object({ path: z.string().min(1), mediaType: z.string().min(1) });

/** The catalog rules shared by every backend: validation, alias binding, publish ordering, GC, clean-up. */
export class CatalogRepository implements SnapshotRepository {
  private readonly store: RepositoryStorage;
  private readonly log: Logger;
  private readonly lockTimeoutMs: number;
  private readonly signer: RecordSigner;
  private readonly acceptUnsigned: boolean;
  private readonly warnedUnsigned = new Set<string>();
  /** What `list` decoded last, by document name, with the text it was decoded from (decodeListed). */
  private readonly listedDocs = {
    records: new Map<string, { text: string; value: unknown }>(),
    commits: new Map<string, { text: string; value: unknown }>(),
  };
  private initialized: Promise<void> | undefined;

  constructor(opts: CatalogOptions) {
    this.store = opts.store;
    this.log = opts.logger;
    this.lockTimeoutMs = opts.lockTimeoutMs;
    this.signer = opts.signer;
    this.acceptUnsigned = opts.unsigned === 'accept';
  }

  get backend(): 'posix_fs' | 'oss' {
    return this.store.backend;
  }

  // ---- public API ----

  async create(input: NewSnapshotRecord): Promise<SnapshotRecord> {
    const valid = validateInput(newRecordSchema, input, 'snapshot record');
    if (valid.alias !== undefined) assertValidAlias(valid.alias);
    await this.ready();
    const now = nowTimestamp();
    const record: StoredRecord = {
      version: SNAPSHOT_RECORD_VERSION,
      id: valid.id ?? newSnapshotId(),
      ...(valid.alias !== undefined ? { alias: valid.alias } : {}),
      ...(valid.tags?.length ? { tags: valid.tags } : {}),
      source: valid.source,
      resources: valid.resources,
      createdAt: now,
      updatedAt: now,
    };
    const locks: [LockName, LockMode][] = [[{ kind: 'record', id: record.id }, 'exclusive']];
    if (record.alias !== undefined) locks.push([{ kind: 'alias', alias: record.alias }, 'exclusive']);
    await this.withLocks(locks, async () => {
      if ((await this.store.readDoc('records', record.id)) !== undefined) {
        throw invalidRequest(`snapshot ${record.id} already exists`);
      }
      // Alias before record: a crash in between leaves a dangling alias, which lookups clean up.
      if (record.alias !== undefined) await this.claimAlias(record.alias, record.id);
      const written = await this.store.writeDoc(
        'records',
        record.id,
        this.encode('records', record.id, record),
        {
          ifAbsent: true,
        },
      );
      if (!written) throw invalidRequest(`snapshot ${record.id} already exists`);
    });
    this.log.debug(
      { id: record.id, alias: record.alias, kind: record.source.kind },
      'snapshot record created',
    );
    return { ...record };
  }

  async update(
    id: string,
    mutate: (record: SnapshotRecord) => void | Promise<void>,
  ): Promise<SnapshotRecord> {
    const key = this.requireId(id);
    await this.ready();
    return this.withLocks([[{ kind: 'record', id: key }, 'exclusive']], async () => {
      const current = await this.load(key);
      if (!current) throw snapshotNotFound(id);
      const draft = structuredClone(current);
      await mutate(draft);
      for (const field of ['id', 'version', 'createdAt', 'alias'] as const) {
        if (draft[field] !== current[field])
          throw invalidRequest(`update may not change the record's ${field}`);
      }
      if (JSON.stringify(draft.committed) !== JSON.stringify(current.committed)) {
        throw invalidRequest('update may not change committed data (publish commits a record)');
      }
      const { committed, ...rest } = draft;
      const next = validateInput(
        storedRecordSchema,
        { ...rest, updatedAt: nowTimestamp() },
        'updated record',
      );
      await this.store.writeDoc('records', key, this.encode('records', key, next));
      return view(next, committed);
    });
  }

  async get(idOrAlias: string): Promise<SnapshotRecord> {
    const found = await this.find(idOrAlias);
    if (!found) throw snapshotNotFound(idOrAlias);
    return found;
  }

  async find(idOrAlias: string): Promise<SnapshotRecord | undefined> {
    await this.ready();
    const id = await this.resolveId(idOrAlias);
    return id === undefined ? undefined : this.load(id);
  }

  async list(filter: ListFilter = {}): Promise<SnapshotRecord[]> {
    await this.ready();
    const kinds =
      filter.kind === undefined
        ? undefined
        : new Set(Array.isArray(filter.kind) ? filter.kind : [filter.kind]);
    // Records first: a marker read later can only be newer, never orphaned from what we list.
    const records = await this.store.readAllDocs('records');
    const commits = await this.store.readAllDocs('commits');
    const loaded = [...records].map(([id, text]) => {
      try {
        if (!isSnapshotId(id)) return undefined;
        const stored = this.decodeListed(storedRecordSchema, 'records', id, text, `record ${id}`);
        const markerText = commits.get(id);
        const marker =
          markerText === undefined
            ? undefined
            : this.decodeListed(commitMarkerSchema, 'commits', id, markerText, `commit marker of ${id}`);
        if (stored.id !== id || (marker && marker.id !== id))
          throw untrusted(`record ${id} holds another id`);
        return view(stored, marker?.committed);
      } catch (err) {
        // One unreadable record must not hide the others.
        this.log.error({ id, err: errMessage(err) }, 'skipping unreadable snapshot record');
        return undefined;
      }
    });
    for (const [ns, docs] of [
      ['records', records],
      ['commits', commits],
    ] as const)
      for (const id of this.listedDocs[ns].keys()) if (!docs.has(id)) this.listedDocs[ns].delete(id);
    return loaded
      .filter((r): r is SnapshotRecord => r !== undefined)
      .filter((r) => kinds === undefined || kinds.has(r.source.kind))
      .filter((r) => filter.sandboxId === undefined || sandboxIdOf(r) === filter.sandboxId)
      .filter((r) => filter.alias === undefined || r.alias === filter.alias)
      .filter((r) => filter.committed === undefined || (r.committed !== undefined) === filter.committed)
      .filter(
        (r) =>
          filter.buildStatus === undefined ||
          (r.source.kind === 'template' && r.source.build.status === filter.buildStatus),
      )
      .sort(compareCatalogOrder);
  }

  async bindAlias(alias: string, id: string): Promise<SnapshotRecord> {
    assertValidAlias(alias);
    const key = this.requireId(id);
    await this.ready();
    const locks: [LockName, LockMode][] = [
      [{ kind: 'record', id: key }, 'exclusive'],
      [{ kind: 'alias', alias }, 'exclusive'],
    ];
    return this.withLocks(locks, async () => {
      const current = await this.load(key);
      if (!current) throw snapshotNotFound(id);
      if (current.alias !== undefined && current.alias !== alias) {
        throw invalidRequest(`snapshot ${key} already has alias '${current.alias}'`);
      }
      await this.claimAlias(alias, key);
      if (current.alias === alias) return current;
      const { committed, ...stored } = current;
      const next: StoredRecord = { ...stored, alias, updatedAt: nowTimestamp() };
      await this.store.writeDoc('records', key, this.encode('records', key, next));
      return view(next, committed);
    });
  }

  async publish(id: string, input: PublishInput, opts: PublishOptions = {}): Promise<SnapshotRecord> {
    const key = this.requireId(id);
    const plan = await validatePublishInput(input);
    await this.ready();
    const locks: [LockName, LockMode][] = [
      [{ kind: 'record', id: key }, 'exclusive'],
      [{ kind: 'gc' }, 'shared'],
    ];
    return this.withLocks(locks, async (held) => {
      const stored = await this.readStored(key);
      if (!stored) throw snapshotNotFound(id);
      if ((await this.store.readDoc('commits', key)) !== undefined) {
        throw invalidRequest(`snapshot ${key} is already committed`);
      }
      let committed: CommittedSnapshot;
      try {
        const layers: LayerRef[] = [];
        for (const [i, file] of plan.layers.entries()) {
          const ref = await this.storeBlob(file, (digest) => ({ kind: 'layer', digest }), `layer ${i}`, opts);
          layers.push(ref);
        }
        const artifacts: Record<string, LayerRef> = {};
        for (const [name, file] of plan.artifacts) {
          const loc = (digest: string): BlobLocation => ({ kind: 'artifact', snapshotId: key, name, digest });
          artifacts[name] = await this.storeBlob(file, loc, name, opts);
        }
        committed = validateInput(
          committedSchema,
          { ...plan.committed, layers, artifacts },
          'committed snapshot',
        );
      } catch (err) {
        // Nothing references the artifacts yet; layers are shared and left to GC.
        await this.store
          .deleteArtifacts(key)
          .catch((e) => this.log.warn({ id: key, err: errMessage(e) }, 'clean-up failed'));
        throw wrap(`publish ${key}`, err);
      }
      for (const h of held) h.assertHeld();
      const marker: CommitMarker = {
        version: SNAPSHOT_RECORD_VERSION,
        id: key,
        committedAt: nowTimestamp(),
        committed,
      };
      // The commit marker is written last and only once: it is what makes the record committed.
      const written = await this.store.writeDoc('commits', key, this.encode('commits', key, marker), {
        ifAbsent: true,
      });
      if (!written) throw invalidRequest(`snapshot ${key} is already committed`);
      await opts.onProgress?.({ step: 'committed', id: key });
      const next: StoredRecord = { ...stored, updatedAt: marker.committedAt };
      if (next.source.kind === 'template' && next.source.build.status !== 'error') {
        next.source = {
          kind: 'template',
          build: {
            ...next.source.build,
            status: 'ready',
            finishedAt: next.source.build.finishedAt ?? marker.committedAt,
          },
        };
      }
      try {
        await this.store.writeDoc('records', key, this.encode('records', key, next));
      } catch (err) {
        // Committed regardless: the view derives `ready` from the marker.
        this.log.warn({ id: key, err: errMessage(err) }, 'record update after commit failed');
      }
      this.log.info(
        { id: key, layers: committed.layers.length, artifacts: Object.keys(committed.artifacts) },
        'snapshot published',
      );
      return view(next, committed);
    });
  }

  async fetch(ref: LayerRef): Promise<string> {
    const valid = validateInput(
      z.object({ digest: z.string(), size: z.number(), mediaType: z.string() }),
      ref,
      'layer ref',
    );
    if (!/^sha256:[0-9a-f]{64}$/.test(valid.digest))
      throw invalidRequest(`invalid layer digest ${JSON.stringify(valid.digest)}`);
    if (!Number.isSafeInteger(valid.size) || valid.size < 0)
      throw invalidRequest(`invalid layer size ${valid.size}`);
    await this.ready();
    try {
      return await this.store.fetchBlob({ kind: 'layer', digest: valid.digest }, valid.size);
    } catch (err) {
      throw wrap(`fetch layer ${valid.digest}`, err);
    }
  }

  async fetchArtifact(idOrAlias: string, name: string): Promise<string> {
    if (!isValidArtifactName(name)) throw invalidRequest(`invalid artifact name ${JSON.stringify(name)}`);
    const record = await this.get(idOrAlias);
    const ref = record.committed?.artifacts[name];
    if (!ref) {
      const why = record.committed ? 'has no artifact' : 'is not committed and has no artifact';
      throw notFound('artifact', `snapshot ${record.id} ${why} '${name}'`);
    }
    try {
      return await this.store.fetchBlob(
        { kind: 'artifact', snapshotId: record.id, name, digest: ref.digest },
        ref.size,
      );
    } catch (err) {
      throw wrap(`fetch artifact '${name}' of snapshot ${record.id}`, err);
    }
  }

  async delete(idOrAlias: string): Promise<boolean> {
    await this.ready();
    const id = await this.resolveId(idOrAlias);
    if (id === undefined) return false;
    return this.withLocks([[{ kind: 'record', id }, 'exclusive']], () => this.deleteLocked(id));
  }

  async gcLayers(): Promise<GcResult> {
    await this.ready();
    return this.withLocks([[{ kind: 'gc' }, 'exclusive']], async ([gcLock]) => {
      const referenced = new Set<string>();
      for (const [id, text] of await this.store.readAllDocs('commits')) {
        // An unreadable marker means unknown references: refuse to collect anything.
        const marker = parseStored(commitMarkerSchema, text, `commit marker of ${id}`);
        for (const layer of marker.committed.layers) referenced.add(layer.digest);
      }
      const removed: string[] = [];
      let kept = 0;
      for (const layer of await this.store.listLayers()) {
        if (referenced.has(layer.digest)) {
          kept++;
          continue;
        }
        gcLock!.assertHeld(); // a lease lost mid-GC means a publish may be running: stop deleting
        await this.store.deleteBlob({ kind: 'layer', digest: layer.digest });
        removed.push(layer.digest);
      }
      if (removed.length) this.log.info({ removed: removed.length, kept }, 'snapshot layer GC');
      return { removed, kept };
    });
  }

  async reconcile(opts: { staleAfterMs?: number } = {}): Promise<ReconcileResult> {
    const staleAfterMs = opts.staleAfterMs ?? DEFAULT_STALE_AFTER_MS;
    await this.ready();
    const result: ReconcileResult = {
      temporariesRemoved: await this.store.cleanupTemporaries(staleAfterMs),
      abandonedRecordsRemoved: [],
      orphansRemoved: [],
      danglingAliasesRemoved: [],
    };
    const now = Date.now();
    const recordIds = new Set(await this.store.listDocs('records'));
    const committedIds = new Set(await this.store.listDocs('commits'));
    for (const id of recordIds) {
      if (committedIds.has(id)) continue;
      const stored = await this.readStored(id).catch(() => undefined);
      if (!stored || stored.source.kind === 'template') continue;
      if (now - Date.parse(stored.updatedAt) < staleAfterMs) continue;
      // A publish that died: the record can never become committed by its (dead) publisher.
      const removed = await this.tryWithRecordLock(id, async () => {
        if ((await this.store.readDoc('commits', id)) !== undefined) return false;
        return this.deleteLocked(id);
      });
      if (removed) result.abandonedRecordsRemoved.push(id);
    }
    const owners = new Set([...committedIds, ...(await this.store.listArtifactOwners())]);
    for (const id of owners) {
      if (recordIds.has(id)) continue;
      const removed = await this.tryWithRecordLock(id, async () => {
        if ((await this.store.readDoc('records', id)) !== undefined) return false;
        await this.store.deleteDoc('commits', id);
        await this.store.deleteArtifacts(id);
        return true;
      });
      if (removed) result.orphansRemoved.push(id);
    }
    for (const alias of await this.store.listDocs('aliases')) {
      if (!isValidAlias(alias)) continue;
      const target = await this.aliasTarget(alias).catch(() => undefined);
      if (target === undefined) continue;
      if (await this.exists(target)) continue;
      if (!(await this.cleanDanglingAlias(alias, target))) result.danglingAliasesRemoved.push(alias);
    }
    const total =
      result.abandonedRecordsRemoved.length +
      result.orphansRemoved.length +
      result.danglingAliasesRemoved.length;
    if (total || result.temporariesRemoved) this.log.info(result, 'snapshot repository reconciled');
    return result;
  }

  async signUnsigned(): Promise<SignUnsignedResult> {
    await this.ready();
    const result: SignUnsignedResult = { signed: [], skipped: [] };
    for (const ns of ['records', 'commits'] as const) {
      for (const id of await this.store.listDocs(ns)) {
        if (!isSnapshotId(id)) continue;
        await this.withLocks([[{ kind: 'record', id }, 'exclusive']], async () => {
          const text = await this.store.readDoc(ns, id);
          if (text === undefined) return;
          const where = `${ns === 'records' ? 'record' : 'commit marker of'} ${id}`;
          try {
            const json = parseJson(text, where);
            if (this.signer.open(ns, id, json, where).signed) return;
            // Only what parses as a record is signed: the store is trusted now, not whatever it holds.
            const schema = ns === 'records' ? storedRecordSchema : commitMarkerSchema;
            const doc = parseStoredValue(schema as z.ZodType<{ id: string }>, json, where);
            if (doc.id !== id) throw untrusted(`${where} holds id ${doc.id}`);
            await this.store.writeDoc(ns, id, this.encode(ns, id, doc));
            result.signed.push(`${ns}/${id}`);
          } catch (err) {
            // A bad signature stays bad: signing over it would launder a tampered record.
            this.log.warn({ id, ns, err: errMessage(err) }, 'not signing an unreadable snapshot record');
            result.skipped.push(`${ns}/${id}`);
          }
        });
      }
    }
    if (result.signed.length || result.skipped.length)
      this.log.info(
        { signed: result.signed.length, skipped: result.skipped },
        'signed the unsigned records of the snapshot repository',
      );
    return result;
  }

  async readClaim(sandboxId: string): Promise<SandboxClaim | undefined> {
    const name = requireClaimName(sandboxId);
    await this.ready();
    const text = await this.store.readDoc('claims', name);
    if (text === undefined) return undefined;
    const claim = this.decode(sandboxClaimSchema, 'claims', name, text, `claim of sandbox ${sandboxId}`);
    if (claim.sandboxId !== sandboxId) throw untrusted(`claim of sandbox ${sandboxId} names another sandbox`);
    return claim;
  }

  async swapClaim(sandboxId: string, expected: ClaimExpectation, next: SandboxClaim): Promise<boolean> {
    const name = requireClaimName(sandboxId);
    if (next.sandboxId !== sandboxId) throw invalidRequest('a claim must name its own sandbox');
    await this.ready();
    // The record lock of the claim's own name (flock on posix_fs, a lease object with conditional PUTs on oss)
    // makes read-compare-write one step for every node of the repository.
    return this.withLocks([[{ kind: 'record', id: `claim-${name}` }, 'exclusive']], async (held) => {
      if (!claimMatches(await this.readClaim(sandboxId), expected)) return false;
      held[0]!.assertHeld();
      await this.store.writeDoc('claims', name, this.encode('claims', name, next));
      return true;
    });
  }

  async deleteClaim(sandboxId: string, expected: ClaimExpectation): Promise<boolean> {
    const name = requireClaimName(sandboxId);
    await this.ready();
    return this.withLocks([[{ kind: 'record', id: `claim-${name}` }, 'exclusive']], async () => {
      if (!claimMatches(await this.readClaim(sandboxId), expected)) return false;
      await this.store.deleteDoc('claims', name);
      return true;
    });
  }

  async readWebhooks(): Promise<SharedWebhooks> {
    await this.ready();
    const out: SharedWebhooks = { webhooks: [], unreadable: [] };
    for (const [name, text] of await this.store.readAllDocs('webhooks')) {
      try {
        const w = this.decode(sharedWebhookSchema, 'webhooks', name, text, `webhook ${name}`);
        if (w.id !== name) throw untrusted(`webhook document ${name} holds id ${w.id}`);
        out.webhooks.push(w);
      } catch (err) {
        this.log.warn({ id: name, err: errMessage(err) }, 'unreadable webhook definition in the repository');
        out.unreadable.push(name);
      }
    }
    return out;
  }

  async createWebhook(webhook: SharedWebhook, max: number): Promise<boolean> {
    requireWebhookId(webhook.id);
    const parsed = sharedWebhookSchema.safeParse(webhook);
    if (!parsed.success) throw invalidRequest(`invalid webhook definition: ${parsed.error.message}`);
    const w = parsed.data;
    await this.ready();
    return this.withLocks([[WEBHOOKS_LOCK, 'exclusive']], async (held) => {
      if ((await this.store.listDocs('webhooks')).length >= max) return false;
      held[0]!.assertHeld();
      return this.store.writeDoc('webhooks', w.id, this.encode('webhooks', w.id, w), { ifAbsent: true });
    });
  }

  async updateWebhook(
    id: string,
    mutate: (w: SharedWebhook) => SharedWebhook,
  ): Promise<SharedWebhook | undefined> {
    requireWebhookId(id);
    await this.ready();
    return this.withLocks([[WEBHOOKS_LOCK, 'exclusive']], async (held) => {
      const text = await this.store.readDoc('webhooks', id);
      if (text === undefined) return undefined;
      const current = this.decode(sharedWebhookSchema, 'webhooks', id, text, `webhook ${id}`);
      const next = sharedWebhookSchema.parse({
        ...mutate(current),
        id: current.id,
        createdAt: current.createdAt,
      });
      held[0]!.assertHeld();
      await this.store.writeDoc('webhooks', id, this.encode('webhooks', id, next));
      return next;
    });
  }

  async deleteWebhook(id: string): Promise<boolean> {
    requireWebhookId(id);
    await this.ready();
    return this.withLocks([[WEBHOOKS_LOCK, 'exclusive']], async () => {
      if ((await this.store.readDoc('webhooks', id)) === undefined) return false;
      await this.store.deleteDoc('webhooks', id);
      return true;
    });
  }

  async readSecrets(): Promise<SharedSecrets> {
    await this.ready();
    const out: SharedSecrets = { secrets: [], unreadable: [] };
    for (const [name, text] of await this.store.readAllDocs('secrets')) {
      try {
        const s = this.decode(sharedSecretSchema, 'secrets', name, text, `secret ${name}`);
        if (s.id !== name) throw untrusted(`secret document ${name} holds id ${s.id}`);
        out.secrets.push(s);
      } catch (err) {
        this.log.warn({ id: name, err: errMessage(err) }, 'unreadable secret in the repository');
        out.unreadable.push(name);
      }
    }
    return out;
  }

  async createSecret(secret: SharedSecret, max: number): Promise<SharedSecretCreate> {
    requireSecretId(secret.id);
    const parsed = sharedSecretSchema.safeParse(secret);
    if (!parsed.success) throw invalidRequest(`invalid secret: ${parsed.error.message}`);
    const s = parsed.data;
    await this.ready();
    return this.withLocks([[SECRETS_LOCK, 'exclusive']], async (held) => {
      const { secrets, unreadable } = await this.readSecrets();
      if (secrets.some((x) => x.name === s.name || x.id === s.id) || unreadable.includes(s.id))
        return 'name-taken';
      if (secrets.length + unreadable.length >= max) return 'full';
      held[0]!.assertHeld();
      const wrote = await this.store.writeDoc('secrets', s.id, this.encode('secrets', s.id, s), {
        ifAbsent: true,
      });
      return wrote ? 'created' : 'name-taken';
    });
  }

  async updateSecret(
    id: string,
    mutate: (s: SharedSecret) => SharedSecret,
  ): Promise<SharedSecret | undefined> {
    requireSecretId(id);
    await this.ready();
    return this.withLocks([[SECRETS_LOCK, 'exclusive']], async (held) => {
      const text = await this.store.readDoc('secrets', id);
      if (text === undefined) return undefined;
      const current = this.decode(sharedSecretSchema, 'secrets', id, text, `secret ${id}`);
      const next = sharedSecretSchema.parse({
        ...mutate(current),
        id: current.id,
        name: current.name,
        createdAt: current.createdAt,
      });
      held[0]!.assertHeld();
      await this.store.writeDoc('secrets', id, this.encode('secrets', id, next));
      return next;
    });
  }

  async deleteSecret(id: string): Promise<boolean> {
    requireSecretId(id);
    await this.ready();
    return this.withLocks([[SECRETS_LOCK, 'exclusive']], async () => {
      if ((await this.store.readDoc('secrets', id)) === undefined) return false;
      await this.store.deleteDoc('secrets', id);
      return true;
    });
  }

  async close(): Promise<void> {
    await this.store.close();
  }

  // ---- internals ----

  private encode(ns: SignedNamespace, name: string, value: object): string {
    return serialize(this.signer.seal(ns, name, value));
  }

  /** Parses, verifies (signature or unsigned policy) and validates a stored record or commit marker. */
  /**
   * {@link decode} for `list`, which reads every record and commit marker each time: a document whose text is the
   * one decoded before is not verified and parsed again (what `list` returns is always a copy: `view`).
   */
  private decodeListed<T>(
    schema: z.ZodType<T>,
    ns: 'records' | 'commits',
    name: string,
    text: string,
    where: string,
  ): T {
    const memo = this.listedDocs[ns];
    const hit = memo.get(name);
    if (hit?.text === text) return hit.value as T;
    const value = this.decode(schema, ns, name, text, where);
    memo.set(name, { text, value });
    return value;
  }

  private decode<T>(schema: z.ZodType<T>, ns: SignedNamespace, name: string, text: string, where: string): T {
    const opened = this.signer.open(ns, name, parseJson(text, where), where);
    if (!opened.signed) {
      if (!this.acceptUnsigned) {
        throw untrusted(
          `${where} is not signed (written before record signing, or by a node without the key; see snapshot.unsigned_records)`,
        );
      }
      if (!this.warnedUnsigned.has(`${ns}/${name}`)) {
        this.warnedUnsigned.add(`${ns}/${name}`);
        this.log.warn(
          { ns, id: name },
          'using an unsigned snapshot record (snapshot.unsigned_records = "accept")',
        );
      }
    }
    return parseStoredValue(schema, opened.doc, where);
  }

  private ready(): Promise<void> {
    this.initialized ??= this.store.init().catch((err) => {
      this.initialized = undefined;
      throw wrap('open snapshot repository', err);
    });
    return this.initialized;
  }

  private requireId(id: string): string {
    if (typeof id === 'string' && isUuid(id) && isSnapshotId(id.toLowerCase())) return id.toLowerCase();
    throw invalidRequest(`invalid snapshot id ${JSON.stringify(id)}: must be a UUIDv7`);
  }

  private async withLocks<T>(
    names: [LockName, LockMode][],
    fn: (held: LockHandle[]) => Promise<T>,
  ): Promise<T> {
    const held: LockHandle[] = [];
    try {
      for (const [name, mode] of names) held.push(await this.store.lock(name, mode, this.lockTimeoutMs));
      return await fn(held);
    } finally {
      for (const h of held.reverse()) {
        await h.release().catch((err) => this.log.warn({ err: errMessage(err) }, 'lock release failed'));
      }
    }
  }

  /** Runs `fn` under the record lock if it can be had quickly; undefined result (false) when busy. */
  private async tryWithRecordLock(id: string, fn: () => Promise<boolean>): Promise<boolean> {
    let handle: LockHandle;
    try {
      handle = await this.store.lock({ kind: 'record', id }, 'exclusive', 1000);
    } catch {
      return false;
    }
    try {
      return await fn();
    } finally {
      await handle.release().catch(() => {});
    }
  }

  private async readStored(id: string): Promise<StoredRecord | undefined> {
    const text = await this.store.readDoc('records', id);
    if (text === undefined) return undefined;
    const record = this.decode(storedRecordSchema, 'records', id, text, `record ${id}`);
    if (record.id !== id) throw new RepositoryError('Backend', `record ${id} holds id ${record.id}`);
    return record;
  }

  private async readCommit(id: string): Promise<CommitMarker | undefined> {
    const text = await this.store.readDoc('commits', id);
    if (text === undefined) return undefined;
    const marker = this.decode(commitMarkerSchema, 'commits', id, text, `commit marker of ${id}`);
    if (marker.id !== id)
      throw new RepositoryError('Backend', `commit marker of ${id} holds id ${marker.id}`);
    return marker;
  }

  private async load(id: string): Promise<SnapshotRecord | undefined> {
    const stored = await this.readStored(id);
    if (!stored) return undefined;
    const marker = await this.readCommit(id);
    return view(stored, marker?.committed);
  }

  private async exists(id: string): Promise<boolean> {
    return (await this.store.readDoc('records', id)) !== undefined;
  }

  private async aliasTarget(alias: string): Promise<string | undefined> {
    const text = await this.store.readDoc('aliases', alias);
    if (text === undefined) return undefined;
    const target = parseStored(z.string().refine(isSnapshotId), text, `alias '${alias}'`);
    return target;
  }

  /** Points alias → id. Caller holds the alias lock. Conflict when another existing record owns it. */
  private async claimAlias(alias: string, id: string): Promise<void> {
    const target = await this.aliasTarget(alias);
    if (target === id) return;
    if (target !== undefined && (await this.exists(target))) {
      throw new RepositoryError('AliasConflict', `alias '${alias}' is already used by snapshot ${target}`);
    }
    await this.store.writeDoc('aliases', alias, JSON.stringify(id));
  }

  /** Id first (if it looks like a UUID), then alias; dangling aliases are removed on the way. */
  private async resolveId(idOrAlias: string): Promise<string | undefined> {
    if (typeof idOrAlias !== 'string' || idOrAlias.length === 0) {
      throw invalidRequest('a snapshot id or alias is required');
    }
    if (isUuid(idOrAlias)) {
      const id = idOrAlias.toLowerCase();
      if (isSnapshotId(id) && (await this.exists(id))) return id;
    }
    if (!isValidAlias(idOrAlias)) {
      if (idOrAlias.length > MAX_ALIAS_LENGTH || !isUuid(idOrAlias)) assertValidAlias(idOrAlias);
      return undefined;
    }
    const target = await this.aliasTarget(idOrAlias);
    if (target === undefined) return undefined;
    // Alias documents are not signed: the (signed) record must carry the alias, or the alias was repointed.
    const stored = await this.readStored(target);
    if (stored) {
      if (stored.alias !== idOrAlias) {
        throw untrusted(
          `alias '${idOrAlias}' points at snapshot ${target}, whose signed record is ${stored.alias === undefined ? 'not named' : `named '${stored.alias}'`}`,
        );
      }
      return target;
    }
    return (await this.cleanDanglingAlias(idOrAlias, target)) ? target : undefined;
  }

  /**
   * Removes `alias` if it still points at `target` and `target` still does not exist, under the alias lock (a
   * create holds that lock between writing the alias and the record). Returns true when the target exists after all.
   */
  private async cleanDanglingAlias(alias: string, target: string): Promise<boolean> {
    try {
      return await this.withLocks([[{ kind: 'alias', alias }, 'exclusive']], async () => {
        const now = await this.aliasTarget(alias);
        if (now !== target) return now !== undefined && (await this.exists(now));
        if (await this.exists(target)) return true;
        await this.store.deleteDoc('aliases', alias);
        this.log.info({ alias, target }, 'removed dangling snapshot alias');
        return false;
      });
    } catch (err) {
      this.log.warn({ alias, err: errMessage(err) }, 'dangling alias clean-up skipped');
      return false;
    }
  }

  /** Deletes record `id`; the caller holds its record lock. */
  private async deleteLocked(id: string): Promise<boolean> {
    const existed = (await this.store.readDoc('records', id)) !== undefined;
    // A corrupt record can still be deleted; only its alias cannot be found from it.
    const stored = await this.readStored(id).catch((err) => {
      this.log.warn({ id, err: errMessage(err) }, 'deleting an unreadable snapshot record');
      return undefined;
    });
    if (stored?.alias !== undefined) {
      const alias = stored.alias;
      await this.withLocks([[{ kind: 'alias', alias }, 'exclusive']], async () => {
        if ((await this.aliasTarget(alias)) === id) await this.store.deleteDoc('aliases', alias);
      });
    }
    // Record first: from here on the snapshot is gone for every reader; the rest is clean-up.
    await this.store.deleteDoc('records', id);
    await this.store.deleteDoc('commits', id);
    await this.store.deleteArtifacts(id);
    if (existed) this.log.info({ id, alias: stored?.alias }, 'snapshot deleted');
    return existed;
  }

  private async storeBlob(
    file: LocalFile,
    locate: (digest: string) => BlobLocation,
    name: string,
    opts: PublishOptions,
  ): Promise<LayerRef> {
    // One pass: staging hashes the bytes it copies, so no separate digest read of the file is needed.
    const staged = await this.store.stageBlob(file.path);
    const { digest, size } = staged;
    const loc = locate(digest);
    let deduplicated: boolean;
    try {
      deduplicated = await this.store.hasBlob(loc, size);
      if (!deduplicated) await staged.commit(loc);
    } finally {
      await staged.discard();
    }
    const ref: LayerRef = { digest, size, mediaType: file.mediaType };
    await opts.onProgress?.({ step: 'blob-stored', kind: loc.kind, name, ref, deduplicated });
    return ref;
  }
}

interface PublishPlan {
  layers: LocalFile[];
  artifacts: [string, LocalFile][];
  committed: z.infer<typeof committedDraftSchema>;
}

async function validatePublishInput(input: PublishInput): Promise<PublishPlan> {
  const valid = validateInput(
    z.object({
      layers: z.array(localFileSchema),
      artifacts: z.record(z.string(), localFileSchema),
      committed: committedDraftSchema,
    }),
    input,
    'publish input',
  );
  const artifacts = Object.entries(valid.artifacts);
  for (const [name] of artifacts) {
    if (!isValidArtifactName(name)) {
      throw invalidRequest(
        `invalid artifact name ${JSON.stringify(name)}: 1-128 of A-Z a-z 0-9 . _ - (not starting with . _ -)`,
      );
    }
  }
  for (const file of [...valid.layers, ...artifacts.map(([, f]) => f)]) {
    const st = await stat(file.path).catch(() => undefined);
    if (!st) throw invalidRequest(`publish file ${file.path} does not exist`);
    if (!st.isFile()) throw invalidRequest(`publish file ${file.path} is not a regular file`);
  }
  return { layers: valid.layers, artifacts, committed: valid.committed };
}

/** The record readers see: stored fields + the commit marker; a committed template build reads as ready. */
function view(stored: StoredRecord, committed: CommittedSnapshot | undefined): SnapshotRecord {
  const record: SnapshotRecord = structuredClone(stored);
  if (committed) {
    record.committed = structuredClone(committed);
    if (
      record.source.kind === 'template' &&
      (record.source.build.status === 'waiting' || record.source.build.status === 'building')
    ) {
      record.source.build.status = 'ready';
    }
  }
  return record;
}

/** Sandbox ids are the node's own (lower-case letters and digits); anything else never names a claim document. */
function requireClaimName(sandboxId: string): string {
  if (typeof sandboxId === 'string' && /^[a-z0-9][a-z0-9-]{0,127}$/.test(sandboxId)) return sandboxId;
  throw invalidRequest(`invalid sandbox id ${JSON.stringify(sandboxId)}`);
}

/** A webhook id is a UUID (the node makes it); anything else never names a document. */
function requireWebhookId(id: string): void {
  if (typeof id !== 'string' || !isUuid(id) || id !== id.toLowerCase())
    throw invalidRequest(`invalid webhook id ${JSON.stringify(String(id).slice(0, 100))}`);
}

/** A secret id is `sec_` + 24 hex (the node makes it); anything else never names a document. */
function requireSecretId(id: string): void {
  if (typeof id !== 'string' || !SECRET_ID.test(id))
    throw invalidRequest(`invalid secret id ${JSON.stringify(String(id).slice(0, 100))}`);
}

function serialize(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

function parseJson(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    // The parser's message quotes the document; it stays in the log.
    throw new RepositoryError('Backend', `${where} is not valid JSON`, { cause: err });
  }
}

function snapshotNotFound(idOrAlias: string): RepositoryError {
  return notFound('snapshot', `snapshot '${idOrAlias}' not found`);
}

function wrap(what: string, err: unknown): RepositoryError {
  if (isRepositoryError(err)) return err;
  return backendError(what, err);
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
