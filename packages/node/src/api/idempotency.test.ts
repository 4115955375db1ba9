import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { createHttpServer } from '../front-door/http-server.js';
import { AdmissionControl, registerAdmission, type AdmissionLimits } from './admission.js';
import { ApiError } from './errors.js';
import { IdempotencyLayer, requestFingerprint } from './idempotency.js';
import { IdempotencyStore, idempotencyMigrations } from './idempotency-store.js';
import { localTeamId } from './routes/teams.js';
import { ServerMetrics } from '../observability/metrics.js';
import { openStateDb, type StateDb } from '../state/db.js';
import { createLogger } from '../util/log.js';

const KEY = 'e2b_' + 'cd'.repeat(32);
const silent = new Writable({ write: (_c, _e, cb) => cb() });
const logger = createLogger('json', 'info', silent);

const LIMITS: AdmissionLimits = {
  maxCpuCount: 4,
  maxMemoryMB: 4096,
  maxDiskSizeMB: 20480,
  maxMetadataEntries: 8,
  maxMetadataBytes: 1024,
  maxEnvVars: 8,
  maxEnvVarBytes: 256,
  maxEnvVarsBytes: 1024,
  maxBuildSteps: 8,
  maxForkCount: 4,
  maxConcurrentCreates: 1,
};

/** What the fake create routes do: count creates, wait at a gate, fail on demand. */
interface Behaviour {
  creates: number;
  /** Requests the node has received (a test waits for its concurrent requests to be in before opening a gate). */
  arrivals?: number;
  gate?: Promise<void>;
  failNext?: number;
  /** Sandbox ids that "exist" (for the restart recovery). */
  existing: Set<string>;
}

/** One node: the HTTP front, the admission limits (1 create at a time) and the layer, over `dbPath`. */
async function startNode(dbPath: string, b: Behaviour, opts: { clock?: () => number; apiKey?: string } = {}) {
  const apiKey = opts.apiKey ?? KEY;
  const db: StateDb = openStateDb(dbPath, idempotencyMigrations);
  const store = new IdempotencyStore(db, {
    team: localTeamId(apiKey),
    retentionMs: 60_000,
    maxKeys: 3,
    ...(opts.clock ? { now: opts.clock } : {}),
  });
  const layer = new IdempotencyLayer(store, logger);
  layer.recover((id) => b.existing.has(id));
  const { app, server } = createHttpServer({
    apiKey,
    bodyLimitBytes: 1 << 20,
    logger,
    metrics: new ServerMetrics(),
  });
  app.addHook('onRequest', async () => {
    b.arrivals = (b.arrivals ?? 0) + 1;
  });
  registerAdmission(app, new AdmissionControl(LIMITS));
  layer.register(app);
  const create = async (req: { body: unknown }, reply: FastifyReply) => {
    const id = layer.sandboxChosen(randomUUID());
    if (b.gate) await b.gate;
    if (b.failNext) {
      const status = b.failNext;
      b.failNext = undefined;
      throw new ApiError(status, 'create failed on purpose');
    }
    b.creates++;
    b.existing.add(id);
    return reply.code(201).header('x-agentenv-sandbox-id', id).send({ sandboxID: id, asked: req.body });
  };
  app.post('/sandboxes', create);
  app.post('/v2/sandboxes', create);
  app.post('/sandboxes-cold', create);
  app.post('/sandboxes/:id/fork', async () => [{ sandbox: { sandboxID: 'f' } }]);
  app.post('/sandboxes/:id/snapshots', async () => ({ snapshotID: 's' }));
  // (the admission limits insist on their other routes)
  app.post('/v3/templates', async () => ({}));
  app.post('/v2/templates/:templateID/builds/:buildID', async () => ({}));
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (server.address() as AddressInfo).port;
  return { app: app as FastifyInstance, db, store, layer, port, apiKey, url: `http://127.0.0.1:${port}` };
}

