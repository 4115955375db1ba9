// Signed envd `/files` URLs as the proxy sees them (docs/security.md, "Signed file URLs"): parsing with envd's
// own URL rules, the node's lifetime limits, and routing of header-less URLs to the sandbox whose token
// signed them without one hash per running sandbox on every request.
import { timingSafeEqual } from 'node:crypto';
import { FILE_SIGNATURE_SHAPE, fileSignature } from '@aenv/protocol';

export interface SignedFilesRequest {
  path: string;
  op: 'read' | 'write';
  username: string;
  signature: string;
  expiration?: string;
}

/** The pathname and query of a request target exactly as envd parses them (envd/src/server.ts). */
export function envdUrl(target: string): URL {
  return new URL(target, 'http://envd');
}

/**
 * The signed-URL parameters of a `/files` request, or undefined when it carries no well-formed signature
 * (no hash is worth spending on it). Only GET (read) and POST (write) are signed operations in envd.
 */
export function parseSignedFiles(target: string, method: string): SignedFilesRequest | undefined {
  if (method !== 'GET' && method !== 'POST') return undefined;
  let url: URL;
  try {
    url = envdUrl(target);
  } catch {
    return undefined;
  }
  if (url.pathname !== '/files') return undefined;
  const q = url.searchParams;
  const signature = q.get('signature');
  if (!signature || !FILE_SIGNATURE_SHAPE.test(signature)) return undefined;
  const expiration = q.get('signature_expiration') ?? undefined;
  if (expiration !== undefined && !/^-?\d+$/.test(expiration)) return undefined;
  return {
    path: q.get('path') ?? '',
    op: method === 'GET' ? 'read' : 'write',
    username: q.get('username') ?? '',
    signature,
    ...(expiration !== undefined ? { expiration } : {}),
  };
}

/**
 * `[sandbox_proxy].signed_url_max_lifetime_secs`: an expiration further away than the cap is refused, a URL
 * signed without expiration works only while its sandbox is younger than the cap (the SDK signs without one
 * unless asked to, so refusing those outright would break `downloadUrl(path)`). Also sent to envd with /init.
 */
export function withinLifetime(
  s: SignedFilesRequest,
  sandboxCreatedAtMs: number,
  maxLifetimeSecs: number,
  nowMs: number,
): boolean {
  const now = Math.floor(nowMs / 1000);
  if (s.expiration === undefined) return now <= Math.floor(sandboxCreatedAtMs / 1000) + maxLifetimeSecs;
  const exp = Number(s.expiration);
  return exp >= now && exp - now <= maxLifetimeSecs;
}

export function signatureMatches(s: SignedFilesRequest, token: string): boolean {
  const expected = Buffer.from(fileSignature(s.path, s.op, s.username, token, s.expiration));
  const presented = Buffer.from(s.signature);
  return expected.length === presented.length && timingSafeEqual(expected, presented);
}

/** A token bucket: `ratePerSec` units a second, at most one second's worth banked. */
export class Budget {
  private units: number;
  private last: number;

  constructor(
    private readonly ratePerSec: number,
    private readonly now: () => number = Date.now,
  ) {
    this.units = ratePerSec;
    this.last = now();
  }

  /** Takes `n` units if they are there. */
  take(n: number): boolean {
    const t = this.now();
    this.units = Math.min(this.ratePerSec, this.units + ((t - this.last) / 1000) * this.ratePerSec);
    this.last = t;
    if (n > this.units) return false;
    this.units -= n;
    return true;
  }
}

/** A bounded map that forgets the least recently used entry first. */
export class LruMap<K, V> {
  private readonly map = new Map<K, V>();

  constructor(private readonly max: number) {}

  get(key: K): V | undefined {
    const v = this.map.get(key);
    if (v === undefined) return undefined;
    this.map.delete(key);
    this.map.set(key, v);
    return v;
  }

  set(key: K, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value as K);
  }

  delete(key: K): void {
    this.map.delete(key);
  }

  get size(): number {
    return this.map.size;
  }
}

export class SignedUrlBudgetExceeded extends Error {
  constructor() {
    super('too many new signed URLs to route; retry later');
  }
}

/** A sandbox a header-less signed URL may belong to. */
export interface SigningCandidate {
  id: string;
  createdAtMs: number;
  /** The sandbox's envd token (computed once per sandbox, not per request). */
  token: string;
}

/**
 * Routes header-less signed URLs. A signature cannot name its sandbox (the SDK hashes the token in), so the
 * first sight of a URL has to try each candidate; what is found is remembered by signature, so every later
 * request with that URL (the usual case: a link fetched again and again) costs one hash. First sights spend a
 * node-wide hash budget; past it they are refused (429) instead of eating the CPU.
 */
export class SignedUrlRouter {
  private readonly known: LruMap<string, string>;
  private readonly budget: Budget;

  constructor(
    private readonly opts: {
      maxLifetimeSecs: number;
      hashesPerSec: number;
      rememberUrls?: number;
      now?: () => number;
    },
  ) {
    this.known = new LruMap(opts.rememberUrls ?? 4096);
    this.budget = new Budget(opts.hashesPerSec, opts.now);
  }

  private get now(): number {
    return (this.opts.now ?? Date.now)();
  }

  /** Whether `s` is valid for this one sandbox now (routed by host or header: one hash). */
  verify(s: SignedFilesRequest, candidate: SigningCandidate): boolean {
    return (
      withinLifetime(s, candidate.createdAtMs, this.opts.maxLifetimeSecs, this.now) &&
      signatureMatches(s, candidate.token)
    );
  }

  /**
   * The id of the candidate whose token signed `s`, if any. `candidates` is called only on a first sight.
   * Throws SignedUrlBudgetExceeded when the hash budget is spent.
   */
  find(
    s: SignedFilesRequest,
    byId: (id: string) => SigningCandidate | undefined,
    candidates: () => Iterable<SigningCandidate>,
  ): string | undefined {
    const now = this.now;
    if (s.expiration !== undefined && !withinLifetime(s, 0, this.opts.maxLifetimeSecs, now)) return undefined;
    const rememberedId = this.known.get(s.signature);
    if (rememberedId !== undefined) {
      const c = byId(rememberedId);
      if (c && this.verify(s, c)) return c.id;
      this.known.delete(s.signature);
    }
    const eligible = [...candidates()].filter((c) =>
      withinLifetime(s, c.createdAtMs, this.opts.maxLifetimeSecs, now),
    );
    if (eligible.length === 0) return undefined;
    if (!this.budget.take(eligible.length)) throw new SignedUrlBudgetExceeded();
    for (const c of eligible) {
      if (signatureMatches(s, c.token)) {
        this.known.set(s.signature, c.id);
        return c.id;
      }
    }
    return undefined;
  }
}
