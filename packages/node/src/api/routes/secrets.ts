// `/secrets` (E2B's project secrets, docs/networking.md#secrets): write-only values, metadata out. A secret is used
// as `${e2b.secrets.<name>}` in a `network.rules` header value, filled in by the egress proxy per request.
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { ApiError } from '../errors.js';
import { parseRequiredBody } from '../parse-body.js';
import { MAX_HEADER_VALUE_BYTES } from '../../network/egress/header-rules.js';
// Names are stored lowercased, and placeholders name them in either case (network/egress/placeholders.ts).
import { SECRET_NAME } from '../../network/egress/placeholders.js';
import type { SecretCursor } from '../../secrets/secret-store.js';
import type { Secrets } from '../../secrets/secrets-api.js';

const MAX_METADATA_ENTRIES = 32;
const MAX_METADATA_KEY_BYTES = 128;
const MAX_METADATA_VALUE_BYTES = 1024;
const MAX_METADATA_BYTES = 8192;
const MAX_SECRETS = 1000;

const bytes = (s: string) => Buffer.byteLength(s);

// The value is a header value at egress: the same characters (and no echo of it in any message).
const value = z
  .string({ error: 'must be a string' })
  .min(1, 'must not be empty')
  .refine((v) => bytes(v) <= MAX_HEADER_VALUE_BYTES, `must be at most ${MAX_HEADER_VALUE_BYTES} bytes`)
  .refine(
    (v) => /^[\t\x20-\x7e\x80-\xff]*$/.test(v),
    'must hold no control characters nor characters outside Latin-1',
  );
const metadata = z
  .record(z.string(), z.string({ error: 'values must be strings' }))
  .refine((m) => Object.keys(m).length <= MAX_METADATA_ENTRIES, `at most ${MAX_METADATA_ENTRIES} entries`)
  .refine(
    (m) => Object.keys(m).every((k) => bytes(k) <= MAX_METADATA_KEY_BYTES),
    `keys must be at most ${MAX_METADATA_KEY_BYTES} bytes`,
  )
  .refine(
    (m) => Object.values(m).every((v) => bytes(v) <= MAX_METADATA_VALUE_BYTES),
    `values must be at most ${MAX_METADATA_VALUE_BYTES} bytes`,
  )
  .refine(
    (m) => Object.entries(m).reduce((n, [k, v]) => n + bytes(k) + bytes(v), 0) <= MAX_METADATA_BYTES,
    `at most ${MAX_METADATA_BYTES} bytes in total`,
  );
const NewSecret = z.strictObject({
  name: z.string({ error: 'must be a string' }),
  value,
  metadata: metadata.optional(),
});
const SecretUpdate = z.strictObject({ value, metadata: metadata.optional() });

function checkName(raw: string): string {
  const name = raw.toLowerCase();
  if (name.startsWith('sec_'))
    throw new ApiError(400, 'invalid secret: name: the sec_ prefix is reserved for ids');
  if (!SECRET_NAME.test(name))
    throw new ApiError(
      400,
      `invalid secret: name ${JSON.stringify(raw.slice(0, 140))}: 1 to 128 letters, digits, "-" or "_", starting with a letter or digit`,
    );
  return name;
}

function limitOf(q: Record<string, unknown>): number {
  const v = q.limit;
  if (v === undefined || v === '') return 100;
  const n = typeof v === 'string' && /^\d{1,4}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= 100))
    throw new ApiError(
      400,
      `invalid limit ${JSON.stringify(String(v).slice(0, 100))}: must be an integer between 1 and 100`,
    );
  return n;
}

/** The token names the last secret of a page (creation time and id), so it means the same on every node. */
const CURSOR = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (sec_[0-9a-f]{24})$/;
const tokenOf = (c: SecretCursor) => Buffer.from(`${c.createdAt} ${c.id}`).toString('base64url');

function afterOf(q: Record<string, unknown>): SecretCursor | undefined {
  const v = q.nextToken;
  if (v === undefined || v === '') return undefined;
  const decoded =
    typeof v === 'string' && /^[A-Za-z0-9_-]{1,80}$/.test(v) ? Buffer.from(v, 'base64url').toString() : '';
  const m = CURSOR.exec(decoded);
  if (!m) throw new ApiError(400, 'invalid nextToken: pass the X-Next-Token of an earlier answer');
  return { createdAt: m[1]!, id: m[2]! };
}

export function registerSecretRoutes(app: FastifyInstance, d: { secrets: Secrets }): void {
  const find = async (ref: string) => {
    const s = await d.secrets.get(ref);
    if (!s) throw new ApiError(404, `secret ${ref.slice(0, 140)} not found`);
    return s;
  };

  app.get('/secrets', async (req, reply) => {
    const q = req.query as Record<string, unknown>;
    const page = await d.secrets.list(limitOf(q), afterOf(q));
    if (page.next !== undefined) void reply.header('x-next-token', tokenOf(page.next));
    return page.items;
  });

  app.post('/secrets', async (req, reply) => {
    const b = parseRequiredBody(NewSecret, req.body, 'secret');
    const name = checkName(b.name);
    const s = await d.secrets.create(name, b.value, b.metadata ?? {}, MAX_SECRETS);
    if (s === 'full')
      throw new ApiError(400, `invalid secret: there are ${MAX_SECRETS} secrets already; delete one first`);
    if (s === 'exists') throw new ApiError(409, `secret ${name} already exists`);
    return reply.code(201).send(s);
  });

  app.get<{ Params: { id: string } }>('/secrets/:id', async (req) => find(req.params.id));

  app.post<{ Params: { id: string } }>('/secrets/:id', async (req) => {
    await find(req.params.id);
    const b = parseRequiredBody(SecretUpdate, req.body, 'secret update');
    const s = await d.secrets.update(req.params.id, b.value, b.metadata);
    if (!s) throw new ApiError(404, `secret ${req.params.id.slice(0, 140)} not found`);
    return s;
  });

  app.delete<{ Params: { id: string } }>('/secrets/:id', async (req, reply) => {
    if (!(await d.secrets.delete(req.params.id)))
      throw new ApiError(404, `secret ${req.params.id.slice(0, 140)} not found`);
    return reply.code(204).send();
  });
}
