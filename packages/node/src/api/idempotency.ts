// `Idempotency-Key` on sandbox creates (docs/differences.md, "Idempotency-Key"). Put around the create routes
// like the admission limits are: a request with a key is served once; a retry with the same key and the same
// request gets that answer again, also while the first is still being served (it waits for it), also after a
// server restart. The same key with another request is refused with 422.
//
// Only a success is kept. An error answer is shared with the requests that waited for it, then forgotten: the
// next request with the key runs the create again (nothing was created, and the SDK retries 429/503 with the
// same key, which must be able to succeed).
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  RouteHandlerMethod,
  onSendHookHandler,
} from 'fastify';
import type { Logger } from '../util/log.js';
import { crashPoint } from '../util/crash-point.js';
import { ApiError } from './errors.js';
import type { IdempotencyStore, StoredAnswer } from './idempotency-store.js';

export const IDEMPOTENCY_HEADER = 'Idempotency-Key';
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** Visible ASCII: no spaces or control characters (a parser would trim or refuse them), nothing beyond 0x7e. */
const KEY_CHARS = /^[\x21-\x7e]+$/;

/** Routes whose successful answers are kept per key. */
const HONOURED = ['POST /sandboxes', 'POST /v2/sandboxes', 'POST /sandboxes-cold'];
/**
 * Routes that create something but keep no answers: a key there is refused, so a client that relies on it
 * learns that a retry would create again. (No SDK sends one there.)
 */
const REFUSED = ['POST /sandboxes/:id/fork', 'POST /sandboxes/:id/snapshots'];

/** Headers of an answer that are replayed with it (the rest, like `x-request-id`, belong to each request). */
const REPLAYED_HEADERS = ['content-type', 'x-agentenv-sandbox-id'];

/**
 * The request's key: undefined without the header; 400 naming the header when it is given twice, empty,
 * longer than 255 characters or not visible ASCII.
 */
export function idempotencyKeyOf(req: FastifyRequest): string | undefined {
  const raw = req.raw.rawHeaders;
  const values: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === 'idempotency-key') values.push(raw[i + 1]!);
  }
  if (values.length === 0) return undefined;
  if (values.length > 1)
    throw new ApiError(400, `${IDEMPOTENCY_HEADER} is given ${values.length} times; send it once`);
  const key = values[0]!;
  if (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY_LENGTH)
    throw new ApiError(
      400,
      `${IDEMPOTENCY_HEADER} must be 1-${MAX_IDEMPOTENCY_KEY_LENGTH} characters (got ${key.length})`,
    );
  if (!KEY_CHARS.test(key))
    throw new ApiError(
      400,
      `${IDEMPOTENCY_HEADER} must be visible ASCII characters (0x21-0x7e): no spaces, control or non-ASCII characters`,
    );
  return key;
}

/** JSON with object keys in sorted order: two bodies that mean the same fingerprint the same. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** What makes two requests "the same request": the route and the body. */
export function requestFingerprint(route: string, body: unknown): string {
  return createHash('sha256').update(route).update('\n').update(canonicalJson(body)).digest('hex');
}

/** A request with a key being served by this process; the others with its key wait for `done`. */
interface Flight {
  key: string;
  fingerprint: string;
  createdAt: number;
  sandboxId?: string;
  settled: boolean;
  done: Promise<StoredAnswer>;
  resolve(answer: StoredAnswer): void;
}

const mismatch = (): ApiError =>
  new ApiError(
    422,
    `${IDEMPOTENCY_HEADER} was already used with a different request (another body or route); use a new key for a new request`,
  );

const isSuccess = (status: number) => status >= 200 && status < 300;

export class IdempotencyLayer {
  private readonly flights = new Map<string, Flight>();
  private readonly byRequest = new WeakMap<FastifyRequest, Flight>();
  /** The flight a piece of code runs for, so that the sandbox id the create picks is recorded with its key. */
  private readonly serving = new AsyncLocalStorage<Flight>();

  constructor(
    private readonly store: IdempotencyStore,
    private readonly log: Logger,
  ) {}

  /**
   * Called with every new sandbox id: when a keyed create picks it, it is stored with the key before the sandbox
   * exists, so that after a crash the key's outcome can be told (see `recover`). Returns `id`.
   */
  sandboxChosen(id: string): string {
    const f = this.serving.getStore();
    if (f && !f.settled && f.sandboxId === undefined) {
      f.sandboxId = id;
      this.store.noteSandbox(f.key, id);
    }
    return id;
  }

  /**
   * At startup, after the sandboxes are restored: a keyed create the server stopped in the middle of either left
   * no sandbox (the key is forgotten; a retry creates) or left one whose answer was never kept (a retry gets a
   * 409 naming it: creating another would be the double create the key exists to prevent).
   */
  recover(sandboxExists: (id: string) => boolean): void {
    for (const e of this.store.interrupted()) {
      if (e.sandboxId === undefined || !sandboxExists(e.sandboxId)) {
        this.store.release(e.key, e.team);
        continue;
      }
      const body = JSON.stringify({
        code: 409,
        message: `the create with this ${IDEMPOTENCY_HEADER} started sandbox ${e.sandboxId}, but the server restarted before it answered; get the sandbox with GET /sandboxes/${e.sandboxId} (or connect to it) instead of creating it again`,
      });
      this.store.answer(
        e.key,
        e.fingerprint,
        e.createdAt,
        {
          status: 409,
          headers: {
            'content-type': 'application/json; charset=utf-8',
            'x-agentenv-sandbox-id': e.sandboxId,
          },
          body,
        },
        e.team,
      );
      this.log.warn(
        { sandboxId: e.sandboxId },
        'a keyed create was interrupted by the restart after it started its sandbox; retries get 409',
      );
    }
    this.store.prune();
  }

