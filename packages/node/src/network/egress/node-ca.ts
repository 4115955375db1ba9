// The node's egress CA (docs/networking.md#credentials-at-the-edge): sandboxes trust it (installed into their
// trust store at boot), and the egress proxy presents leaf certificates it signs for the names it intercepts.
// Key and certificate live together in one managed secret ($AENV_HOME/secrets/egress-ca, 0600), created on the
// first start and kept across restarts, so sandboxes that trusted it before a restart still do. In a cluster
// (the secrets key set for every node) the CA is derived from that key instead: every node has the same CA key
// and name, so a sandbox that moves to another node still trusts the leaves it presents.

import {
  createECDH,
  createHash,
  createPrivateKey,
  hkdfSync,
  randomBytes,
  webcrypto,
  X509Certificate as NodeX509,
} from 'node:crypto';
import { createSecureContext, type SecureContext } from 'node:tls';
import { join } from 'node:path';
// @peculiar/x509's dependency injection needs the Reflect metadata API loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createManagedSecret, readManagedSecret, SecretError } from '../../secrets/index.js';

const MANAGED_FILE = 'egress-ca';
const FILE_MAX_BYTES = 16 * 1024;
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 3600 * 1000;
/** The CA outlives any sandbox; its key never leaves the node. */
const CA_DAYS = 3650;
/** Leaves are short-lived and re-minted a day before they end. */
const LEAF_DAYS = 7;
/** Names whose leaf is kept (oldest dropped first). */
const LEAF_CACHE_ENTRIES = 1000;

const crypto = webcrypto;
type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;
x509.cryptoProvider.set(webcrypto as never);

export interface NodeCa {
  /** The CA certificate (PEM), for sandbox trust stores. */
  readonly certPem: string;
  /** A TLS context presenting a leaf for `name` (a normalized DNS name), minted once and cached. */
  contextFor(name: string): Promise<SecureContext>;
}

export interface LoadNodeCaOptions {
  /** Resolved `home_path`: the CA lives in `<homePath>/secrets/egress-ca`. */
  homePath: string;
  expectedUid?: number;
  now?: () => number;
  /**
   * The cluster's secrets key (`AENV_SECRETS_ENCRYPTION_KEY`): the CA is derived from it (the same on every
   * node) and no file is read or written.
   */
  clusterKey?: Buffer;
}

/** Reads the node's CA, creating it on the first start; or derives the cluster's from `clusterKey`. */
export async function loadOrCreateNodeCa(opts: LoadNodeCaOptions): Promise<NodeCa> {
  const path = join(opts.homePath, 'secrets', MANAGED_FILE);
  const managed = { expectedUid: opts.expectedUid };
  const now = opts.now ?? Date.now;
  const stored = opts.clusterKey
    ? await clusterCaFile(opts.clusterKey)
    : (readManagedSecret(path, FILE_MAX_BYTES, managed) ??
      createManagedSecret(path, await newCaFile(now()), FILE_MAX_BYTES, managed).contents);
  const { keyPem, certPem } = splitCaFile(stored, opts.clusterKey ? 'derived from the secrets key' : path);
  const signingKey = await crypto.subtle.importKey(
    'pkcs8',
    createPrivateKey(keyPem).export({ type: 'pkcs8', format: 'der' }),
    ALG,
    false,
    ['sign'],
  );
  return new LeafMinter(new x509.X509Certificate(certPem), certPem, signingKey, now);
}

