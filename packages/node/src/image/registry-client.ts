// OCI distribution v2 client (pull side) over undici: manifests and blobs, anonymous / bearer-token / basic
// auth, plain HTTP only for hosts configured as insecure (registries, their redirects and token realms alike),
// at most MAX_REDIRECTS manual redirects (Authorization is never sent to another origin), clear errors. What a
// registry writes in an error body goes to the log, never into an error message: messages reach API callers.

import { Agent, errors as undiciErrors, request, type Dispatcher } from 'undici';
import type { Readable } from 'node:stream';
import { ImageError } from './errors.js';
import { lookupDockerCredentials, type BasicCredentials } from './credentials.js';
import { digestOf, parseDigest } from './digest.js';
import { MANIFEST_ACCEPT, MAX_MANIFEST_BYTES } from './manifest.js';
import { DEFAULT_RETRY, withRetry, type RetryPolicy } from './retry.js';

export interface RegistryClientOptions {
  /** Registries (host[:port]) reached over plain HTTP. Everything else is HTTPS with certificate checks. */
  insecureRegistries?: readonly string[];
  /** Registry host → base URL of its API ("https://mirror.internal:5000"); for mirrors and API hosts that
   *  differ from the registry name. */
  endpoints?: Readonly<Record<string, string>>;
  /** Directory holding docker's config.json; undefined = no stored credentials. */
  dockerConfigDir?: string;
  retry?: RetryPolicy;
  connectTimeoutMs?: number;
  headersTimeoutMs?: number;
  /** Idle time allowed between two body chunks. */
  bodyTimeoutMs?: number;
  userAgent?: string;
  logger?: { debug(obj: object, msg?: string): void; warn(obj: object, msg?: string): void };
}

export interface RepositoryRef {
  registry: string;
  repository: string;
}

export interface RequestContext {
  signal?: AbortSignal;
  /** Credentials for this pull only (they take precedence over docker's config.json). */
  credentials?: BasicCredentials;
}

export interface FetchedManifest {
  body: Buffer;
  contentType: string | undefined;
  digest: string;
}

export interface OpenedBlob {
  body: Readable;
  contentLength: number | undefined;
}

interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

interface CachedAuth {
  header: string;
  expiresAt: number;
}

const MAX_REDIRECTS = 5;
const MAX_ERROR_BODY = 64 * 1024;

/**
 * API base URLs of registries whose API is not served at their name, used when the config names no endpoint
 * for them: Docker Hub's, as every OCI client has it built in (docs/images.md). A configured endpoint (a
 * mirror) replaces it.
 */
export const BUILTIN_REGISTRY_ENDPOINTS: Readonly<Record<string, string>> = {
  'docker.io': 'https://registry-1.docker.io',
};

/**
 * Other names `docker login` stores a built-in endpoint's credentials under (Docker Hub's: index.docker.io).
 * Used only with the built-in endpoint: a mirror is not Docker Hub and gets no Docker Hub password.
 */
const BUILTIN_CREDENTIAL_ALIASES: Readonly<Record<string, readonly string[]>> = {
  'docker.io': ['index.docker.io'],
};

/** Parses a WWW-Authenticate header: `Bearer realm="…",service="…",scope="…"` or `Basic realm="…"`. */
export function parseWwwAuthenticate(header: string): Challenge | undefined {
  const m = /^\s*([A-Za-z]+)\s*(.*)$/s.exec(header);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  const re = /([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))\s*,?\s*/g;
  const rest = m[2] ?? '';
  let p: RegExpExecArray | null;
  while ((p = re.exec(rest)) !== null) {
    if (p[0].length === 0) break;
    params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, '$1') : (p[3] ?? '');
  }
  return { scheme: m[1]!.toLowerCase(), params };
}

