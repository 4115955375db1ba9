// The `/secrets` API's store (E2B's project secrets, docs/networking.md#secrets): values sealed with AES-256-GCM
// under the secrets key (./secrets-key.ts: the same on every node of a cluster), bound to the secret's id and
// version, in the state database. Values leave it only through `valueOf`, which the egress proxy calls to fill
// `${e2b.secrets.<name>}` in a rule's header; no API answer carries one. In a cluster the rows are a copy of the
// shared repository's sealed records (`upsertShared`), kept by composition/shared-secrets.ts.

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { Migration, StateDb } from '../state/db.js';

export const secretMigrations: Migration[] = [
  {
    id: 'secrets-0001-secrets',
    up: (db) =>
      db.exec(`CREATE TABLE secrets (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL UNIQUE,
        version INTEGER NOT NULL,
        sealed TEXT NOT NULL,
        metadata TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
      )`),
  },
  {
    // 1 = a copy of a record in the shared repository; 0 = made while this node shared none (published later).
    id: 'secrets-0002-shared',
    up: (db) => db.exec(`ALTER TABLE secrets ADD COLUMN shared INTEGER NOT NULL DEFAULT 0`),
  },
];

/** A secret as it is stored: the value only sealed. What the shared repository holds too. */
export interface SealedSecret {
  id: string;
  name: string;
  version: number;
  sealed: string;
  metadata: Record<string, string>;
  createdAt: string;
  updatedAt: string;
}

/** Where a page of the list ends: secrets are listed by creation time, then id (the same on every node). */
export interface SecretCursor {
  createdAt: string;
  id: string;
}

/** E2B's `Secret`: metadata only. */
export interface SecretInfo {
  secretID: string;
  name: string;
  currentVersion: number;
  metadata: Record<string, string>;
  createdAt: string;
  updatedAt: string;
}

interface Row {
  seq: number;
  id: string;
  name: string;
  version: number;
  sealed: string;
  metadata: string;
  created_at: string;
  updated_at: string;
  shared: number;
}