async function newCaFile(now: number): Promise<string> {
  const keys = (await crypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  return caFile(keys, {
    serialNumber: serial(),
    name: `CN=aenv egress CA ${randomBytes(4).toString('hex')}, O=aenv`,
    notBefore: new Date(now - DAY_MS),
    notAfter: new Date(now + CA_DAYS * DAY_MS),
  });
}

/** P-256's group order. */
const P256_N = BigInt('0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551');
/** Fixed validity of the cluster CA: every node makes the same one, whenever it starts. */
const CLUSTER_CA_FROM = new Date('2025-01-01T00:00:00Z');
const CLUSTER_CA_UNTIL = new Date('2045-01-01T00:00:00Z');

/**
 * The cluster CA: its key, serial and name derived from the secrets key (HKDF, its own label), so every node
 * presents leaves that chain to the CA a sandbox trusted on any other. Only the self-signature differs between
 * nodes (ECDSA is randomized); a trust anchor is matched by name and key, never by that signature.
 */
async function clusterCaFile(clusterKey: Buffer): Promise<string> {
  const okm = Buffer.from(hkdfSync('sha256', clusterKey, 'aenv', 'aenv egress CA v1', 64));
  const d = (BigInt(`0x${okm.subarray(0, 48).toString('hex')}`) % (P256_N - 1n)) + 1n;
  const dBytes = Buffer.from(d.toString(16).padStart(64, '0'), 'hex');
  const ecdh = createECDH('prime256v1');
  ecdh.setPrivateKey(dBytes);
  const point = ecdh.getPublicKey(); // 0x04 || x || y
  const jwk = {
    kty: 'EC',
    crv: 'P-256',
    x: point.subarray(1, 33).toString('base64url'),
    y: point.subarray(33, 65).toString('base64url'),
  };
  const keys = {
    privateKey: await crypto.subtle.importKey('jwk', { ...jwk, d: dBytes.toString('base64url') }, ALG, true, [
      'sign',
    ]),
    publicKey: await crypto.subtle.importKey('jwk', jwk, ALG, true, ['verify']),
  } as CryptoKeyPair;
  const serialBytes = Buffer.from(okm.subarray(48, 64));
  serialBytes[0] = (serialBytes[0] as number) & 0x7f;
  const id = createHash('sha256').update(point).digest('hex').slice(0, 8);
  return caFile(keys, {
    serialNumber: serialBytes.toString('hex'),
    name: `CN=aenv egress CA cluster ${id}, O=aenv`,
    notBefore: CLUSTER_CA_FROM,
    notAfter: CLUSTER_CA_UNTIL,
  });
}

async function caFile(
  keys: CryptoKeyPair,
  c: { serialNumber: string; name: string; notBefore: Date; notAfter: Date },
): Promise<string> {
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    ...c,
    signingAlgorithm: ALG,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const key = x509.PemConverter.encode(
    await crypto.subtle.exportKey('pkcs8', keys.privateKey),
    'PRIVATE KEY',
  );
  return `${key}\n${cert.toString('pem')}\n`;
}

function splitCaFile(contents: string, path: string): { keyPem: string; certPem: string } {
  const key = /-----BEGIN PRIVATE KEY-----[\s\S]+?-----END PRIVATE KEY-----/.exec(contents);
  const cert = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(contents);
  if (!key || !cert)
    throw new SecretError(`managed egress CA ${path} must hold a PKCS#8 private key and a certificate (PEM)`);
  try {
    if (!new NodeX509(cert[0]).checkPrivateKey(createPrivateKey(key[0])))
      throw new SecretError(`managed egress CA ${path}: the certificate is not the key's`);
  } catch (e) {
    if (e instanceof SecretError) throw e;
    throw new SecretError(`managed egress CA ${path} cannot be read: ${(e as Error).message}`);
  }
  return { keyPem: key[0], certPem: `${cert[0]}\n` };
}

const serial = () => {
  const b = randomBytes(16);
  b[0] = (b[0] as number) & 0x7f; // positive
  return b.toString('hex');
};

class LeafMinter implements NodeCa {
  private readonly cache = new Map<string, { context: SecureContext; renewAt: number }>();
  private readonly pending = new Map<string, Promise<SecureContext>>();
  /** One key for every leaf of this process: minting is a signature, not a key generation. */
  private leafKeys: Promise<{ pair: CryptoKeyPair; pem: string }> | null = null;

  constructor(
    private readonly ca: x509.X509Certificate,
    readonly certPem: string,
    private readonly signingKey: CryptoKey,
    private readonly now: () => number,
  ) {}

  contextFor(name: string): Promise<SecureContext> {
    const hit = this.cache.get(name);
    if (hit && hit.renewAt > this.now()) return Promise.resolve(hit.context);
    const inFlight = this.pending.get(name);
    if (inFlight) return inFlight;
    const minting = this.mint(name).finally(() => this.pending.delete(name));
    this.pending.set(name, minting);
    return minting;
  }

  private async mint(name: string): Promise<SecureContext> {
    const keys = await (this.leafKeys ??= newLeafKeys());
    const now = this.now();
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: serial(),
      subject: [{ CN: [name] }],
      issuer: this.ca.subjectName,
      notBefore: new Date(now - 3600 * 1000),
      notAfter: new Date(now + LEAF_DAYS * DAY_MS),
      signingAlgorithm: ALG,
      publicKey: keys.pair.publicKey,
      signingKey: this.signingKey,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth], false),
        new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: name }], false),
        await x509.AuthorityKeyIdentifierExtension.create(this.ca.publicKey),
      ],
    });
    const context = createSecureContext({ key: keys.pem, cert: cert.toString('pem') });
    this.cache.delete(name);
    if (this.cache.size >= LEAF_CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(name, { context, renewAt: now + (LEAF_DAYS - 1) * DAY_MS });
    return context;
  }
}

async function newLeafKeys(): Promise<{ pair: CryptoKeyPair; pem: string }> {
  const pair = (await crypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const pem = x509.PemConverter.encode(
    await crypto.subtle.exportKey('pkcs8', pair.privateKey),
    'PRIVATE KEY',
  );
  return { pair, pem };
}