type Node = Awaited<ReturnType<typeof startNode>>;

async function post(node: Node, path: string, body: unknown, key?: string) {
  const r = await fetch(`${node.url}${path}`, {
    method: 'POST',
    headers: {
      'x-api-key': node.apiKey,
      'content-type': 'application/json',
      ...(key !== undefined ? { 'idempotency-key': key } : {}),
    },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, text, json: JSON.parse(text) as Record<string, unknown> };
}

/** A request written byte for byte (duplicate headers, non-ASCII bytes reach the server as sent). */
function rawPost(
  port: number,
  headerLines: string[],
  body: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', reject);
    sock.on('end', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const [head, ...rest] = text.split('\r\n\r\n');
      resolve({ status: Number(head!.split(' ')[1]), body: rest.join('\r\n\r\n') });
    });
    const head = [
      'POST /v2/sandboxes HTTP/1.1',
      'Host: 127.0.0.1',
      `x-api-key: ${KEY}`,
      'content-type: application/json',
      `content-length: ${Buffer.byteLength(body)}`,
      'connection: close',
      ...headerLines,
    ];
    sock.write(Buffer.concat([Buffer.from(head.join('\r\n') + '\r\n\r\n', 'latin1'), Buffer.from(body)]));
  });
}

describe('Idempotency-Key on the create routes', () => {
  const dirs: string[] = [];
  let dbPath: string;
  let b: Behaviour;
  let node: Node;
  const nodes: Node[] = [];
  const start = async (opts: { clock?: () => number; apiKey?: string } = {}) => {
    const n = await startNode(dbPath, b, opts);
    nodes.push(n);
    return n;
  };
  const stop = async (n: Node) => {
    await n.app.close();
    n.db.close();
  };

  beforeEach(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-'));
    dirs.push(dir);
    dbPath = join(dir, 'state.db');
    b = { creates: 0, existing: new Set() };
    node = await start();
  });
  afterEach(async () => {
    for (const n of nodes.splice(0)) if (n.db.open) await stop(n);
  });
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('creates each time without a key', async () => {
    const a = await post(node, '/v2/sandboxes', { templateID: 'base' });
    const c = await post(node, '/v2/sandboxes', { templateID: 'base' });
    expect([a.status, c.status]).toEqual([201, 201]);
    expect(a.json.sandboxID).not.toBe(c.json.sandboxID);
    expect(b.creates).toBe(2);
  });

  it('answers a retry with the same key and request with the first answer, creating once', async () => {
    const first = await post(
      node,
      '/v2/sandboxes',
      { templateID: 'base', metadata: { a: '1', b: '2' } },
      'k-1',
    );
    // The same request with its fields in another order is the same request.
    const again = await post(
      node,
      '/v2/sandboxes',
      { metadata: { b: '2', a: '1' }, templateID: 'base' },
      'k-1',
    );
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.json).toEqual(first.json);
    expect(again.headers.get('x-agentenv-sandbox-id')).toBe(first.json.sandboxID);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(b.creates).toBe(1);
  });

  it('serves a cold start with a key once', async () => {
    const first = await post(node, '/sandboxes-cold', { image: 'aenv/busybox' }, 'k-cold');
    const again = await post(node, '/sandboxes-cold', { image: 'aenv/busybox' }, 'k-cold');
    expect([first.status, again.status]).toEqual([201, 201]);
    expect(again.json).toEqual(first.json);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(b.creates).toBe(1);
  });

  it('refuses the key with another body or on another route (422) and keeps the first answer', async () => {
    const first = await post(node, '/v2/sandboxes', { templateID: 'base' }, 'k-2');
    const other = await post(node, '/v2/sandboxes', { templateID: 'other' }, 'k-2');
    expect(other.status).toBe(422);
    expect(other.json).toEqual({ code: 422, message: expect.stringContaining('Idempotency-Key') });
    const v1 = await post(node, '/sandboxes', { templateID: 'base' }, 'k-2');
    expect(v1.status).toBe(422);
    expect((await post(node, '/v2/sandboxes', { templateID: 'base' }, 'k-2')).json).toEqual(first.json);
    expect(b.creates).toBe(1);
  });

  it('serves 20 concurrent requests with one key by one create, without taking create slots', async () => {
    let open!: () => void;
    b.gate = new Promise((r) => (open = r));
    const before = b.arrivals ?? 0;
    const all = Array.from({ length: 20 }, () => post(node, '/v2/sandboxes', { templateID: 'base' }, 'k-20'));
    // While they wait: another body with the key is refused at once, and the key names its sandbox on disk.
    while ((b.arrivals ?? 0) < before + 20) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 50));
    expect((await post(node, '/v2/sandboxes', { templateID: 'x' }, 'k-20')).status).toBe(422);
    const running = node.store.interrupted();
    expect(running).toHaveLength(1);
    expect(running[0]!.sandboxId).toMatch(/^[0-9a-f-]{36}$/);
    open();
    const answers = await Promise.all(all);
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(201));
    expect(new Set(answers.map((a) => a.json.sandboxID))).toEqual(new Set([running[0]!.sandboxId]));
    expect(b.creates).toBe(1);
  });

  it('does not keep a failed create: waiters share its error, the next retry creates', async () => {
    let open!: () => void;
    b.gate = new Promise((r) => (open = r));
    b.failNext = 503;
    const before = b.arrivals ?? 0;
    const both = [1, 2].map(() => post(node, '/v2/sandboxes', { templateID: 'base' }, 'k-f'));
    // Both must be in before the first fails (a loaded machine may send the second late): then the second waits
    // on the first's flight, which takes the rest of its handling within this process.
    while ((b.arrivals ?? 0) < before + 2) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 50));
    open();
    const [a, c] = await Promise.all(both);
    expect([a!.status, c!.status]).toEqual([503, 503]);
    expect(c!.json).toEqual(a!.json);
    expect(b.creates).toBe(0);
    b.gate = undefined;
    const retry = await post(node, '/v2/sandboxes', { templateID: 'base' }, 'k-f');
    expect(retry.status).toBe(201);
    expect(b.creates).toBe(1);
  });

  it('refuses bad keys with a 400 naming the header', async () => {
    for (const key of ['', 'x'.repeat(256), 'with space', 'tab\there']) {
      const r = await post(node, '/v2/sandboxes', { templateID: 'base' }, key);
      expect(r.status, JSON.stringify(key)).toBe(400);
      expect(r.json.message).toContain('Idempotency-Key');
    }
    expect((await post(node, '/v2/sandboxes', { templateID: 'base' }, 'x'.repeat(255))).status).toBe(201);
    const body = JSON.stringify({ templateID: 'base' });
    const twice = await rawPost(node.port, ['Idempotency-Key: a1', 'idempotency-key: a1'], body);
    expect(twice.status).toBe(400);
    expect(JSON.parse(twice.body).message).toBe('Idempotency-Key is given 2 times; send it once');
    const latin1 = await rawPost(node.port, ['Idempotency-Key: cl\u00e9'], body);
    expect(latin1.status).toBe(400);
    expect(JSON.parse(latin1.body).message).toContain('visible ASCII');
    const utf8 = await rawPost(
      node.port,
      [`Idempotency-Key: ${Buffer.from('ключ').toString('latin1')}`],
      body,
    );
    expect(utf8.status).toBe(400);
    expect(b.creates).toBe(1);
  });

  it('refuses a key on fork and snapshot, which keep no answers', async () => {
    const id = randomUUID();
    for (const path of [`/sandboxes/${id}/fork`, `/sandboxes/${id}/snapshots`]) {
      const r = await post(node, path, {}, 'k-fork');
      expect(r.status, path).toBe(400);
      expect(r.json.message).toContain('Idempotency-Key is not supported');
      expect((await post(node, path, {})).status).toBe(200);
    }
  });

  it('answers a key from before a restart', async () => {
    const first = await post(node, '/v2/sandboxes', { templateID: 'base' }, 'k-r');
    await stop(node);
    const again = await start();
    const replay = await post(again, '/v2/sandboxes', { templateID: 'base' }, 'k-r');
    expect(replay.status).toBe(201);
    expect(replay.json).toEqual(first.json);
    expect(b.creates).toBe(1);
  });

  it("never answers another team's key: after the API key changes, the same key creates anew", async () => {
    const first = await post(node, '/v2/sandboxes', { templateID: 'base' }, 'k-team');
    await stop(node);
    const other = await start({ apiKey: 'e2b_' + 'ef'.repeat(32) });
    const same = await post(other, '/v2/sandboxes', { templateID: 'base' }, 'k-team');
    expect(same.status).toBe(201);
    expect(same.headers.get('idempotent-replayed')).toBeNull();
    expect(same.json.sandboxID).not.toBe(first.json.sandboxID);
    await stop(other);
    // Another body is no 422 either: nothing of the first team's request shows.
    const third = await start({ apiKey: 'e2b_' + '12'.repeat(32) });
    expect((await post(third, '/v2/sandboxes', { templateID: 'x' }, 'k-team')).status).toBe(201);
    expect(b.creates).toBe(3);
    await stop(third);
    // Back to the first key: its own answer is still there.
    const back = await start();
    expect((await post(back, '/v2/sandboxes', { templateID: 'base' }, 'k-team')).json).toEqual(first.json);
    expect(b.creates).toBe(3);
  });

  it('after a restart in the middle of a create: 409 naming its sandbox if it exists, else creates', async () => {
    const fp = requestFingerprint('POST /v2/sandboxes', { templateID: 'base' });
    node.store.begin('k-live', fp);
    node.store.noteSandbox('k-live', 'sbx-that-lives');
    node.store.begin('k-gone', fp);
    node.store.noteSandbox('k-gone', 'sbx-that-is-gone');
    node.store.begin('k-early', fp);
    await stop(node);
    b.existing.add('sbx-that-lives');
    const again = await start();
    const live = await post(again, '/v2/sandboxes', { templateID: 'base' }, 'k-live');
    expect(live.status).toBe(409);
    expect(live.json.message).toContain('sandbox sbx-that-lives');
    expect(live.headers.get('x-agentenv-sandbox-id')).toBe('sbx-that-lives');
    expect((await post(again, '/v2/sandboxes', { templateID: 'base' }, 'k-live')).status).toBe(409);
    for (const key of ['k-gone', 'k-early'])
      expect((await post(again, '/v2/sandboxes', { templateID: 'base' }, key)).status, key).toBe(201);
    expect(b.creates).toBe(2);
  });

  it('forgets answers after the retention and beyond the cap', async () => {
    let clock = 1_000_000;
    await stop(node);
    const n = await start({ clock: () => clock });
    await post(n, '/v2/sandboxes', { templateID: 'base' }, 'old');
    clock += 60_000;
    expect(
      (await post(n, '/v2/sandboxes', { templateID: 'base' }, 'old')).headers.get('idempotent-replayed'),
    ).toBeNull();
    expect(b.creates).toBe(2);
    // maxKeys 3: after 3 more keys, the oldest ('old' again) is gone.
    for (const k of ['c1', 'c2', 'c3']) {
      clock += 1;
      await post(n, '/v2/sandboxes', { templateID: 'base' }, k);
    }
    await post(n, '/v2/sandboxes', { templateID: 'base' }, 'old');
    expect(b.creates).toBe(6);
    await post(n, '/v2/sandboxes', { templateID: 'base' }, 'c3');
    expect(b.creates).toBe(6);
  });
});
