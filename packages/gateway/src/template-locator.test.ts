// The gateway's template, snapshot, metrics and team calls between a real scheduler and two HTTP servers
// answering the node's routes: which node each call reaches, how lists merge, and what a node that does not
// answer does. Real nodes and the SDK: test/e2e/cluster-templates.test.ts.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePageToken } from '@aenv/protocol';
import type { RunningScheduler } from '@aenv/scheduler';
import type { RunningGateway } from './run.js';
import { startSchedulerAndGateway } from './testing/scheduler-and-gateway.js';
import { rendezvousOrder } from './template-routes.js';

const KEY = 'e2b_' + 't'.repeat(40);
const uuid = (d: string) => `${d.repeat(8)}-${d.repeat(4)}-4${d.repeat(3)}-8${d.repeat(3)}-${d.repeat(12)}`;
const T_SHARED = uuid('1');
const T_A = uuid('2');
const T_B = uuid('3');
const S_A = uuid('4');
const SBX_A = uuid('5');
const SBX_B = uuid('6');

interface Rec {
  templateID: string;
  aliases: string[];
  createdAt: string;
  updatedAt: string;
  snapshot?: boolean;
}

/** Answers the template, snapshot, metrics, teams and create routes as a node holding `records` does. */
class TemplateNode {
  server!: Server;
  seen: string[] = [];
  failing: number | undefined;
  refuseDelete = false;
  constructor(
    readonly id: string,
    public records: Rec[],
    readonly sandboxes: string[],
  ) {}
  get url() {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  async start() {
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const url = req.url!;
        const path = url.split('?')[0]!;
        this.seen.push(`${req.method} ${url}${req.headers['x-api-key'] === KEY ? '' : ' (no key)'}`);
        const json = (status: number, v: unknown) =>
          res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(v));
        if (this.failing) return json(this.failing, { code: this.failing, message: 'trouble' });
        const templates = this.records.filter((r) => !r.snapshot);
        if (path === '/templates' || path === '/v2/templates')
          return json(
            200,
            templates.map((r) => ({ ...r, node: this.id })),
          );
        if (path === '/snapshots')
          return json(
            200,
            this.records
              .filter((r) => r.snapshot)
              .map((r) => ({ snapshotID: r.templateID, createdAt: r.createdAt, updatedAt: r.updatedAt })),
          );
        if (path === '/teams') return json(200, [{ teamID: 'team', node: this.id }]);
        if (path === '/sandboxes/metrics')
          return json(200, {
            sandboxes: Object.fromEntries(
              this.sandboxes.map((s) => [s, { timestamp: '2026-12-01T00:00:00.000Z', node: this.id }]),
            ),
          });
        if (path === '/v3/templates' || path === '/v2/sandboxes' || path === '/templates/tags')
          return json(201, { node: this.id, body });
        const one = /^\/(?:v2\/)?(?:templates|snapshots)\/([^/]+)/.exec(path);
        if (one) {
          const ref = decodeURIComponent(one[1]!);
          const r = this.records.find((x) => x.templateID === ref || x.aliases.includes(ref));
          if (!r) return json(404, { code: 404, message: `template ${ref} not found` });
          if (req.method === 'DELETE') {
            if (this.refuseDelete) return json(409, { code: 409, message: 'used by 1 sandbox' });
            this.records = this.records.filter((x) => x !== r);
            return res.writeHead(204).end();
          }
          return json(200, { ...r, node: this.id });
        }
        return json(200, { node: this.id });
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
  }
}

const at = (s: number) => `2026-12-01T00:00:${String(s).padStart(2, '0')}.000Z`;

