// The gateway between a real scheduler (in this process, bindings in memory) and two HTTP servers that
// answer as nodes do: what reaches which node, what gets recorded, and every refusal. The real nodes and the
// SDK are in test/e2e/cluster-gateway.test.ts.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { WebSocket, WebSocketServer } from 'ws';
import {
  createSchedulerClient,
  decodePageToken,
  encodePageToken,
  NodeStatus,
  timestampNs,
  type SchedulerClient,
} from '@aenv/protocol';
import { defaultClusterConfig, type RunningScheduler } from '@aenv/scheduler';
import { startGateway, type RunningGateway } from './run.js';
import { startSchedulerAndGateway } from './testing/scheduler-and-gateway.js';

const KEY = 'e2b_' + 'k'.repeat(40);
const silent = pino({ level: 'silent' }, new Writable({ write: (_c, _e, cb) => cb() }));

/** Orders what every fake node was sent. */
let sent = 0;

interface Seen {
  /** The how-manieth request to any fake node. */
  seq: number;
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** An HTTP server answering the node routes the gateway uses, remembering what it was sent. */
class FakeNode {
  server!: Server;
  seen: Seen[] = [];
  sandboxes: { sandboxID: string; startedAt: string }[] = [];
  listStatus = 200;
  /** Whether `GET /v2/sandboxes` pages as a node does (limit, nextToken, order); else it lists all. */
  pages = false;
  /** Items of every list answer. */
  listed: number[] = [];
  /** What it answers for `POST /cluster/unheld-sandboxes` (paged as `GET /v2/sandboxes`), and its status. */
  unheld: { sandboxID: string; startedAt: string; state?: string }[] = [];
  unheldStatus = 200;
  /** The bodies of those requests. */
  unheldAsked: { listedNodes: string[] }[] = [];
  private n = 0;
  constructor(readonly id: string) {}
  get url() {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  async start() {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString();
        this.seen.push({ seq: ++sent, method: req.method!, url: req.url!, headers: req.headers, body });
        this.answer(req, body, res);
      });
    });
    const wss = new WebSocketServer({ noServer: true });
    this.server.on('upgrade', (req, socket, head) => {
      this.seen.push({ seq: ++sent, method: req.method!, url: req.url!, headers: req.headers, body: '' });
      wss.handleUpgrade(req, socket, head, (ws) =>
        ws.on('message', (m: Buffer) => ws.send(`${this.id}:${m.toString()}`)),
      );
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
  }
  /** A page of `items` as a node pages `GET /v2/sandboxes` (limit, nextToken, order). */
  private page(
    items: { sandboxID: string; startedAt: string }[],
    url: string,
    json: (status: number, v: unknown, h?: Record<string, string>) => void,
  ) {
    const q = new URL(url, 'http://node').searchParams;
    const key = (s: { sandboxID: string; startedAt: string }) => ({
      t: timestampNs(s.startedAt),
      id: s.sandboxID,
    });
    const asc = q.get('order') === 'asc';
    const sorted = [...items].sort((x, y) => {
      const [kx, ky] = [key(x), key(y)];
      return kx.t !== ky.t ? (kx.t > ky.t !== asc ? -1 : 1) : kx.id < ky.id ? -1 : 1;
    });
    const token = q.get('nextToken');
    const c = token ? decodePageToken(token) : undefined;
    const beyond = (t: bigint) => (asc ? t > c!.timeNs : t < c!.timeNs);
    const rest = c
      ? sorted.filter((x) => beyond(key(x).t) || (key(x).t === c.timeNs && key(x).id > c.id))
      : sorted;
    const limit = q.has('limit') ? Number(q.get('limit')) : rest.length;
    const page = rest.slice(0, limit);
    const last = page.at(-1);
    json(
      200,
      page,
      last && rest.length > limit
        ? {
            'x-next-token': encodePageToken(
              { id: last.sandboxID, createdAt: last.startedAt },
              asc ? 'asc' : 'desc',
            ),
          }
        : {},
    );
    return page.length;
  }
  /** The last list request it was sent (`GET /sandboxes`, `GET /v2/sandboxes`). */
  lastList(): Seen {
    return this.seen.filter((x) => x.method === 'GET' && /^\/(v2\/)?sandboxes(\?|$)/.test(x.url)).at(-1)!;
  }
  private answer(req: IncomingMessage, body: string, res: ServerResponse) {
    const url = req.url!;
    const json = (status: number, v: unknown, h: Record<string, string> = {}) =>
      res.writeHead(status, { 'content-type': 'application/json', ...h }).end(JSON.stringify(v));
    if (req.method === 'GET' && /^\/(v2\/)?sandboxes(\?|$)/.test(url)) {
      if (this.listStatus !== 200) return json(this.listStatus, { code: this.listStatus, message: 'nope' });
      if (!this.pages || !url.startsWith('/v2/')) {
        this.listed.push(this.sandboxes.length);
        return json(200, this.sandboxes);
      }
      this.listed.push(this.page(this.sandboxes, url, json));
      return;
    }
    if (req.method === 'POST' && url.startsWith('/cluster/unheld-sandboxes')) {
      if (this.unheldStatus !== 200)
        return json(this.unheldStatus, { code: this.unheldStatus, message: 'no such route here' });
      this.unheldAsked.push(JSON.parse(body) as { listedNodes: string[] });
      this.page(this.unheld, url, json);
      return;
    }
    if (req.method === 'POST' && (url === '/sandboxes' || url === '/sandboxes-cold')) {
      if (body.includes('huge-answer')) return json(201, { sandboxID: 'x', pad: 'p'.repeat(4096) });
      const id = `${this.id}-new-${++this.n}`;
      return json(201, { sandboxID: id }, { 'x-agentenv-sandbox-id': id });
    }
    const fork = /^\/sandboxes\/([^/]+)\/fork$/.exec(url);
    if (fork) {
      const count = (JSON.parse(body || '{}') as { count?: number }).count ?? 1;
      return json(
        201,
        Array.from({ length: count }, (_, i) => ({ sandbox: { sandboxID: `${fork[1]}-child-${i}` } })),
      );
    }
    if (/^\/sandboxes\/[^/]+\/connect$/.test(url)) return json(200, { node: this.id });
    if (url.startsWith('/proxy/slow')) return; // never answers
    if (url.startsWith('/proxy/stream')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      setTimeout(() => res.end('data: two\n\n'), 1500);
      return;
    }
    return json(200, { node: this.id, url, headers: req.headers });
  }
}

