// The `/secrets` API's store (E2B's project secrets, docs/networking.md#secrets): values sealed with AES-256-GCM
// under the node's secrets key ($AENV_HOME/secrets/secrets-key, 0600, created on the first start), bound to the
// secret's id and version, in the state database. Values leave it only through `valueOf`, which the egress
// proxy calls to fill `${e2b.secrets.<name>}` in a rule's header; no API answer carries one.

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Migration, StateDb } from '../state/db.js';
import { createManagedSecret, readManagedSecret, SecretError } from './managed-secret.js';

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
];

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
}

const toInfo = (r: Row): SecretInfo => ({
  secretID: r.id,
  name: r.name,
  currentVersion: r.version,
  metadata: JSON.parse(r.metadata) as Record<string, string>,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

const KEY_FILE = 'secrets-key';
const KEY_HEX = /^[0-9a-f]{64}$/;

/** The node's key for secret values, created on the first start (kept like the other managed secrets). */
export function resolveSecretsKey(homePath: string, expectedUid?: number): Buffer {
  const path = join(homePath, 'secrets', KEY_FILE);
  const opts = { expectedUid };
  const text =
    readManagedSecret(path, 65, opts) ??
    createManagedSecret(path, `${randomBytes(32).toString('hex')}\n`, 65, opts).contents;
  const hex = text.trim();
  if (!KEY_HEX.test(hex))
    throw new SecretError(
      `managed secrets key ${path} must hold exactly 64 lowercase hexadecimal characters`,
    );
  return Buffer.from(hex, 'hex');
}

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

  /** A page in creation order, after the secret with sequence `after`; `next` when there are more. */
  list(limit: number, after: number): { items: SecretInfo[]; next?: number } {
    const rows = this.db
      .prepare('SELECT * FROM secrets WHERE seq > ? ORDER BY seq LIMIT ?')
      .all(after, limit + 1) as Row[];
    const page = rows.slice(0, limit);
    return {
      items: page.map(toInfo),
      ...(rows.length > limit ? { next: page[page.length - 1]!.seq } : {}),
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