  /** Wraps the create routes (register after `registerAdmission`, so that a waiting retry holds no create slot). */
  register(app: FastifyInstance): void {
    const seen = new Set<string>();
    const capture: onSendHookHandler = async (req, reply, payload) => {
      const f = this.byRequest.get(req);
      if (f && !f.settled) this.settle(f, answerOf(reply, payload));
      return payload;
    };
    // The answer normally passes the capture above; a request that ends without one frees its key.
    const ended = async (req: FastifyRequest) => {
      const f = this.byRequest.get(req);
      if (f && !f.settled)
        this.settle(f, {
          status: 500,
          headers: { 'content-type': 'application/json; charset=utf-8' },
          body: JSON.stringify({
            code: 500,
            message: `the request with this ${IDEMPOTENCY_HEADER} ended without an answer; retry`,
          }),
        });
    };
    const serveKeyed = async (
      name: string,
      key: string,
      req: FastifyRequest,
      reply: FastifyReply,
      create: () => unknown,
    ): Promise<unknown> => {
      const fingerprint = requestFingerprint(name, req.body);
      const flying = this.flights.get(key);
      if (flying) {
        if (flying.fingerprint !== fingerprint) throw mismatch();
        return replay(reply, await flying.done);
      }
      const entry = this.store.get(key);
      if (entry) {
        if (entry.fingerprint !== fingerprint) throw mismatch();
        if (entry.state === 'answered') return replay(reply, entry.answer);
        throw new ApiError(409, `a request with this ${IDEMPOTENCY_HEADER} is still in progress; retry`);
      }
      const f = this.begin(key, fingerprint);
      this.byRequest.set(req, f);
      crashPoint('idempotency:recorded');
      return this.serving.run(f, create);
    };
    app.addHook('onRoute', (route) => {
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      for (const method of methods) {
        const name = `${method} ${route.url}`;
        const handler = route.handler as RouteHandlerMethod;
        if (REFUSED.includes(name)) {
          seen.add(name);
          route.handler = async function (this: FastifyInstance, req, reply) {
            if (idempotencyKeyOf(req) !== undefined)
              throw new ApiError(
                400,
                `${IDEMPOTENCY_HEADER} is not supported by this server on ${name} (it is honoured on sandbox creates only); leave it out`,
              );
            return handler.call(this, req, reply);
          } as RouteHandlerMethod;
        }
        if (!HONOURED.includes(name)) continue;
        seen.add(name);
        route.onSend = [...toArray(route.onSend), capture];
        route.onResponse = [...toArray(route.onResponse), ended];
        route.handler = async function (this: FastifyInstance, req, reply) {
          const key = idempotencyKeyOf(req);
          if (key === undefined) return handler.call(this, req, reply);
          return serveKeyed(name, key, req, reply, () => handler.call(this, req, reply));
        } as RouteHandlerMethod;
      }
    });
    app.addHook('onReady', async () => {
      const missing = [...HONOURED, ...REFUSED].filter((n) => !seen.has(n));
      if (missing.length) throw new Error(`idempotency layer: routes not registered: ${missing.join(', ')}`);
    });
  }

  private begin(key: string, fingerprint: string): Flight {
    let resolve!: (a: StoredAnswer) => void;
    const done = new Promise<StoredAnswer>((r) => (resolve = r));
    const createdAt = this.store.begin(key, fingerprint);
    const f: Flight = { key, fingerprint, createdAt, settled: false, done, resolve };
    this.flights.set(key, f);
    return f;
  }

  private settle(f: Flight, answer: StoredAnswer): void {
    f.settled = true;
    this.flights.delete(f.key);
    try {
      if (isSuccess(answer.status)) {
        crashPoint('idempotency:answering');
        this.store.answer(f.key, f.fingerprint, f.createdAt, answer);
      } else {
        this.store.release(f.key);
      }
    } catch (err) {
      // The client still gets its answer; only a later retry would not.
      this.log.error({ err }, 'could not keep the answer of a request with an Idempotency-Key');
    }
    f.resolve(answer);
  }
}

function toArray<T>(v: T | T[] | undefined): T[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
}

function answerOf(reply: FastifyReply, payload: unknown): StoredAnswer {
  const headers: Record<string, string> = {};
  for (const h of REPLAYED_HEADERS) {
    const v = reply.getHeader(h);
    if (v !== undefined) headers[h] = String(v);
  }
  const body =
    typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : '';
  return { status: reply.statusCode, headers, body };
}

function replay(reply: FastifyReply, a: StoredAnswer): FastifyReply {
  return reply.code(a.status).headers(a.headers).header('idempotent-replayed', 'true').send(a.body);
}