describe('aenv gateway against a real scheduler', () => {
  const a = new FakeNode('node-a');
  const b = new FakeNode('node-b');
  let sched: RunningScheduler;
  let gw: RunningGateway;
  let rpc: SchedulerClient;
  let base: string;

  const call = (
    method: string,
    path: string,
    init: { headers?: Record<string, string>; body?: string } = {},
  ) =>
    fetch(base + path, {
      method,
      headers: { 'x-api-key': KEY, ...init.headers },
      ...(init.body !== undefined ? { body: init.body } : {}),
    });
  /** One raw HTTP/1.1 exchange: what fetch will not send (a Host header, a repeated field). */
  const raw = (text: string) =>
    new Promise<string>((resolve, reject) => {
      const s = connect(gw.port, '127.0.0.1', () => s.write(text));
      let out = '';
      s.on('data', (d: Buffer) => (out += d.toString()));
      s.on('close', () => resolve(out));
      s.on('error', reject);
    });
  const bound = async (id: string) => (await rpc.lookupNode({ sandboxId: id })).node?.nodeId;

  beforeAll(async () => {
    await a.start();
    await b.start();
    ({ sched, gw, base } = await startSchedulerAndGateway([a, b], KEY, {
      requestTimeoutMs: 1000,
      forwardResponseSize: 1024,
      sandboxProxyDomains: ['SBX.test'],
      debugMode: true,
    }));
    rpc = createSchedulerClient(`127.0.0.1:${sched.grpcPort}`);
  });
  afterAll(async () => {
    await gw?.stop();
    await sched?.stop();
    a.server?.close();
    b.server?.close();
  });

  it('asks for exactly one right X-API-Key on the control plane (401, empty), not on /health', async () => {
    for (const headers of [{}, { 'x-api-key': 'wrong' }, { 'x-api-key': KEY + 'x' }] as Record<
      string,
      string
    >[]) {
      const r = await fetch(`${base}/sandboxes`, { headers });
      expect(r.status).toBe(401);
      expect(await r.text()).toBe('');
    }
    // Two X-API-Key headers, both right: refused (raw request, fetch would join them).
    const dup = await raw(
      `GET /nodes HTTP/1.1\r\nHost: x\r\nX-API-Key: ${KEY}\r\nx-api-key: ${KEY}\r\nConnection: close\r\n\r\n`,
    );
    expect(dup).toMatch(/^HTTP\/1.1 401 /);
    expect((await fetch(`${base}/health`)).status).toBe(204);
    expect((await fetch(`${base}/metrics`)).status).toBe(404);
  });

  let created: string;
  it('places a create with Schedule, forwards the body, records the sandbox on the node that made it', async () => {
    const r = await call('POST', '/sandboxes', {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', metadata: { team: 'x' } }),
    });
    expect(r.status).toBe(201);
    created = ((await r.json()) as { sandboxID: string }).sandboxID;
    const nodeId = r.headers.get('x-agentenv-node-id')!;
    expect(created.startsWith(nodeId)).toBe(true);
    expect(await bound(created)).toBe(nodeId);
    const node = nodeId === a.id ? a : b;
    const got = node.seen.at(-1)!;
    expect(JSON.parse(got.body)).toEqual({ templateID: 'base', metadata: { team: 'x' } });
    expect(got.headers['x-api-key']).toBe(KEY);
    expect(got.headers['x-forwarded-method']).toBe('POST');
    expect(got.headers['x-forwarded-uri']).toBe('/sandboxes');
    expect(got.headers['x-forwarded-for']).toBe('127.0.0.1');
  });

  it('sends a fork to the parent’s node and records every child there', async () => {
    const r = await call('POST', `/sandboxes/${created}/fork`, { body: JSON.stringify({ count: 4 }) });
    expect(r.status).toBe(201);
    const parentNode = await bound(created);
    expect(r.headers.get('x-agentenv-node-id')).toBe(parentNode);
    for (let i = 0; i < 4; i++) expect(await bound(`${created}-child-${i}`)).toBe(parentNode);
  });

  it('routes sandbox traffic (headers and host routes) to the bound node’s /proxy', async () => {
    const r = await fetch(`${base}/files?path=%2Fa`, {
      headers: { 'e2b-sandbox-id': created, 'e2b-sandbox-port': '49983', 'x-access-token': 't' },
    });
    expect(r.status).toBe(200);
    const got = (await r.json()) as { node: string; url: string; headers: Record<string, string> };
    expect(got.node).toBe(await bound(created));
    expect(got.url).toBe('/proxy/files?path=%2Fa');
    expect(got.headers['x-access-token']).toBe('t');
    const answer = await raw(
      `GET /x HTTP/1.1\r\nHost: 3000-${created}.sbx.test\r\nConnection: close\r\n\r\n`,
    );
    const hg = JSON.parse(answer.slice(answer.indexOf('{'), answer.lastIndexOf('}') + 1)) as {
      url: string;
      headers: Record<string, string>;
    };
    expect(hg.url).toBe('/proxy/x');
    expect(hg.headers['x-agentenv-sandbox-id']).toBe(created);
    expect(hg.headers['x-agentenv-target-port']).toBe('3000');
    expect(hg.headers['x-forwarded-host']).toBe(`3000-${created}.sbx.test`);
    for (const host of [`99999-${created}.sbx.test`, 'abc.sbx.test', `80-${created}_x.sbx.test`])
      expect(await raw(`GET /x HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`), host).toMatch(
        /^HTTP\/1.1 400 /,
      );
    const noPort = await fetch(`${base}/proxy/x`, { headers: { 'e2b-sandbox-id': created } });
    expect(await noPort.json()).toEqual({ code: 400, message: 'target port header required' });
  });

  it('merges the nodes’ lists: deduplicated, newest first, paged with the node token format', async () => {
    const t = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
    a.sandboxes = [
      { sandboxID: 'a1', startedAt: t(1) },
      { sandboxID: 'a3', startedAt: t(3) },
      { sandboxID: 'dup', startedAt: t(5) },
    ];
    b.sandboxes = [
      { sandboxID: 'b2', startedAt: t(2) },
      { sandboxID: 'b3', startedAt: t(3) },
      { sandboxID: 'dup', startedAt: t(5) },
    ];
    const all = await call('GET', '/v2/sandboxes?state=running');
    expect(a.lastList().url).toBe('/v2/sandboxes?state=running');
    expect(((await all.json()) as { sandboxID: string }[]).map((s) => s.sandboxID)).toEqual([
      'dup',
      'a3',
      'b3',
      'b2',
      'a1',
    ]);
    const pages: string[][] = [];
    let token = '';
    for (let i = 0; i < 5; i++) {
      const r = await call('GET', `/v2/sandboxes?state=running&limit=2${token ? `&nextToken=${token}` : ''}`);
      expect(r.status).toBe(200);
      pages.push(((await r.json()) as { sandboxID: string }[]).map((s) => s.sandboxID));
      token = r.headers.get('x-next-token') ?? '';
      if (!token) break;
    }
    expect(pages).toEqual([['dup', 'a3'], ['b3', 'b2'], ['a1']]);
    // The token is the nodes' own format.
    const first = await call('GET', '/v2/sandboxes?limit=1');
    expect(first.headers.get('x-next-token')).toBe(encodePageToken({ id: 'dup', createdAt: t(5) }));
    // A full last page names a next one, which is empty.
    const exact = await call('GET', '/sandboxes?limit=5');
    const after = await call('GET', `/sandboxes?limit=5&nextToken=${exact.headers.get('x-next-token')}`);
    expect(await after.json()).toEqual([]);
    expect(await (await call('GET', '/sandboxes?limit=0')).json()).toEqual([]);
    expect(await (await call('GET', '/sandboxes?limit=-3')).json()).toEqual([]);
    for (const q of ['limit=abc', 'limit=1.5', 'nextToken=%25%25'])
      expect((await call('GET', `/sandboxes?${q}`)).status, q).toBe(400);
  });

  it('asks each node for only its part of a v2 page: its own page after the same cursor', async () => {
    // Same-millisecond starts across the nodes: the merge's tie-break (sandboxID ascending) decides.
    const t = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms).toISOString();
    a.sandboxes = Array.from({ length: 7 }, (_, i) => ({
      sandboxID: `a${i}`,
      startedAt: t(Math.floor(i / 2)),
    }));
    b.sandboxes = [
      ...Array.from({ length: 7 }, (_, i) => ({ sandboxID: `b${i}`, startedAt: t(Math.floor(i / 3)) })),
      { sandboxID: 'a1', startedAt: t(0) }, // also on node-a (a sandbox that moved): listed once
    ];
    a.pages = b.pages = true;
    a.listed = [];
    b.listed = [];
    try {
      for (const order of ['desc', 'asc'] as const) {
        const newer = order === 'desc' ? -1 : 1;
        const expected = [...a.sandboxes, ...b.sandboxes.slice(0, 7)]
          .sort((x, y) =>
            x.startedAt !== y.startedAt
              ? x.startedAt > y.startedAt
                ? newer
                : -newer
              : x.sandboxID < y.sandboxID
                ? -1
                : 1,
          )
          .map((s) => s.sandboxID);
        const walked: string[] = [];
        let token = '';
        a.listed = [];
        b.listed = [];
        const orderQuery = order === 'asc' ? '&order=asc' : '';
        for (let i = 0; i < 20; i++) {
          const r = await call(
            'GET',
            `/v2/sandboxes?limit=3${orderQuery}${token ? `&nextToken=${token}` : ''}`,
          );
          expect(r.status).toBe(200);
          const page = ((await r.json()) as { sandboxID: string }[]).map((s) => s.sandboxID);
          expect(page.length).toBeLessThanOrEqual(3);
          walked.push(...page);
          const asked = new URL(a.lastList().url, 'http://node');
          expect(asked.pathname).toBe('/v2/sandboxes');
          expect(Object.fromEntries(asked.searchParams)).toEqual({
            ...(order === 'asc' ? { order } : {}),
            limit: '3',
            ...(token ? { nextToken: token } : {}),
          });
          token = r.headers.get('x-next-token') ?? '';
          // The nodes' own token format, ascending pages' included.
          if (token)
            expect(Buffer.from(token, 'base64url').toString().endsWith('__asc')).toBe(order === 'asc');
          if (!token) break;
        }
        expect(walked, order).toEqual(expected);
        // 14 records in pages of 3: each node served at most 3 per page, not its whole list every time.
        for (const n of [a, b]) expect(Math.max(...n.listed)).toBeLessThanOrEqual(3);
      }
      // A limit a node does not take, an order no node takes (its 400 is theirs), and v1 (no pages on a
      // node): every node lists all.
      for (const [q, asked] of [
        ['/v2/sandboxes?limit=500', '/v2/sandboxes'],
        ['/v2/sandboxes?limit=3&order=sideways', '/v2/sandboxes?order=sideways'],
        ['/sandboxes?limit=3', '/sandboxes'],
      ]) {
        expect((await call('GET', q!)).status, q).toBe(200);
        expect(a.lastList().url, q).toBe(asked);
      }
    } finally {
      a.pages = b.pages = false;
    }
  });

  it('answers 502 when one node cannot list (all or nothing), and a node’s 4xx as it is', async () => {
    b.listStatus = 500;
    const r = await call('GET', '/sandboxes');
    expect(r.status).toBe(502);
    expect(((await r.json()) as { message: string }).message).toContain('cluster list unavailable');
    b.listStatus = 400;
    expect((await call('GET', '/sandboxes')).status).toBe(400);
    b.listStatus = 200;
  });

  it('refuses a create body over 64 KiB (413) and a create answer over forward_response_size (502)', async () => {
    const before = a.seen.length + b.seen.length;
    const big = await call('POST', '/sandboxes', { body: JSON.stringify({ pad: 'x'.repeat(70 * 1024) }) });
    expect(big.status).toBe(413);
    expect(a.seen.length + b.seen.length).toBe(before);
    const huge = await call('POST', '/sandboxes', { body: '{"x":"huge-answer"}' });
    expect(huge.status).toBe(502);
    expect(await huge.json()).toEqual({ code: 502, message: 'upstream response too large' });
  });

  it('times out a regular request (504) but not a stream', async () => {
    const h = { 'e2b-sandbox-id': created, 'e2b-sandbox-port': '8080' };
    const slow = await fetch(`${base}/slow`, { headers: h });
    expect(slow.status).toBe(504);
    expect(await slow.json()).toEqual({ code: 504, message: 'upstream timeout' });
    const stream = await fetch(`${base}/stream`, { headers: { ...h, accept: 'text/event-stream' } });
    expect(await stream.text()).toBe('data: one\n\ndata: two\n\n');
  });

  it('moves a connect of a sandbox without a binding to a scheduled node and records it there', async () => {
    const r = await call('POST', '/sandboxes/orphan-1/connect', { body: '{"timeout":60}' });
    expect(r.status).toBe(200);
    const { node } = (await r.json()) as { node: string };
    expect(await bound('orphan-1')).toBe(node);
    // GET and DELETE of one without a binding reach a scheduled node, which may take it over from the shared
    // repository (docs/cluster.md#node-loss): a GET's 2xx binds it there, a DELETE binds nothing.
    const got = await call('GET', '/sandboxes/orphan-2');
    expect(got.status).toBe(200);
    expect(await bound('orphan-2')).toBe(((await got.json()) as { node: string }).node);
    const del = await call('DELETE', '/sandboxes/orphan-3');
    expect(del.status).toBe(200);
    await expect(bound('orphan-3')).rejects.toThrow(/sandbox assignment not found/);
    // Other calls about an unknown sandbox are the scheduler's 404.
    const pause = await call('POST', '/sandboxes/nobody/pause');
    expect(pause.status).toBe(404);
    expect(await pause.json()).toEqual({ code: 404, message: 'sandbox assignment not found' });
  });

  it('lists nodes from the scheduler and exports its three metrics', async () => {
    const nodes = (await (await call('GET', '/nodes')).json()) as unknown[];
    expect(nodes).toEqual([]); // no heartbeats from these nodes
    expect((await call('GET', '/nodes/ghost')).status).toBe(404);
    const text = await (await fetch(`http://127.0.0.1:${gw.metricsPort}/metrics`)).text();
    for (const name of [
      'agentenv_gateway_http_request_duration_seconds',
      'agentenv_gateway_upstream_proxy_duration_seconds',
      'agentenv_gateway_scheduler_rpc_duration_seconds',
    ])
      expect(text).toContain(name);
  });

  it('tunnels a WebSocket to the bound node’s /proxy, with no time bound', async () => {
    const ws = new WebSocket(`${base.replace('http', 'ws')}/ws`, {
      headers: { 'e2b-sandbox-id': created, 'e2b-sandbox-port': '3000' },
    });
    await new Promise((resolve, reject) => (ws.once('open', resolve), ws.once('error', reject)));
    ws.send('ping');
    const answer = await new Promise<string>((resolve) =>
      ws.once('message', (m: Buffer) => resolve(m.toString())),
    );
    expect(answer).toBe(`${await bound(created)}:ping`);
    ws.close();
    // Without the API key, an upgrade to the control plane is refused.
    const refused = new WebSocket(`${base.replace('http', 'ws')}/sandboxes`);
    const status = await new Promise<number>((resolve) =>
      refused.once('unexpected-response', (_q, res) => resolve(res.statusCode!)),
    );
    expect(status).toBe(401);
  });

  it('sends traffic for a sandbox without a binding to a node Schedule picks (it resumes it or says not found)', async () => {
    const r = await fetch(`${base}/x`, {
      headers: { 'e2b-sandbox-id': 'ghost', 'e2b-sandbox-port': '49983' },
    });
    expect(r.status).toBe(200);
    const got = (await r.json()) as { url: string; node: string };
    expect(got.url).toBe('/proxy/x');
    // Bound there, so the next request (at any gateway) follows it.
    expect(await bound('ghost')).toBe(got.node);
  });

  it('moves a connect off a lingering node', async () => {
    // node-a reports itself draining, with the sandbox in its roster.
    await rpc.heartbeat({
      nodeId: a.id,
      serviceInstanceId: 'svc-a',
      snapshot: { status: NodeStatus.LINGERING, reportedAtUnixMs: BigInt(Date.now()) },
      sandboxIds: ['drained-1'],
    });
    expect(await bound('drained-1')).toBe(a.id);
    const schedules = async () => {
      const text = await (await fetch(`http://127.0.0.1:${gw.metricsPort}/metrics`)).text();
      const m =
        /agentenv_gateway_scheduler_rpc_duration_seconds_count\{rpc="Schedule",code="ok"\} (\d+)/.exec(text);
      return Number(m?.[1] ?? 0);
    };
    // The gateway learns node health within a refresh; until then the connect still goes to node-a.
    let moved = false;
    for (let i = 0; i < 50 && !moved; i++) {
      const before = await schedules();
      const r = await call('POST', '/sandboxes/drained-1/connect', { body: '{"timeout":60}' });
      expect(r.status).toBe(200);
      moved = (await schedules()) > before;
      if (!moved) await new Promise((res) => setTimeout(res, 100));
    }
    expect(moved).toBe(true);
  });

  it('maps an unreachable scheduler to 503', async () => {
    const gc = defaultClusterConfig();
    Object.assign(gc.gateway, {
      httpListenAddr: '127.0.0.1:0',
      metricsListenAddr: '127.0.0.1:0',
      schedulerAddr: '127.0.0.1:1',
    });
    const lonely = await startGateway(gc, KEY, silent);
    try {
      const r = await fetch(`http://127.0.0.1:${lonely.port}/sandboxes`, {
        method: 'POST',
        headers: { 'x-api-key': KEY },
        body: '{}',
      });
      expect(r.status).toBe(503);
      expect(((await r.json()) as { code: number }).code).toBe(503);
    } finally {
      await lonely.stop();
    }
  });
});