function headerValue(h: Dispatcher.ResponseData['headers'], name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

async function readLimited(
  body: Readable & { dump?: () => Promise<void> },
  limit: number,
  what: string,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of body) {
    const chunk = c as Buffer;
    n += chunk.length;
    if (n > limit) {
      body.destroy();
      throw new ImageError('UnsupportedImage', `${what} is larger than ${limit} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

async function discard(body: Readable): Promise<string> {
  try {
    const buf = await readLimited(body, MAX_ERROR_BODY, 'error body');
    return buf.toString('utf8');
  } catch {
    body.destroy();
    return '';
  }
}

/** "MANIFEST_UNKNOWN: manifest unknown" from a registry error body, or a trimmed body. */
function registryErrorText(body: string): string {
  try {
    const doc = JSON.parse(body) as { errors?: { code?: string; message?: string }[] };
    if (Array.isArray(doc.errors) && doc.errors.length > 0) {
      return doc.errors.map((e) => [e.code, e.message].filter(Boolean).join(': ')).join('; ');
    }
  } catch {
    // not JSON
  }
  return body.trim().slice(0, 200);
}

function describeNetworkError(e: unknown): string {
  const err = e as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
  const code = err.code ?? err.cause?.code;
  const msg = err.cause?.message ?? err.message;
  return code ? `${code}: ${msg}` : msg;
}

export class RegistryClient {
  private readonly agent: Agent;
  private readonly insecure: Set<string>;
  private readonly auth = new Map<string, CachedAuth>();
  private readonly retry: RetryPolicy;

  constructor(private readonly opts: RegistryClientOptions = {}) {
    this.insecure = new Set(
      (opts.insecureRegistries ?? []).map((r) => r.trim().replace(/\/+$/, '').toLowerCase()),
    );
    this.retry = opts.retry ?? DEFAULT_RETRY;
    this.agent = new Agent({
      connect: { timeout: opts.connectTimeoutMs ?? 10_000 },
      headersTimeout: opts.headersTimeoutMs ?? 30_000,
      bodyTimeout: opts.bodyTimeoutMs ?? 60_000,
      keepAliveTimeout: 10_000,
      connections: 16,
    });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  isInsecure(registry: string): boolean {
    return this.insecure.has(registry.toLowerCase());
  }

  /** Plain HTTP only to a host listed in insecure_registries or to the origin the operator configured. */
  private plainHttpAllowed(url: URL, configuredOrigin: string): boolean {
    return url.protocol === 'https:' || url.origin === configuredOrigin || this.isInsecure(url.host);
  }

  /** The configured endpoint of `registry`, else its built-in one; undefined = its API is served at its name. */
  private endpointFor(registry: string): { url: string; configured: boolean } | undefined {
    const configured = this.opts.endpoints?.[registry];
    if (configured) return { url: configured, configured: true };
    const builtin = BUILTIN_REGISTRY_ENDPOINTS[registry];
    return builtin ? { url: builtin, configured: false } : undefined;
  }

  /** Base URL of a registry's API, without trailing slash. */
  baseUrl(registry: string): string {
    const endpoint = this.endpointFor(registry);
    if (endpoint?.configured) {
      const override = endpoint.url;
      if (!/^https?:\/\//.test(override)) {
        throw new ImageError(
          'Internal',
          `endpoint for ${registry} must be an http(s) URL, got "${override}"`,
        );
      }
      if (override.startsWith('http:') && !this.isInsecure(registry)) {
        throw new ImageError(
          'Internal',
          `endpoint for ${registry} is plain HTTP; list ${registry} in insecure_registries`,
        );
      }
      return override.replace(/\/+$/, '');
    }
    if (endpoint) return endpoint.url;
    return `${this.isInsecure(registry) ? 'http' : 'https'}://${registry}`;
  }

  /** Fetches a manifest or index by tag or digest and checks it against the digest it claims or was asked for. */
  async getManifest(
    ref: RepositoryRef,
    reference: string,
    ctx: RequestContext = {},
  ): Promise<FetchedManifest> {
    const what = `manifest ${ref.registry}/${ref.repository}${reference.includes(':') ? '@' : ':'}${reference}`;
    return withRetry(
      async () => {
        const res = await this.send(
          ref,
          'GET',
          `/v2/${ref.repository}/manifests/${reference}`,
          { accept: MANIFEST_ACCEPT },
          ctx,
          what,
        );
        const body = await readLimited(res.body, MAX_MANIFEST_BYTES, what);
        const contentType = headerValue(res.headers, 'content-type');
        let expected: string | undefined;
        if (reference.includes(':')) expected = reference;
        else {
          const header = headerValue(res.headers, 'docker-content-digest');
          if (header) {
            try {
              expected = parseDigest(header.trim()).digest;
            } catch {
              expected = undefined; // an unusable header is ignored; the body's own digest is used
            }
          }
        }
        const algorithm = expected ? parseDigest(expected).algorithm : 'sha256';
        const actual = digestOf(body, algorithm);
        if (expected && actual !== expected) {
          throw new ImageError(
            'DigestMismatch',
            `${what}: digest mismatch: expected ${expected}, got ${actual}`,
          );
        }
        return { body, contentType, digest: actual };
      },
      this.retry,
      this.retryHooks(ctx, what),
    );
  }

  /** Opens a blob for streaming. The caller verifies digest and size while reading. */
  async openBlob(ref: RepositoryRef, digest: string, ctx: RequestContext = {}): Promise<OpenedBlob> {
    const what = `blob ${digest} of ${ref.registry}/${ref.repository}`;
    return withRetry(
      async () => {
        const res = await this.send(ref, 'GET', `/v2/${ref.repository}/blobs/${digest}`, {}, ctx, what);
        const len = headerValue(res.headers, 'content-length');
        return {
          body: res.body,
          contentLength: len !== undefined && /^\d+$/.test(len) ? Number(len) : undefined,
        };
      },
      this.retry,
      this.retryHooks(ctx, what),
    );
  }

  private retryHooks(ctx: RequestContext, what: string) {
    return {
      ...(ctx.signal ? { signal: ctx.signal } : {}),
      onRetry: (e: unknown, attempt: number, delayMs: number) =>
        this.opts.logger?.warn({ err: (e as Error).message, attempt, delayMs }, `retrying ${what}`),
    };
  }

  private cacheKey(ref: RepositoryRef): string {
    return `${ref.registry}/${ref.repository}`;
  }

  private async credentialsFor(
    ref: RepositoryRef,
    ctx: RequestContext,
  ): Promise<BasicCredentials | undefined> {
    if (ctx.credentials) return ctx.credentials;
    if (!this.opts.dockerConfigDir) return undefined;
    const aliases: string[] = [];
    const endpoint = this.endpointFor(ref.registry);
    if (endpoint && !endpoint.configured) aliases.push(...(BUILTIN_CREDENTIAL_ALIASES[ref.registry] ?? []));
    if (endpoint) {
      try {
        aliases.push(new URL(endpoint.url).host);
      } catch {
        // invalid endpoint URLs fail later, with a clearer error
      }
    }
    return lookupDockerCredentials(this.opts.dockerConfigDir, ref.registry, aliases);
  }

  /**
   * One request with auth and redirects. Returns only 2xx responses (body unread); everything else becomes
   * an ImageError (transient for network failures, 429 and 5xx).
   */
  private async send(
    ref: RepositoryRef,
    method: 'GET' | 'HEAD',
    path: string,
    headers: Record<string, string>,
    ctx: RequestContext,
    what: string,
  ): Promise<Dispatcher.ResponseData> {
    const key = this.cacheKey(ref);
    let authTried = false;
    for (;;) {
      const cached = this.auth.get(key);
      const auth = cached && cached.expiresAt > Date.now() ? cached.header : undefined;
      const res = await this.requestFollowingRedirects(
        ref,
        method,
        `${this.baseUrl(ref.registry)}${path}`,
        headers,
        auth,
        ctx,
        what,
      );
      if (res.statusCode >= 200 && res.statusCode < 300) return res;
      const text = await discard(res.body);
      const detail = registryErrorText(text);
      if (detail) {
        this.opts.logger?.warn(
          { registry: ref.registry, status: res.statusCode, body: detail },
          `${what}: registry error`,
        );
      }
      if (res.statusCode === 401 && !authTried) {
        authTried = true;
        const challenge = parseWwwAuthenticate(headerValue(res.headers, 'www-authenticate') ?? '');
        await this.authenticate(ref, challenge, ctx, what);
        continue;
      }
      throw this.statusError(res.statusCode, what, ref, ctx, authTried);
    }
  }

  private statusError(
    status: number,
    what: string,
    ref: RepositoryRef,
    ctx: RequestContext,
    authTried: boolean,
  ): ImageError {
    if (status === 404) return new ImageError('NotFound', `${what} not found`);
    if (status === 401 || status === 403) {
      const how = ctx.credentials
        ? 'with the given credentials'
        : authTried
          ? 'with the available credentials'
          : 'anonymously';
      return new ImageError(
        'Unauthorized',
        `${what}: access denied ${how} (HTTP ${status}); the image may not exist or may be private ` +
          `(log in to ${ref.registry} with docker login, or pass credentials)`,
      );
    }
    if (status === 429 || status >= 500) {
      return new ImageError('Unreachable', `${what}: registry answered HTTP ${status}`, {
        transient: true,
      });
    }
    return new ImageError('Internal', `${what}: registry answered HTTP ${status}`);
  }

  private async authenticate(
    ref: RepositoryRef,
    challenge: Challenge | undefined,
    ctx: RequestContext,
    what: string,
  ): Promise<void> {
    const creds = await this.credentialsFor(ref, ctx);
    const key = this.cacheKey(ref);
    if (challenge?.scheme === 'basic') {
      if (!creds) {
        throw new ImageError(
          'Unauthorized',
          `${what}: ${ref.registry} requires a login and no credentials are configured for it`,
        );
      }
      const header = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;
      this.auth.set(key, { header, expiresAt: Number.POSITIVE_INFINITY });
      return;
    }
    if (challenge?.scheme !== 'bearer' || !challenge.params.realm) {
      throw new ImageError(
        'Unauthorized',
        `${what}: ${ref.registry} answered 401 without a usable WWW-Authenticate challenge`,
      );
    }
    let realm: URL;
    try {
      realm = new URL(challenge.params.realm);
    } catch {
      throw new ImageError('Unauthorized', `${what}: the token realm is not a URL`);
    }
    if (
      (realm.protocol !== 'https:' && realm.protocol !== 'http:') ||
      !this.plainHttpAllowed(realm, new URL(this.baseUrl(ref.registry)).origin)
    ) {
      throw new ImageError(
        'Unauthorized',
        `${what}: token realm ${realm.protocol === 'http:' ? realm.origin : realm.protocol} is not HTTPS (plain HTTP only for hosts in insecure_registries)`,
      );
    }
    if (challenge.params.service) realm.searchParams.set('service', challenge.params.service);
    const scope = `repository:${ref.repository}:pull`;
    const scopes = new Set((challenge.params.scope ?? '').split(' ').filter(Boolean));
    scopes.add(scope);
    for (const s of scopes) realm.searchParams.append('scope', s);
    const headers: Record<string, string> = { 'user-agent': this.opts.userAgent ?? 'aenv' };
    if (creds)
      headers.authorization = `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;

    let res: Dispatcher.ResponseData;
    try {
      res = await request(realm, {
        method: 'GET',
        headers,
        dispatcher: this.agent,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
      });
    } catch (e) {
      if (ctx.signal?.aborted) throw e;
      throw new ImageError(
        'Unreachable',
        `${what}: token endpoint ${realm.origin} unreachable: ${describeNetworkError(e)}`,
        {
          cause: e,
          transient: true,
        },
      );
    }
    const text = (await discard(res.body)) || '';
    if (res.statusCode === 401 || res.statusCode === 403) {
      throw new ImageError(
        'Unauthorized',
        `${what}: token endpoint refused ${creds ? 'the credentials' : 'anonymous access'} (HTTP ${res.statusCode})`,
      );
    }
    if (res.statusCode < 200 || res.statusCode >= 300) {
      throw new ImageError('Unreachable', `${what}: token endpoint answered HTTP ${res.statusCode}`, {
        transient: res.statusCode >= 500,
      });
    }
    let token: string | undefined;
    let expiresIn = 60;
    try {
      const doc = JSON.parse(text) as { token?: unknown; access_token?: unknown; expires_in?: unknown };
      token =
        typeof doc.token === 'string'
          ? doc.token
          : typeof doc.access_token === 'string'
            ? doc.access_token
            : undefined;
      if (typeof doc.expires_in === 'number' && doc.expires_in > 0) expiresIn = doc.expires_in;
    } catch {
      token = undefined;
    }
    if (!token) throw new ImageError('Unauthorized', `${what}: token endpoint returned no token`);
    // Renew a little early so that a token does not expire between check and use.
    this.auth.set(key, {
      header: `Bearer ${token}`,
      expiresAt: Date.now() + Math.max(expiresIn - 10, 1) * 1000,
    });
  }

  private async requestFollowingRedirects(
    ref: RepositoryRef,
    method: 'GET' | 'HEAD',
    startUrl: string,
    headers: Record<string, string>,
    auth: string | undefined,
    ctx: RequestContext,
    what: string,
  ): Promise<Dispatcher.ResponseData> {
    let url = new URL(startUrl);
    const origin = url.origin;
    let hopOrigins = '';
    for (let hop = 0; ; hop++) {
      const h: Record<string, string> = { 'user-agent': this.opts.userAgent ?? 'aenv', ...headers };
      if (auth && url.origin === origin) h.authorization = auth;
      let res: Dispatcher.ResponseData;
      try {
        res = await request(url, {
          method,
          headers: h,
          dispatcher: this.agent,
          ...(ctx.signal ? { signal: ctx.signal } : {}),
        });
      } catch (e) {
        if (ctx.signal?.aborted) throw e;
        const tlsHint =
          url.protocol === 'https:' &&
          /EPROTO|SSL|TLS|wrong version|ECONNRESET/i.test(describeNetworkError(e))
            ? `; if ${ref.registry} serves plain HTTP, list it in insecure_registries`
            : '';
        throw new ImageError(
          'Unreachable',
          `${what}: registry ${ref.registry} unreachable at ${url.origin}: ${describeNetworkError(e)}${tlsHint}`,
          { cause: e, transient: !(e instanceof undiciErrors.RequestAbortedError) },
        );
      }
      if ([301, 302, 303, 307, 308].includes(res.statusCode)) {
        const location = headerValue(res.headers, 'location');
        await discard(res.body);
        if (!location) throw new ImageError('Internal', `${what}: redirect without Location`);
        if (hop >= MAX_REDIRECTS)
          throw new ImageError('Unreachable', `${what}: more than ${MAX_REDIRECTS} redirects${hopOrigins}`);
        let next: URL;
        try {
          next = new URL(location, url);
        } catch {
          throw new ImageError('Unreachable', `${what}: redirect to an invalid URL`);
        }
        if (next.protocol !== 'https:' && next.protocol !== 'http:') {
          throw new ImageError('Unreachable', `${what}: redirect to unsupported URL scheme ${next.protocol}`);
        }
        if (
          next.protocol === 'http:' &&
          (url.protocol === 'https:' || !this.plainHttpAllowed(next, origin))
        ) {
          throw new ImageError(
            'Unreachable',
            `${what}: refusing a redirect to plain HTTP (${next.origin}): plain HTTP only for hosts in insecure_registries`,
          );
        }
        if (hop === 0) hopOrigins = ` (via ${next.origin})`;
        url = next;
        continue;
      }
      return res;
    }
  }
}
