// Record signing (docs/snapshots.md#record-signing): every catalog record and commit marker carries an
// HMAC-SHA256 over its canonical JSON, its namespace and its name, keyed with the cluster's record signing
// secret. A commit marker lists the digest and size of every layer and artifact, and fetches verify blobs against
// those, so a signed marker binds the bytes that are restored as root. Whoever can write the bucket or shared
// directory but does not hold the secret can neither change a record nor move one to another name.

import { createHmac, timingSafeEqual } from 'node:crypto';
import { RepositoryError } from './errors.js';

/** The signed documents (aliases are bound through the `alias` field of the record they name). */
export type SignedNamespace = 'records' | 'commits' | 'claims' | 'webhooks' | 'secrets';

const FIELD = 'signature';
const ALG = 'hmac-sha256';
const DOMAIN = 'aenv snapshot record v1';

interface Signature {
  alg: string;
  keyId: string;
  mac: string;
}

/** JSON with object keys sorted at every level: the bytes the MAC is computed over. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value))
    return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const keys = Object.keys(value)
    .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export interface OpenedDocument {
  /** The document without its signature. */
  doc: Record<string, unknown>;
  signed: boolean;
}

export class RecordSigner {
  /** Names the key in records and messages (a one-way function of the secret, useless to forge with). */
  readonly keyId: string;
  private readonly key: Buffer;

  constructor(secret: string) {
    if (typeof secret !== 'string' || secret.length === 0)
      throw new Error('the snapshot record signing secret must be a non-empty string');
    this.key = createHmac('sha256', secret).update(`${DOMAIN} key`).digest();
    this.keyId = createHmac('sha256', secret).update(`${DOMAIN} key id`).digest('hex').slice(0, 16);
  }

  private mac(ns: SignedNamespace, name: string, doc: Record<string, unknown>): Buffer {
    return createHmac('sha256', this.key)
      .update(`${DOMAIN}\n${ns}\n${name}\n${canonicalJson(doc)}`)
      .digest();
  }

  /** `doc` with its signature field added (any previous one replaced). */
  seal(ns: SignedNamespace, name: string, doc: object): Record<string, unknown> {
    const body = { ...(doc as Record<string, unknown>) };
    delete body[FIELD];
    const signature: Signature = {
      alg: ALG,
      keyId: this.keyId,
      mac: this.mac(ns, name, body).toString('hex'),
    };
    return { ...body, [FIELD]: signature };
  }

  /**
   * Checks the signature of a parsed document stored under `ns/name`. A document without a signature field is
   * returned as unsigned (the caller's policy decides); a signature that does not verify is an
   * IntegrityMismatch naming `where`.
   */
  open(ns: SignedNamespace, name: string, json: unknown, where: string): OpenedDocument {
    if (!isObject(json)) throw untrusted(`${where} is not a JSON object`);
    if (!Object.hasOwn(json, FIELD)) return { doc: json, signed: false };
    const { [FIELD]: sig, ...doc } = json;
    if (!isObject(sig) || sig.alg !== ALG || typeof sig.mac !== 'string' || !/^[0-9a-f]{64}$/.test(sig.mac)) {
      throw untrusted(`${where} has a malformed signature`);
    }
    if (sig.keyId !== this.keyId) {
      const other = typeof sig.keyId === 'string' && /^[0-9a-f]{16}$/.test(sig.keyId) ? ` ${sig.keyId}` : '';
      throw untrusted(
        `${where} is signed with another key${other} (this node's key is ${this.keyId}): every node sharing a repository needs the same snapshot.record_signing_secret`,
      );
    }
    const expected = this.mac(ns, name, doc);
    if (!timingSafeEqual(expected, Buffer.from(sig.mac, 'hex')))
      throw untrusted(`${where} does not match its signature: it was changed after it was written`);
    return { doc, signed: true };
  }
}

export function untrusted(message: string): RepositoryError {
  return new RepositoryError('IntegrityMismatch', `${message}; refusing to use it`);
}