describe('the per-node routes through the gateway (docs/cluster.md#draining)', () => {
  const live = new FakeNode('node-live');
  const other = new FakeNode('node-other');
  let dead: { id: string; url: string };
  let cluster: Awaited<ReturnType<typeof startSchedulerAndGateway>>;
  const call = (method: string, path: string, init: { key?: string | null; body?: string } = {}) =>
    fetch(cluster.base + path, {
      method,
      headers: init.key === null ? {} : { 'x-api-key': init.key ?? KEY },
      ...(init.body !== undefined ? { body: init.body } : {}),
    });
  const seen = () => [...live.seen, ...other.seen];

  beforeAll(async () => {
    await live.start();
    await other.start();
    // A node whose port nobody listens on any more.
    const gone = createServer();
    await new Promise<void>((r) => gone.listen(0, '127.0.0.1', r));
    dead = { id: 'node-dead', url: `http://127.0.0.1:${(gone.address() as AddressInfo).port}` };
    await new Promise((r) => gone.close(r));
    cluster = await startSchedulerAndGateway([live, other, dead], KEY, { requestTimeoutMs: 2000 });
    const rpc = createSchedulerClient(`127.0.0.1:${cluster.sched.grpcPort}`);
    for (const n of [live, other, dead])
      await rpc.heartbeat({
        nodeId: n.id,
        serviceInstanceId: `svc-${n.id}`,
        snapshot: { status: NodeStatus.READY, reportedAtUnixMs: BigInt(Date.now()) },
      });
  });
  afterAll(async () => {
    await cluster?.stop();
    live.server?.close();
    other.server?.close();
  });

  it('sends POST /nodes/{id}/drain and GET /nodes/{id} to the named node, every time, with the body', async () => {
    // Schedule would alternate between the nodes: every call reaching node-live is the routing, not luck.
    for (let i = 0; i < 4; i++) {
      const r = await call('POST', '/nodes/node-live/drain', { body: '{}' });
      expect(r.status).toBe(200);
      expect(((await r.json()) as { node: string }).node).toBe('node-live');
      const got = await call('GET', '/nodes/node-live?clusterID=');
      expect(((await got.json()) as { node: string }).node).toBe('node-live');
    }
    expect(other.seen).toEqual([]);
    const drains = live.seen.filter((s) => s.method === 'POST');
    expect(drains).toHaveLength(4);
    expect(drains[0]).toMatchObject({ url: '/nodes/node-live/drain', body: '{}' });
    expect(drains[0]!.headers['x-api-key']).toBe(KEY);
    expect(live.seen.filter((s) => s.method === 'GET')[0]!.url).toBe('/nodes/node-live?clusterID=');
  });

  it('answers 404 for a node the scheduler does not know, 502 for one that does not answer', async () => {
    const before = seen().length;
    for (const path of ['/nodes/ghost/drain', '/nodes/%20node-live/drain', '/nodes/node-live%20/drain']) {
      const r = await call('POST', path);
      expect(r.status, path).toBe(404);
      expect(await r.json(), path).toEqual({
        code: 404,
        message: `node ${decodeURIComponent(path.split('/')[2]!)} not found`,
      });
    }
    expect(await (await call('GET', '/nodes/ghost')).json()).toEqual({
      code: 404,
      message: 'node ghost not found',
    });
    const r = await call('POST', '/nodes/node-dead/drain');
    expect(r.status).toBe(502);
    expect(await r.json()).toEqual({ code: 502, message: 'upstream unavailable' });
    expect(seen().length).toBe(before);
  });

  it('refuses bad ids (400) and a missing or wrong key (401) before any node sees the call', async () => {
    const before = seen().length;
    for (const path of [
      '/nodes//drain',
      '/nodes/node-live%2F..%2F..%2Fsandboxes/drain',
      '/nodes/%2F/drain',
      '/nodes/a%5Cb/drain',
      '/nodes/a%00b/drain',
      '/nodes/%ZZ/drain',
      `/nodes/${'n'.repeat(600)}/drain`,
    ]) {
      const r = await call('POST', path);
      expect(r.status, path).toBe(400);
      expect(await r.json(), path).toEqual({ code: 400, message: 'invalid node id' });
    }
    for (const key of [null, 'wrong', KEY + 'x']) {
      const r = await call('POST', '/nodes/node-live/drain', { key });
      expect(r.status).toBe(401);
      expect(await r.text()).toBe('');
    }
    expect(seen().length).toBe(before);
  });
});