const toInfo = (r: Row): SecretInfo => ({
  secretID: r.id,
  name: r.name,
  currentVersion: r.version,
  metadata: JSON.parse(r.metadata) as Record<string, string>,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

const toSealed = (r: Row): SealedSecret => ({
  id: r.id,
  name: r.name,
  version: r.version,
  sealed: r.sealed,
  metadata: JSON.parse(r.metadata) as Record<string, string>,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export const secretInfoOf = (s: SealedSecret): SecretInfo => ({
  secretID: s.id,
  name: s.name,
  currentVersion: s.version,
  metadata: s.metadata,
  createdAt: s.createdAt,
  updatedAt: s.updatedAt,
});

export class SecretStore {
  constructor(
    private readonly db: StateDb,
    private readonly key: Buffer,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Creates the secret (version 1); null when the name is taken. */
  create(name: string, value: string, metadata: Record<string, string>): SecretInfo | null {
    const id = `sec_${randomBytes(12).toString('hex')}`;
    const at = this.now().toISOString();
    const r = this.db
      .prepare(
        `INSERT INTO secrets (id, name, version, sealed, metadata, created_at, updated_at)
         VALUES (?, ?, 1, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING`,
      )
      .run(id, name, this.seal(value, id, 1), JSON.stringify(metadata), at, at);
    return r.changes === 1 ? this.get(id)! : null;
  }

  /** By id (`sec_…`) or name. */
  get(ref: string): SecretInfo | undefined {
    const r = this.row(ref);
    return r ? toInfo(r) : undefined;
  }

  /** A page in creation order, after `after`; `next` when there are more. */
  list(limit: number, after?: SecretCursor): { items: SecretInfo[]; next?: SecretCursor } {
    const rows = (
      after
        ? this.db
            .prepare(
              `SELECT * FROM secrets WHERE created_at > ? OR (created_at = ? AND id > ?)
               ORDER BY created_at, id LIMIT ?`,
            )
            .all(after.createdAt, after.createdAt, after.id, limit + 1)
        : this.db.prepare('SELECT * FROM secrets ORDER BY created_at, id LIMIT ?').all(limit + 1)
    ) as Row[];
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return {
      items: page.map(toInfo),
      ...(rows.length > limit && last ? { next: { createdAt: last.created_at, id: last.id } } : {}),
    };
  }

  /** Stores `value` as the next version; metadata is replaced when given. Undefined when there is no such secret. */
  update(ref: string, value: string, metadata?: Record<string, string>): SecretInfo | undefined {
    const r = this.row(ref);
    if (!r) return undefined;
    const version = r.version + 1;
    this.db
      .prepare('UPDATE secrets SET version = ?, sealed = ?, metadata = ?, updated_at = ? WHERE id = ?')
      .run(
        version,
        this.seal(value, r.id, version),
        metadata ? JSON.stringify(metadata) : r.metadata,
        this.now().toISOString(),
        r.id,
      );
    return this.get(r.id);
  }

  count(): number {
    return (this.db.prepare('SELECT COUNT(*) AS n FROM secrets').get() as { n: number }).n;
  }

  /** False when there was no such secret. */
  delete(ref: string): boolean {
    const r = this.row(ref);
    if (!r) return false;
    return this.db.prepare('DELETE FROM secrets WHERE id = ?').run(r.id).changes === 1;
  }

  /** The current value of the secret named `name` (the egress proxy's only way in). */
  valueOf(name: string): string | undefined {
    const r = this.db.prepare('SELECT * FROM secrets WHERE name = ?').get(name) as Row | undefined;
    return r ? this.open(r.sealed, r.id, r.version) : undefined;
  }

  /** A new secret's record (version 1), sealed; nothing stored. */
  newRecord(name: string, value: string, metadata: Record<string, string>): SealedSecret {
    const id = `sec_${randomBytes(12).toString('hex')}`;
    const at = this.now().toISOString();
    return { id, name, version: 1, sealed: this.seal(value, id, 1), metadata, createdAt: at, updatedAt: at };
  }

  /** `current` with `value` as its next version, sealed; metadata replaced when given. Nothing stored. */
  nextVersion(current: SealedSecret, value: string, metadata?: Record<string, string>): SealedSecret {
    const version = current.version + 1;
    return {
      ...current,
      version,
      sealed: this.seal(value, current.id, version),
      metadata: metadata ?? current.metadata,
      updatedAt: this.now().toISOString(),
    };
  }

  /** The stored record by id or name. */
  sealedOf(ref: string): SealedSecret | undefined {
    const r = this.row(ref);
    return r ? toSealed(r) : undefined;
  }

  /** Stores a copy of a shared record; a local row holding its name under another id (deleted elsewhere) goes. */
  upsertShared(s: SealedSecret): void {
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM secrets WHERE name = ? AND id != ?').run(s.name, s.id);
      this.db
        .prepare(
          `INSERT INTO secrets (id, name, version, sealed, metadata, created_at, updated_at, shared)
           VALUES (?, ?, ?, ?, ?, ?, ?, 1)
           ON CONFLICT(id) DO UPDATE SET name = excluded.name, version = excluded.version, sealed = excluded.sealed,
             metadata = excluded.metadata, created_at = excluded.created_at, updated_at = excluded.updated_at,
             shared = 1`,
        )
        .run(s.id, s.name, s.version, s.sealed, JSON.stringify(s.metadata), s.createdAt, s.updatedAt);
    })();
  }

  /** Secrets made while this node shared no repository. */
  unshared(): SealedSecret[] {
    return (this.db.prepare('SELECT * FROM secrets WHERE shared = 0 ORDER BY seq').all() as Row[]).map(
      toSealed,
    );
  }

  sharedIds(): string[] {
    return (this.db.prepare('SELECT id FROM secrets WHERE shared = 1').all() as { id: string }[]).map(
      (r) => r.id,
    );
  }

  /** Drops the local row of `id` (gone from the repository). */
  remove(id: string): void {
    this.db.prepare('DELETE FROM secrets WHERE id = ?').run(id);
  }

  private row(ref: string): Row | undefined {
    const column = ref.startsWith('sec_') ? 'id' : 'name';
    return this.db.prepare(`SELECT * FROM secrets WHERE ${column} = ?`).get(ref.toLowerCase()) as
      Row | undefined;
  }

  /** iv.tag.ciphertext (base64url each); the id and version are authenticated, so a row cannot be swapped. */
  private seal(value: string, id: string, version: number): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    c.setAAD(Buffer.from(`${id}\n${version}`));
    const body = Buffer.concat([c.update(value, 'utf8'), c.final()]);
    return [iv, c.getAuthTag(), body].map((b) => b.toString('base64url')).join('.');
  }

  private open(sealed: string, id: string, version: number): string {
    const [iv, tag, body] = sealed.split('.').map((p) => Buffer.from(p, 'base64url'));
    const d = createDecipheriv('aes-256-gcm', this.key, iv!);
    d.setAAD(Buffer.from(`${id}\n${version}`));
    d.setAuthTag(tag!);
    return Buffer.concat([d.update(body!), d.final()]).toString('utf8');
  }
}
