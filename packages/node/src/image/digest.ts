// Content digests ("sha256:<hex>") and streaming verification of digest and size.

import { createHash, type Hash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { ImageError, shownValue } from './errors.js';

const ALGORITHMS = { sha256: 64, sha512: 128 } as const;
export type DigestAlgorithm = keyof typeof ALGORITHMS;

export interface ParsedDigest {
  algorithm: DigestAlgorithm;
  hex: string;
  digest: string;
}

/** A digest for a message, when it is shaped like one; other text (a document may be anything) is not repeated. */
function digestText(s: string): string {
  return /^[a-z0-9]{1,16}:[A-Za-z0-9]{0,140}$/.test(s) ? shownValue(s, 160) : 'value';
}

/** Validates "sha256:<64 hex>" / "sha512:<128 hex>" (lower-case hex, as OCI requires). Throws a plain Error. */
export function parseDigest(s: string): ParsedDigest {
  const colon = s.indexOf(':');
  if (colon < 0) throw new Error(`digest ${digestText(s)} must look like sha256:<hex>`);
  const algorithm = s.slice(0, colon);
  const hex = s.slice(colon + 1);
  if (!Object.hasOwn(ALGORITHMS, algorithm)) {
    const alg = /^[a-z0-9]{1,16}$/.test(algorithm) ? shownValue(algorithm) : '';
    throw new Error(`digest algorithm ${alg || '(invalid)'} is not supported (sha256, sha512)`);
  }
  const len = ALGORITHMS[algorithm as DigestAlgorithm];
  if (hex.length !== len || !/^[0-9a-f]+$/.test(hex)) {
    throw new Error(`digest ${digestText(s)} must have ${len} lower-case hex digits`);
  }
  return { algorithm: algorithm as DigestAlgorithm, hex, digest: s };
}

/** Like parseDigest, but a bad digest in registry/layout data is the image's fault. */
export function parseImageDigest(s: unknown, what: string): ParsedDigest {
  if (typeof s !== 'string') throw new ImageError('UnsupportedImage', `${what}: digest is missing`);
  try {
    return parseDigest(s);
  } catch (e) {
    throw new ImageError('UnsupportedImage', `${what}: ${(e as Error).message}`);
  }
}

export function digestOf(data: Buffer | string, algorithm: DigestAlgorithm = 'sha256'): string {
  return `${algorithm}:${createHash(algorithm).update(data).digest('hex')}`;
}

/** Checks an in-memory blob against its descriptor. */
export function verifyBuffer(data: Buffer, expected: { digest: string; size?: number }, what: string): void {
  if (expected.size !== undefined && data.length !== expected.size) {
    throw new ImageError(
      'DigestMismatch',
      `${what}: size mismatch: expected ${expected.size} bytes, got ${data.length} (${expected.digest})`,
    );
  }
  const { algorithm } = parseImageDigest(expected.digest, what);
  const actual = digestOf(data, algorithm);
  if (actual !== expected.digest) {
    throw new ImageError(
      'DigestMismatch',
      `${what}: digest mismatch: expected ${expected.digest}, got ${actual}`,
    );
  }
}

/**
 * Pass-through stream that hashes and counts what flows through it. With `expected.size` it fails as soon as
 * more bytes arrive than announced; at the end it fails on a short stream or a digest mismatch. The error is
 * raised from flush, so consumers downstream never see "success" for unverified data.
 */
export class VerifyingStream extends Transform {
  private readonly hash: Hash;
  private readonly algorithm: DigestAlgorithm;
  bytes = 0;

  constructor(
    private readonly expected: { digest: string; size?: number },
    private readonly what: string,
  ) {
    super();
    this.algorithm = parseImageDigest(expected.digest, what).algorithm;
    this.hash = createHash(this.algorithm);
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.expected.size !== undefined && this.bytes > this.expected.size) {
      cb(
        new ImageError(
          'DigestMismatch',
          `${this.what}: size mismatch: more than the expected ${this.expected.size} bytes (${this.expected.digest})`,
        ),
      );
      return;
    }
    this.hash.update(chunk);
    cb(null, chunk);
  }

  override _flush(cb: TransformCallback): void {
    if (this.expected.size !== undefined && this.bytes !== this.expected.size) {
      cb(
        new ImageError(
          'DigestMismatch',
          `${this.what}: size mismatch: expected ${this.expected.size} bytes, got ${this.bytes} (${this.expected.digest})`,
        ),
      );
      return;
    }
    const actual = `${this.algorithm}:${this.hash.digest('hex')}`;
    if (actual !== this.expected.digest) {
      cb(
        new ImageError(
          'DigestMismatch',
          `${this.what}: digest mismatch: expected ${this.expected.digest}, got ${actual}`,
        ),
      );
      return;
    }
    cb();
  }
}
