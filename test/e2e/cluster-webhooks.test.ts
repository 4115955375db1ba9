// Webhooks in a cluster (docs/events.md#in-a-cluster): one scheduler, two nodes sharing a posix_fs repository,
// one gateway; the webhook is registered, changed and deleted only through the gateway, and real receivers on
// loopback verify the e2b-signature of the events of sandboxes on both nodes themselves.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox } from 'e2b';
import {
  startSchedulerProcess,
  type SchedulerProcess,
} from '../../packages/scheduler/src/testing/scheduler-process.js';
import {
  schedulerClient,
  type Plain,
  type TestSchedulerClient,
} from '../../packages/scheduler/src/testing/grpc-client.js';
import {
  startGatewayProcess,
  type GatewayProcess,
} from '../../packages/gateway/src/testing/gateway-process.js';
import { TestWebhookReceiver } from '../../packages/node/src/events/testing/webhook-receiver.js';
import { endNode, eventually, freePort, startServer, type TestServer } from './harness.js';

const KEY = `e2b_${randomBytes(32).toString('hex')}`;
const NODES = ['whnodea', 'whnodeb'] as const;
const CREATED = 'sandbox.lifecycle.created';
const KILLED = 'sandbox.lifecycle.killed';

describe('webhooks through aenv gateway', () => {
  let sched: SchedulerProcess;
  let rpc: TestSchedulerClient;
  let gateway: GatewayProcess;
  const nodes: TestServer[] = [];
  const receivers: TestWebhookReceiver[] = [];
  const shared = `/var/lib/aenv-e2e/whshared-${randomUUID().slice(0, 8)}`;
  const env = {
    AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED: randomBytes(32).toString('hex'),
    AENV_SNAPSHOT_RECORD_SIGNING_SECRET: randomBytes(32).toString('hex'),
  };

  const gw = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    fetch(gateway.url + path, {
      method,
      headers: {
        'x-api-key': KEY,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
  const json = async (r: Response) => ({
    status: r.status,
    body: (await r.json()) as Record<string, unknown>,
  });
  const receiver = async (secret: string) => {
    const r = await new TestWebhookReceiver(secret).start();
    receivers.push(r);
    return r;
  };
  const nodeOf = async (sandboxId: string) =>
    ((await rpc.call('LookupNode', { sandbox_id: sandboxId })).node as Plain).node_id as string;

  beforeAll(async () => {
    mkdirSync('/var/lib/aenv-e2e', { recursive: true, mode: 0o711 });
    mkdirSync(shared, { recursive: true, mode: 0o700 });
    const ports = [await freePort(), await freePort()];
    sched = await startSchedulerProcess({
      scheduler: { nodes: NODES.map((id, i) => ({ id, endpoint: `http://127.0.0.1:${ports[i]}` })) },
    });
    rpc = schedulerClient(sched.grpcAddress);
    for (const [i, id] of NODES.entries()) {
      // One API key for the whole cluster, in each node's managed key file; the home stays traversable (o+x).
      mkdirSync(`/var/lib/aenv-e2e/${id}`, { recursive: true, mode: 0o711 });
      mkdirSync(`/var/lib/aenv-e2e/${id}/secrets`, { recursive: true, mode: 0o700 });
      writeFileSync(`/var/lib/aenv-e2e/${id}/secrets/api-key`, `${KEY}\n`, { mode: 0o600 });
      nodes.push(
        await startServer(
          {
            name: id,
            env,
            toml: [
              '[snapshot]',
              'repository_backend = "posix_fs"',
              '[backend.posix_fs]',
              `snapshot_store = "${shared}"`,
              '[events.webhooks]',
              'allow_loopback = true',
              'initial_backoff_ms = 200',
              'max_backoff_ms = 800',
              '[cluster]',
              `scheduler_endpoint = "http://${sched.grpcAddress}"`,
              '[observability.scheduler_report]',
              'enabled = true',
              'interval_secs = 1',
              '[node_identity]',
              `node_id = "${id}"`,
            ].join('\n'),
          },
          ports[i],
        ),
      );
    }
    gateway = await startGatewayProcess({ scheduler_addr: sched.grpcAddress }, KEY);
    process.env.E2B_API_URL = gateway.url;
    process.env.E2B_SANDBOX_URL = gateway.url;
    process.env.E2B_API_KEY = KEY;
    await eventually(
      async () => ((await (await gw('GET', '/nodes')).json()) as unknown[]).length === 2,
      'both nodes to heartbeat',
      300,
      100,
    );
    // Node homes stay between runs: webhooks a failed earlier run left in a node's state.db are published to
    // this repository at the node's first copy (docs/events.md#in-a-cluster). Start from none.
    for (const w of (await (await gw('GET', '/events/webhooks')).json()) as { id: string }[])
      expect((await gw('DELETE', `/events/webhooks/${w.id}`)).status).toBe(200);
  });
  afterAll(async () => {
    for (const r of receivers) await r.close();
    await gateway?.stop();
    for (const n of nodes) await n.shutdown();
    rpc?.close();
    await sched?.stop();
    rmSync(shared, { recursive: true, force: true });
  });

  let webhookId = '';
  const sandboxes: string[] = [];
  it('one webhook made through the gateway gets the signed events of sandboxes on both nodes; history merges', async () => {
    const first = await receiver('whsec-cluster-one');
    const made = await json(
      await gw('POST', '/events/webhooks', {
        name: 'cluster',
        url: first.url,
        events: [CREATED, KILLED],
        signatureSecret: first.secret,
      }),
    );
    expect(made.status).toBe(201);
    webhookId = made.body.id as string;
    // The write synced both nodes before the gateway answered: each node serves it itself.
    for (const n of nodes) expect((await n.api('GET', `/events/webhooks/${webhookId}`)).status).toBe(200);

    for (let i = 0; i < 2; i++) sandboxes.push((await Sandbox.create({ timeoutMs: 120_000 })).sandboxId);
    expect(new Set(await Promise.all(sandboxes.map(nodeOf)))).toEqual(new Set(NODES));
    await first.waitFor((r) => r.filter((d) => d.body.type === CREATED).length >= 2, 30_000);
    const created = first.received.filter((d) => d.body.type === CREATED);
    expect(new Set(created.map((d) => d.body.sandboxId))).toEqual(new Set(sandboxes));
    expect(created.every((d) => d.signatureValid && d.headers['e2b-webhook-id'] === webhookId)).toBe(true);

    // The events of each sandbox, from its node, through the gateway.
    for (const id of sandboxes) {
      const ev = (await (await gw('GET', `/events/sandboxes/${id}`)).json()) as {
        type: string;
        sandboxId: string;
      }[];
      expect(ev.map((e) => [e.type, e.sandboxId])).toEqual([[CREATED, id]]);
    }
    const all = (await (await gw('GET', `/events/sandboxes?limit=100&types=${CREATED}`)).json()) as {
      sandboxId: string;
    }[];
    expect(
      all
        .map((e) => e.sandboxId)
        .filter((s) => sandboxes.includes(s))
        .sort(),
    ).toEqual([...sandboxes].sort());

    // Delivery history: both nodes' attempts, one page at a time with the gateway's cursor.
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 5; page++) {
      const q: string = `limit=1&orderAsc=true${cursor ? `&cursor=${cursor}` : ''}`;
      const d = (await (await gw('GET', `/events/webhooks/${webhookId}/deliveries?${q}`)).json()) as {
        data: { sandboxId: string; attempts: { status: string; requestUrl: string }[] }[];
        nextCursor: string | null;
      };
      expect(d.data.length).toBeLessThanOrEqual(1);
      for (const g of d.data) {
        seen.push(g.sandboxId);
        expect(g.attempts[0]).toMatchObject({ status: 'success', requestUrl: first.url });
      }
      cursor = d.nextCursor;
      if (!cursor) break;
    }
    expect(seen.sort()).toEqual([...sandboxes].sort());
    const stats = (await (await gw('GET', `/events/webhooks/${webhookId}/stats`)).json()) as {
      total: number;
      failed: number;
    };
    expect(stats).toMatchObject({ total: 2, failed: 0 });
  });

  it('an update and a delete through the gateway take effect on both nodes', async () => {
    const second = await receiver('whsec-cluster-two');
    const first = receivers[0]!;
    const patched = await json(
      await gw('PATCH', `/events/webhooks/${webhookId}`, {
        url: second.url,
        events: [KILLED],
        signatureSecret: second.secret,
      }),
    );
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ url: second.url, events: [KILLED] });
    for (const id of sandboxes) await Sandbox.kill(id);
    await second.waitFor((r) => r.length >= 2, 30_000);
    expect(new Set(second.received.map((d) => d.body.sandboxId))).toEqual(new Set(sandboxes));
    expect(second.received.every((d) => d.signatureValid && d.body.type === KILLED)).toBe(true);
    expect(first.received.filter((d) => d.body.type === KILLED)).toEqual([]);

    expect((await gw('DELETE', `/events/webhooks/${webhookId}`)).status).toBe(200);
    for (const n of nodes) expect((await n.api('GET', `/events/webhooks/${webhookId}`)).status).toBe(404);
    expect((await json(await gw('GET', `/events/webhooks/${webhookId}/deliveries`))).status).toBe(404);
    // A webhook still registered proves the next events were handled: the deleted one got none of them.
    const third = await receiver('whsec-cluster-three');
    expect(
      (
        await gw('POST', '/events/webhooks', {
          url: third.url,
          events: [CREATED, KILLED],
          signatureSecret: third.secret,
        })
      ).status,
    ).toBe(201);
    const more: string[] = [];
    for (let i = 0; i < 2; i++) more.push((await Sandbox.create({ timeoutMs: 120_000 })).sandboxId);
    expect(new Set(await Promise.all(more.map(nodeOf)))).toEqual(new Set(NODES));
    for (const id of more) await Sandbox.kill(id);
    await third.waitFor((r) => new Set(r.map((d) => `${d.body.type} ${d.body.sandboxId}`)).size >= 4, 30_000);
    expect(new Set(second.received.map((d) => d.body.sandboxId))).toEqual(new Set(sandboxes));
  });

  it('refuses hostile webhook and events requests through the gateway with {"code","message"}', async () => {
    const cases: [string, string, unknown, number][] = [
      ['GET', '/events/webhooks/not-a-uuid/deliveries', undefined, 404],
      ['GET', `/events/webhooks/${randomUUID()}/stats`, undefined, 404],
      ['PATCH', `/events/webhooks/${randomUUID()}`, { enabled: false }, 404],
      ['DELETE', '/events/webhooks/..%2F..%2Fetc', undefined, 404],
      [
        'POST',
        '/events/webhooks',
        { url: 'http://127.0.0.1:1/', events: ['nope'], signatureSecret: 'x' },
        400,
      ],
      ['POST', '/events/webhooks', 'x'.repeat(200_000), 413],
      ['POST', '/events/webhooks', '{not json', 400],
      ['GET', `/events/webhooks/${randomUUID()}/deliveries?cursor=%%%`, undefined, 400],
      [
        'GET',
        `/events/webhooks/${randomUUID()}/deliveries?cursor=${Buffer.from('[1]').toString('base64url')}`,
        undefined,
        400,
      ],
      ['GET', `/events/webhooks/${randomUUID()}/deliveries?limit=1000`, undefined, 400],
      ['GET', '/events/sandboxes?limit=abc', undefined, 400],
      ['GET', '/events/sandboxes?offset=9999&limit=100', undefined, 400],
      ['GET', '/events/sandboxes?types=bogus', undefined, 400],
      ['GET', `/events/sandboxes/${randomUUID()}?orderAsc=maybe`, undefined, 400],
    ];
    for (const [method, path, body, status] of cases) {
      const r = await gw(method, path, body);
      const b = (await r.json()) as { code: number; message: string };
      expect([method, path, r.status, b.code, typeof b.message]).toEqual([
        method,
        path,
        status,
        status,
        'string',
      ]);
    }
    // Nothing was stored by any of them: only the third receiver's webhook is left, on both nodes.
    for (const n of nodes)
      expect(((await n.api('GET', '/events/webhooks')).body as unknown[]).length).toBe(1);
    for (const n of nodes) expect(await endNode(n)).toEqual({ stray: [], exitCode: 0 });
    nodes.length = 0;
  });
});
