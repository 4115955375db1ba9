// The gateway's volume calls between a real scheduler and two HTTP servers answering the node's volume routes:
// which node each call reaches, and what happens when a node does not answer. Real nodes and the SDK:
// test/e2e/cluster-volumes.test.ts.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSchedulerClient, NodeStatus, volumeContentToken } from '@aenv/protocol';
import type { RunningScheduler } from '@aenv/scheduler';
import type { RunningGateway } from './run.js';
import { startSchedulerAndGateway } from './testing/scheduler-and-gateway.js';

const KEY = 'e2b_' + 'v'.repeat(40);
const VA = '11111111-1111-4111-8111-111111111111';
const VB = '22222222-2222-4222-8222-222222222222';

/** Answers `/volumes`, `/volumes/{id}`, `/volumecontent/…` and creates as a node holding `volumes` does. */
class VolumeNode {
  server!: Server;
  seen: string[] = [];
  /** Bytes of the last request body. */
  bodyBytes = 0;
  /** What every answer is while set (a node in trouble). */
  failing: number | undefined;
  /** The templates and snapshots this node holds, as its `GET /templates/{id}` answers them. */
  templates = new Map<string, Record<string, unknown>>();
  constructor(
    readonly id: string,
    public volumes: { volumeID: string; name: string }[],
  ) {}
  get url() {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  async start() {
    this.server = createServer((req, res) => {
      let bytes = 0;
      req.on('data', (c: Buffer) => (bytes += c.length));
      req.on('end', () => {
        this.bodyBytes = bytes;
        const url = req.url!;
        this.seen.push(`${req.method} ${url}`);
        const json = (status: number, v: unknown) =>
          res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(v));
        if (this.failing) return json(this.failing, { code: this.failing, message: 'trouble' });
        if (url === '/volumes' && req.method === 'GET') return json(200, this.volumes);
        if (url === '/volumes' && req.method === 'POST') return json(201, { node: this.id });
        const one = /^\/volumes\/([^/]+)$/.exec(url) ?? /^\/volumecontent\/([^/]+)\//.exec(url);
        if (one) {
          const v = this.volumes.find((x) => x.volumeID === one[1]);
          return v ? json(200, { node: this.id, ...v }) : json(404, { code: 404, message: 'not here' });
        }
        const tpl = /^\/templates\/([^/?]+)$/.exec(url);
        if (tpl && req.method === 'GET') {
          const t = this.templates.get(tpl[1]!);
          return t ? json(200, t) : json(404, { code: 404, message: 'not here' });
        }
        if (url === '/v2/sandboxes') return json(201, { sandboxID: `${this.id}-sbx`, node: this.id });
        return json(200, { node: this.id });
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
  }
}

describe('the gateway’s volume calls against a real scheduler', () => {
  const a = new VolumeNode('node-a', [{ volumeID: VA, name: 'alpha' }]);
  const b = new VolumeNode('node-b', [{ volumeID: VB, name: 'beta' }]);
  let sched: RunningScheduler;
  let gw: RunningGateway;
  let base: string;
  const call = (
    method: string,
    path: string,
    headers: Record<string, string> = { 'x-api-key': KEY },
    body?: string,
  ) => fetch(base + path, { method, headers, ...(body !== undefined ? { body } : {}) });
  const nodeOf = async (r: Response) => ((await r.json()) as { node?: string }).node;
  /** node-a's heartbeat with this status, as its reporter would send it. */
  let rpc: ReturnType<typeof createSchedulerClient> | undefined;
  const report = (status: NodeStatus) =>
    (rpc ??= createSchedulerClient(`127.0.0.1:${sched.grpcPort}`)).heartbeat({
      nodeId: a.id,
      serviceInstanceId: 'svc-a',
      snapshot: { status, reportedAtUnixMs: BigInt(Date.now()) },
      sandboxIds: [],
    });
  /** Repeats `send` until it answers `want` (the gateway learns node health within a refresh; bounded). */
  const untilStatus = async (send: () => Promise<Response>, want: number) => {
    let r = await send();
    for (let i = 0; i < 50 && r.status !== want; i++) {
      await new Promise((res) => setTimeout(res, 100));
      r = await send();
    }
    return r;
  };

  beforeAll(async () => {
    await a.start();
    await b.start();
    ({ sched, gw, base } = await startSchedulerAndGateway([a, b], KEY, {
      requestTimeoutMs: 1000,
    }));
  });
  afterAll(async () => {
    await gw?.stop();
    await sched?.stop();
    a.server?.close();
    b.server?.close();
  });

  it('sends get, delete, content and mounting creates to the holder; lists merge', async () => {
    expect(await nodeOf(await call('GET', `/volumes/${VB}`))).toBe('node-b');
    expect(await nodeOf(await call('GET', `/volumes/${VA}`))).toBe('node-a');
    const bearer = { authorization: `Bearer ${volumeContentToken(KEY, VB)}` };
    expect(await nodeOf(await call('GET', `/volumecontent/${VB}/dir?path=/`, bearer))).toBe('node-b');
    const mount = (names: string[]) =>
      JSON.stringify({
        templateID: 'base',
        volumeMounts: names.map((name, i) => ({ name, path: `/m${i}` })),
      });
    for (let i = 0; i < 3; i++)
      expect(await nodeOf(await call('POST', '/v2/sandboxes', { 'x-api-key': KEY }, mount(['beta'])))).toBe(
        'node-b',
      );
    const split = await call('POST', '/v2/sandboxes', { 'x-api-key': KEY }, mount(['alpha', 'beta']));
    expect(split.status).toBe(409);
    expect(await (await call('GET', '/volumes')).json()).toEqual([...a.volumes, ...b.volumes]);
    // A name another node has: 409 without reaching a node's create.
    const before = [...a.seen, ...b.seen].filter((s) => s === 'POST /volumes').length;
    const dup = await call('POST', '/volumes', { 'x-api-key': KEY }, JSON.stringify({ name: 'beta' }));
    expect(dup.status).toBe(409);
    expect([...a.seen, ...b.seen].filter((s) => s === 'POST /volumes').length).toBe(before);
  });

  it('treats one volume id on both nodes as one shared volume: listed once, mounted on either node', async () => {
    const shared = '55555555-5555-4555-8555-555555555555';
    a.volumes.push({ volumeID: shared, name: 'common' });
    b.volumes.push({ volumeID: shared, name: 'common' });
    try {
      const listed = (await (await call('GET', '/volumes')).json()) as { volumeID: string }[];
      expect(listed.filter((v) => v.volumeID === shared)).toHaveLength(1);
      expect(['node-a', 'node-b']).toContain(await nodeOf(await call('GET', `/volumes/${shared}`)));
      const bearer = { authorization: `Bearer ${volumeContentToken(KEY, shared)}` };
      expect(['node-a', 'node-b']).toContain(
        await nodeOf(await call('GET', `/volumecontent/${shared}/dir?path=/`, bearer)),
      );
      const mount = (names: string[]) =>
        JSON.stringify({
          templateID: 'base',
          volumeMounts: names.map((name, i) => ({ name, path: `/m${i}` })),
        });
      // No 409: the scheduler's round robin spreads creates over both nodes.
      const placed = new Set<string | undefined>();
      for (let i = 0; i < 4; i++) {
        const r = await call('POST', '/v2/sandboxes', { 'x-api-key': KEY }, mount(['common']));
        expect(r.status).toBe(201);
        placed.add(await nodeOf(r));
      }
      expect(placed).toEqual(new Set(['node-a', 'node-b']));
      // With a volume only one node has, the shared one goes along to that node.
      for (const [names, node] of [
        [['common', 'alpha'], 'node-a'],
        [['beta', 'common'], 'node-b'],
      ] as const)
        expect(
          await nodeOf(await call('POST', '/v2/sandboxes', { 'x-api-key': KEY }, mount([...names]))),
        ).toBe(node);
    } finally {
      a.volumes.pop();
      b.volumes.pop();
    }
  });

  it('asks the nodes again when a remembered holder no longer has the volume', async () => {
    const moved = '33333333-3333-4333-8333-333333333333';
    a.volumes.push({ volumeID: moved, name: 'gamma' });
    expect(await nodeOf(await call('GET', `/volumes/${moved}`))).toBe('node-a');
    // Deleted through another gateway, and (an id never moves, but the test can) now on b.
    a.volumes.pop();
    b.volumes.push({ volumeID: moved, name: 'gamma' });
    expect((await call('GET', `/volumes/${moved}`)).status).toBe(404); // the remembered node's answer
    expect(await nodeOf(await call('GET', `/volumes/${moved}`))).toBe('node-b');
    b.volumes.pop();
  });

  it('refuses a create mounting volumes whose node is draining (503), and places it again once it is back', async () => {
    const mountAlpha = () =>
      call(
        'POST',
        '/v2/sandboxes',
        { 'x-api-key': KEY },
        JSON.stringify({ templateID: 'base', volumeMounts: [{ name: 'alpha', path: '/data' }] }),
      );
    const until = (want: number) => untilStatus(mountAlpha, want);
    await report(NodeStatus.LINGERING);
    const refused = await until(503);
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { message: string }).message).toMatch(
      /node node-a, which holds the volumes of volumeMounts, is draining or unhealthy/,
    );
    await report(NodeStatus.READY);
    const placed = await until(201);
    expect(await nodeOf(placed)).toBe('node-a');
  });

  it('places a launch of a snapshot taken with volumes on their node, with the request’s own mounts taken into account', async () => {
    // Snapshots of a sandbox on node-a that mounted alpha at /data, in a repository both nodes share (each holds it).
    const snapshot = (id: string) => ({
      templateID: id,
      aliases: [],
      volumeMounts: [{ volumeID: VA, name: 'alpha', path: '/data' }],
    });
    const launch = (templateID: string, volumeMounts?: { name: string; path: string }[]) =>
      call(
        'POST',
        '/v2/sandboxes',
        { 'x-api-key': KEY },
        JSON.stringify({ templateID, ...(volumeMounts ? { volumeMounts } : {}) }),
      );
    const S1 = 'snapvol-1';
    for (const n of [a, b]) n.templates.set(S1, snapshot(S1));
    try {
      // Either node could launch it; the scheduler's round robin would alternate: every launch goes to alpha's.
      for (let i = 0; i < 6; i++) {
        const r = await launch(S1);
        expect(r.status).toBe(201);
        expect(await nodeOf(r)).toBe('node-a');
      }
      // The request mounts beta where the snapshot had alpha: alpha is not mounted, so beta's node takes it.
      for (const path of ['/data', '/data/', '//data'])
        expect(await nodeOf(await launch(S1, [{ name: 'beta', path }]))).toBe('node-b');
      // beta elsewhere, beside the snapshot's alpha: two nodes, 409 as for a create naming both.
      const split = await launch(S1, [{ name: 'beta', path: '/b' }]);
      expect([split.status, ((await split.json()) as { message: string }).message]).toEqual([
        409,
        `volumeMounts: the volumes live on different nodes ("beta" on node-b, "alpha" (the snapshot's, at /data) on node-a); a sandbox can mount only volumes of one node`,
      ]);

      // A snapshot only node-b holds (its own repository), whose volume is on node-a: 409 naming both.
      const S2 = 'snapvol-2';
      b.templates.set(S2, snapshot(S2));
      const apart = await launch(S2);
      expect([apart.status, ((await apart.json()) as { message: string }).message]).toEqual([
        409,
        `the volumes snapshot "${S2}" was taken with live on node-a, and template "${S2}" only on node-b; a sandbox can mount only volumes of its own node`,
      ]);

      // The recorded volume is gone from every node: placed as the snapshot alone would be (the launch's node
      // answers its 400 naming the volume, as one node does).
      const S3 = 'snapvol-3';
      const gone = '66666666-6666-4666-8666-666666666666';
      b.templates.set(S3, { templateID: S3, volumeMounts: [{ volumeID: gone, name: 'old', path: '/o' }] });
      expect(await nodeOf(await launch(S3))).toBe('node-b');
    } finally {
      for (const n of [a, b]) n.templates.clear();
    }
  });

  it('refuses a launch of a snapshot whose volumes’ node is draining (503)', async () => {
    const S = 'snapvol-drain';
    for (const n of [a, b])
      n.templates.set(S, { templateID: S, volumeMounts: [{ volumeID: VA, name: 'alpha', path: '/data' }] });
    const launch = () =>
      call('POST', '/v2/sandboxes', { 'x-api-key': KEY }, JSON.stringify({ templateID: S }));
    const until = (want: number) => untilStatus(launch, want);
    try {
      await report(NodeStatus.LINGERING);
      const refused = await until(503);
      expect([refused.status, ((await refused.json()) as { message: string }).message]).toEqual([
        503,
        `node node-a, which holds the volumes snapshot "${S}" was taken with, is draining or unhealthy; try again later`,
      ]);
    } finally {
      await report(NodeStatus.READY);
    }
    const placed = await until(201);
    expect(await nodeOf(placed)).toBe('node-a');
    for (const n of [a, b]) n.templates.clear();
  });

  it('streams a file write through for longer than request_timeout (a large upload is not cut)', async () => {
    // 6 chunks 300 ms apart: the body takes about twice the gateway's 1 s request_timeout to arrive.
    const chunk = Buffer.alloc(64 * 1024, 7);
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        if (sent === 6) return c.close();
        await new Promise((r) => setTimeout(r, 300));
        sent++;
        c.enqueue(chunk);
      },
    });
    const r = await fetch(`${base}/volumecontent/${VA}/file?path=/big.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${volumeContentToken(KEY, VA)}` },
      body,
      duplex: 'half',
    } as RequestInit);
    expect(r.status).toBe(200);
    expect(await nodeOf(r)).toBe('node-a');
    expect(a.bodyBytes).toBe(6 * chunk.length);
  });

  it('is all or nothing when a node is in trouble, and never says 404 for what it could not see', async () => {
    b.failing = 503;
    try {
      const list = await call('GET', '/volumes');
      expect([list.status, await list.json()]).toEqual([
        502,
        { code: 502, message: 'volume list unavailable: node node-b answered 503' },
      ]);
      const unknown = '44444444-4444-4444-8444-444444444444';
      const r = await call('GET', `/volumes/${unknown}`);
      expect([r.status, ((await r.json()) as { message: string }).message]).toEqual([
        502,
        'volume lookup unavailable: node node-b did not answer',
      ]);
      // alpha is on the healthy node: found, and mounted there.
      expect(await nodeOf(await call('GET', `/volumes/${VA}`))).toBe('node-a');
      const create = await call(
        'POST',
        '/v2/sandboxes',
        { 'x-api-key': KEY },
        JSON.stringify({ volumeMounts: [{ name: 'nope', path: '/x' }] }),
      );
      expect(create.status).toBe(502);
    } finally {
      b.failing = undefined;
    }
    b.server.closeAllConnections();
    await new Promise<void>((r) => b.server.close(() => r()));
    const r = await call('GET', '/volumes');
    expect(((await r.json()) as { message: string }).message).toBe(
      'volume list unavailable: node node-b unreachable',
    );
  });

  it('checks the content token before asking any node', async () => {
    const seen = a.seen.length + b.seen.length;
    for (const headers of [
      {},
      { authorization: `Bearer ${volumeContentToken(KEY, VB)}` }, // another volume's
      { authorization: `Bearer ${volumeContentToken('e2b_other', VA)}` }, // another cluster's
      { authorization: `Basic ${volumeContentToken(KEY, VA)}` },
      { 'x-api-key': 'wrong' },
    ] as Record<string, string>[]) {
      const r = await call('GET', `/volumecontent/${VA}/file?path=/x`, headers);
      expect(r.status).toBe(401);
      expect(r.headers.get('connection')).toBe('close');
    }
    expect(a.seen.length + b.seen.length).toBe(seen);
  });
});