describe('the cluster list of sandboxes held by no node (docs/cluster.md#sandboxes-held-by-no-node)', () => {
  const n1 = new FakeNode('node-1');
  const n2 = new FakeNode('node-2');
  let lost: { id: string; url: string };
  let cluster: Awaited<ReturnType<typeof startSchedulerAndGateway>>;
  const t = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
  const list = async (path: string) => {
    const r = await fetch(cluster.base + path, { headers: { 'x-api-key': KEY } });
    return {
      status: r.status,
      token: r.headers.get('x-next-token') ?? '',
      body: (await r.json()) as { sandboxID: string; state?: string; from?: string; message?: string }[] & {
        message?: string;
      },
    };
  };
  const walk = async (query: string, limit: number) => {
    const ids: string[] = [];
    let token = '';
    for (let i = 0; i < 20; i++) {
      const r = await list(`/v2/sandboxes?limit=${limit}${query}${token ? `&nextToken=${token}` : ''}`);
      expect(r.status).toBe(200);
      ids.push(...r.body.map((s) => s.sandboxID));
      token = r.token;
      if (!token) break;
    }
    return ids;
  };

  beforeAll(async () => {
    await n1.start();
    await n2.start();
    // A node that heartbeats once and is gone (nothing listens at its address): lost after report_ttl.
    const gone = createServer();
    await new Promise<void>((r) => gone.listen(0, '127.0.0.1', r));
    lost = { id: 'node-lost', url: `http://127.0.0.1:${(gone.address() as AddressInfo).port}` };
    await new Promise((r) => gone.close(r));
    cluster = await startSchedulerAndGateway(
      [n1, n2, lost],
      KEY,
      { requestTimeoutMs: 2000 },
      { reportTtlMs: 2000 },
    );
    const rpc = createSchedulerClient(`127.0.0.1:${cluster.sched.grpcPort}`);
    await rpc.heartbeat({
      nodeId: lost.id,
      serviceInstanceId: 'svc-lost',
      snapshot: { status: NodeStatus.READY, reportedAtUnixMs: BigInt(Date.now()) },
    });
    n1.pages = n2.pages = true;
    n1.sandboxes = [
      { sandboxID: 'r1', startedAt: t(1) },
      // Being taken over by node-1 while the repository still names it: node-1's entry is the one listed.
      { sandboxID: 'moving', startedAt: t(3), state: 'running' } as { sandboxID: string; startedAt: string },
    ];
    n2.sandboxes = [{ sandboxID: 'r2', startedAt: t(2) }];
    const unheld = [
      { sandboxID: 'moving', startedAt: t(3), state: 'paused', from: 'repository' },
      { sandboxID: 'orphan1', startedAt: t(4), state: 'paused', from: 'repository' },
      { sandboxID: 'orphan2', startedAt: t(0), state: 'paused', from: 'repository' },
    ];
    n1.unheld = n2.unheld = unheld;
  });
  afterAll(async () => {
    await cluster?.stop();
    n1.server?.close();
    n2.server?.close();
  });

  it('skips a node lost by its heartbeats (it made the list 502) and does not count it as listing its own', async () => {
    // Before the scheduler sees it lost, the node that does not answer makes the list fail, as any node.
    const early = await list('/v2/sandboxes');
    expect(early.status).toBe(502);
    let r = early;
    for (let i = 0; i < 60 && r.status !== 200; i++) {
      await new Promise((res) => setTimeout(res, 100));
      r = await list('/v2/sandboxes');
    }
    expect(r.status).toBe(200);
    n1.unheldAsked = [];
    n2.unheldAsked = [];
    expect((await list('/v2/sandboxes')).status).toBe(200);
    const asked = [...n1.unheldAsked, ...n2.unheldAsked];
    expect(asked).toHaveLength(1);
    expect([...asked[0]!.listedNodes].sort()).toEqual(['node-1', 'node-2']);
  });

  it('merges them once, in order, a node’s own entry first; one node is asked, in turn', async () => {
    const r = await list('/v2/sandboxes');
    expect(r.body.map((s) => s.sandboxID)).toEqual(['orphan1', 'moving', 'r2', 'r1', 'orphan2']);
    expect(r.body.find((s) => s.sandboxID === 'moving')).toEqual({
      sandboxID: 'moving',
      startedAt: t(3),
      state: 'running',
    });
    expect(r.body.find((s) => s.sandboxID === 'orphan1')).toMatchObject({
      state: 'paused',
      from: 'repository',
    });
    const before = [n1.unheldAsked.length, n2.unheldAsked.length];
    await list('/v2/sandboxes');
    await list('/v2/sandboxes');
    expect([n1.unheldAsked.length - before[0]!, n2.unheldAsked.length - before[1]!]).toEqual([1, 1]);
  });

  it('pages them with the rest: every record once, in either order, each source asked for its own page', async () => {
    const all = ['orphan1', 'moving', 'r2', 'r1', 'orphan2'];
    for (const limit of [1, 2, 3]) {
      expect(await walk('', limit), `limit ${limit}`).toEqual(all);
      expect(await walk('&order=asc', limit), `asc, limit ${limit}`).toEqual([...all].reverse());
    }
    const last = [...n1.seen, ...n2.seen]
      .filter((s) => s.url.startsWith('/cluster/'))
      .sort((x, y) => x.seq - y.seq)
      .at(-1)!;
    const q = new URL(last.url, 'http://node').searchParams;
    expect(q.get('limit')).toBe('3');
    expect(q.get('order')).toBe('asc');
    expect(q.has('nextToken')).toBe(true);
    expect(last.headers['x-api-key']).toBe(KEY);
  });

  it('asks nothing of the repository for a v1 list (running sandboxes only)', async () => {
    const before = n1.unheldAsked.length + n2.unheldAsked.length;
    const r = await list('/sandboxes');
    expect(r.status).toBe(200);
    expect(r.body.map((s) => s.sandboxID)).toEqual(['moving', 'r2', 'r1']);
    expect(n1.unheldAsked.length + n2.unheldAsked.length).toBe(before);
  });

  it('a node without the route (404) knows of none; a 5xx of it is 502, a 4xx is relayed', async () => {
    try {
      n1.unheldStatus = n2.unheldStatus = 404;
      const r = await list('/v2/sandboxes');
      expect(r.status).toBe(200);
      expect(r.body.map((s) => s.sandboxID)).toEqual(['moving', 'r2', 'r1']);
      n1.unheldStatus = n2.unheldStatus = 500;
      const failed = await list('/v2/sandboxes');
      expect(failed.status).toBe(502);
      expect(failed.body.message).toMatch(
        /^cluster list unavailable: node node-[12] could not list the sandboxes held by no node \(answered 500\)$/,
      );
      n1.unheldStatus = n2.unheldStatus = 400;
      const refused = await list('/v2/sandboxes');
      expect(refused).toMatchObject({ status: 400, body: { message: 'no such route here' } });
    } finally {
      n1.unheldStatus = n2.unheldStatus = 200;
    }
  });
});