describe('the gateway’s template, snapshot, metrics and team calls against a real scheduler', () => {
  // `base` is on both (its own record on each); T_SHARED on both (a shared repository), b's copy newer.
  const a = new TemplateNode(
    'node-a',
    [
      { templateID: T_SHARED, aliases: ['shared'], createdAt: at(1), updatedAt: at(1) },
      { templateID: T_A, aliases: ['only-a'], createdAt: at(2), updatedAt: at(2) },
      { templateID: uuid('7'), aliases: ['base'], createdAt: at(0), updatedAt: at(0) },
      { templateID: S_A, aliases: [], createdAt: at(5), updatedAt: at(5), snapshot: true },
    ],
    [SBX_A],
  );
  const b = new TemplateNode(
    'node-b',
    [
      { templateID: T_SHARED, aliases: ['shared'], createdAt: at(1), updatedAt: at(9) },
      { templateID: T_B, aliases: ['only-b'], createdAt: at(3), updatedAt: at(3) },
      { templateID: uuid('8'), aliases: ['base'], createdAt: at(0), updatedAt: at(0) },
    ],
    [SBX_B],
  );
  let sched: RunningScheduler;
  let gw: RunningGateway;
  let base: string;
  const call = (
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = { 'x-api-key': KEY },
  ) =>
    fetch(base + path, {
      method,
      headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  const nodeOf = async (r: Response) => ((await r.json()) as { node?: string }).node;

  beforeAll(async () => {
    await a.start();
    await b.start();
    ({ sched, gw, base } = await startSchedulerAndGateway([a, b], KEY, { requestTimeoutMs: 1000 }));
  });
  afterAll(async () => {
    await gw?.stop();
    await sched?.stop();
    a.server?.close();
    b.server?.close();
  });

  it('merges template and snapshot lists: one per id (the newest copy), newest first, paged as one node pages', async () => {
    const all = (await (await call('GET', '/templates')).json()) as { templateID: string; node: string }[];
    expect(all.map((t) => t.templateID)).toEqual([T_B, T_A, T_SHARED, uuid('7'), uuid('8')]);
    expect(all.find((t) => t.templateID === T_SHARED)!.node).toBe('node-b');
    const pages: string[][] = [];
    let token = '';
    for (let i = 0; i < 10; i++) {
      const r = await call('GET', `/v2/templates?limit=2${token ? `&nextToken=${token}` : ''}`);
      expect(r.status).toBe(200);
      pages.push(((await r.json()) as { templateID: string }[]).map((t) => t.templateID));
      token = r.headers.get('x-next-token') ?? '';
      if (!token) break;
      expect(decodePageToken(token).id).toBe(pages.at(-1)!.at(-1));
    }
    expect(pages).toEqual([[T_B, T_A], [T_SHARED, uuid('7')], [uuid('8')]]);
    expect(await (await call('GET', '/snapshots')).json()).toEqual([
      { snapshotID: S_A, createdAt: at(5), updatedAt: at(5) },
    ]);
    for (const bad of ['/v2/templates?limit=0', '/v2/templates?limit=101', '/snapshots?nextToken=%%%'])
      expect((await call('GET', bad)).status, bad).toBe(400);
  });

  it('sends calls naming one template or snapshot to its holder; an upload without the API key too', async () => {
    for (let i = 0; i < 2; i++) {
      expect(await nodeOf(await call('GET', `/templates/${T_B}`))).toBe('node-b');
      expect(await nodeOf(await call('GET', `/templates/${T_A}/builds/${T_A}/status`))).toBe('node-a');
      expect(await nodeOf(await call('GET', '/templates/only-b/tags'))).toBe('node-b');
      expect(await nodeOf(await call('GET', `/snapshots/${S_A}`))).toBe('node-a');
    }
    expect(
      await nodeOf(await call('POST', '/templates/tags', { target: 'only-a:default', tags: ['v1'] })),
    ).toBe('node-a');
    const hash = 'ab'.repeat(32);
    const token = `${Math.floor(Date.now() / 1000) + 600}.${'0'.repeat(64)}`;
    const up = await call('PUT', `/templates/${T_B}/files/${hash}/upload?token=${token}`, undefined, {});
    expect(await nodeOf(up)).toBe('node-b');
    expect(b.seen).toContain(`PUT /templates/${T_B}/files/${hash}/upload?token=${token} (no key)`);
    // A link that no node can have issued (malformed, expired) is refused before any node is asked.
    const asked = a.seen.length + b.seen.length;
    for (const [t, message] of [
      ['', 'invalid upload link'],
      ['123.abc', 'invalid upload link'],
      [`1.${'0'.repeat(64)}`, 'the upload link has expired'],
    ] as const) {
      const r = await call('PUT', `/templates/${uuid('d')}/files/${hash}/upload?token=${t}`, undefined, {});
      expect([r.status, await r.json()]).toEqual([403, { code: 403, message }]);
    }
    expect(a.seen.length + b.seen.length).toBe(asked);
    // Over-long bodies of the calls the gateway reads: 413, as for a create.
    const big = await call('POST', '/v3/templates', { name: 'x'.repeat(70 * 1024) });
    expect([big.status, await big.json()]).toEqual([
      413,
      { code: 413, message: `request body larger than ${64 * 1024} bytes` },
    ]);
    // A name no record can have reaches one node, whose 400 is the answer (the fake answers 404).
    expect((await call('GET', '/templates/a%20b')).status).toBe(404);
    // Without the key anything else is refused before a node is asked.
    expect((await call('GET', `/templates/${T_B}`, undefined, {})).status).toBe(401);
    // Every gateway picks the same one of several holders: the first in the name's order.
    const first = rendezvousOrder('shared', [{ nodeId: 'node-a' }, { nodeId: 'node-b' }])[0]!.nodeId;
    for (let i = 0; i < 3; i++)
      expect(await nodeOf(await call('GET', `/templates/${T_SHARED}/builds/${T_SHARED}/status`))).toBe(first);
    // No node has it: a node's own 404.
    const none = await call('GET', `/templates/${uuid('9')}`);
    expect(none.status).toBe(404);
    expect(await none.json()).toEqual({ code: 404, message: `template ${uuid('9')} not found` });
  });

  it('places a create from a template only one node holds on that node, and others as Schedule picks', async () => {
    const create = (templateID: string) => call('POST', '/v2/sandboxes', { templateID, timeout: 60 });
    for (let i = 0; i < 4; i++) {
      expect(await nodeOf(await create('only-b'))).toBe('node-b');
      expect(await nodeOf(await create(`ns/only-a:v1`))).toBe('node-a');
      expect(await nodeOf(await create(S_A))).toBe('node-a');
    }
    const spread = new Set<string | undefined>();
    for (let i = 0; i < 4; i++) spread.add(await nodeOf(await create('base')));
    expect(spread).toEqual(new Set(['node-a', 'node-b']));
    // A rebuild of a name goes to the node that has it.
    expect(await nodeOf(await call('POST', '/v3/templates', { name: 'only-b:v2', cpuCount: 1 }))).toBe(
      'node-b',
    );
  });

  it('joins sandbox metrics across nodes and answers teams once', async () => {
    const m = (await (await call('GET', `/sandboxes/metrics?sandbox_ids=${SBX_A},${SBX_B}`)).json()) as {
      sandboxes: Record<string, { node: string }>;
    };
    expect(Object.fromEntries(Object.entries(m.sandboxes).map(([k, v]) => [k, v.node]))).toEqual({
      [SBX_A]: 'node-a',
      [SBX_B]: 'node-b',
    });
    const teams = (await (await call('GET', '/teams')).json()) as unknown[];
    expect(teams).toHaveLength(1);
  });

  it('deletes a name from every holder, relays a refusal, and answers 502 while a node does not answer', async () => {
    a.records.push({ templateID: uuid('a'), aliases: ['twice'], createdAt: at(6), updatedAt: at(6) });
    b.records.push({ templateID: uuid('b'), aliases: ['twice'], createdAt: at(6), updatedAt: at(6) });
    b.refuseDelete = true;
    const refused = await call('DELETE', '/templates/twice');
    expect(refused.status).toBe(409);
    b.refuseDelete = false;
    expect((await call('DELETE', '/templates/twice')).status).toBe(204);
    expect([...a.records, ...b.records].some((r) => r.aliases.includes('twice'))).toBe(false);

    b.failing = 503;
    try {
      const list = await call('GET', '/templates');
      expect(list.status).toBe(502);
      expect(((await list.json()) as { message: string }).message).toContain('node node-b');
      expect((await call('GET', '/snapshots')).status).toBe(502);
      expect((await call('GET', `/sandboxes/metrics?sandbox_ids=${SBX_A}`)).status).toBe(502);
      // Not on the node that answers, and the other did not answer: 502, not a wrong 404 (cached holders aside).
      const lookup = await call('GET', `/templates/${uuid('c')}`);
      expect(lookup.status).toBe(502);
      expect(await lookup.json()).toEqual({
        code: 502,
        message: `template lookup unavailable: node node-b did not answer, template "${uuid('c')}" may be there`,
      });
      expect((await call('POST', '/v2/sandboxes', { templateID: 'nowhere' })).status).toBe(502);
      expect((await call('DELETE', `/templates/${T_A}`)).status).toBe(502);
      expect(a.records.some((r) => r.templateID === T_A)).toBe(true);
    } finally {
      b.failing = undefined;
    }
  });
});
