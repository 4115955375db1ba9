// The control plane's wire shapes (headers, pagination, error bodies) and the typed AenvApiClient against it:
// what a gateway must relay unchanged and what the CLI will call.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AenvApiClient } from '../../clients/api/client.js';
import { AenvApiError, AenvApiUnreachableError } from '../../clients/api/errors.js';
import { API_KEY_HEADER, SANDBOX_ID_RESPONSE_HEADER } from '../../api/headers.js';
import { NEXT_TOKEN_HEADER } from '../../api/pagination.js';
import type { SandboxResponse } from '../../api/responses.js';
import { lacks } from '../helpers.js';
import type { ConformanceTarget, ControlPlane } from '../target.js';

interface Answer {
  status: number;
  // Parsed JSON (or the text): cases assert on its shape.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  headers: Headers;
}

export function apiCases(target: ConformanceTarget): void {
  describe.skipIf(lacks(target.features, 'control-plane'))('control plane', () => {
    let cp: ControlPlane;
    let client: AenvApiClient;
    const run = `c${Date.now()}`;
    const made: SandboxResponse[] = [];

    const api = async (method: string, path: string, body?: unknown): Promise<Answer> => {
      const r = await fetch(`${cp.url}${path}`, {
        method,
        headers: {
          [API_KEY_HEADER]: cp.apiKey,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        // plain text body
      }
      return { status: r.status, body: parsed, headers: r.headers };
    };
    const apiError = (p: Promise<unknown>) =>
      p.then(
        () => {
          throw new Error('the call succeeded');
        },
        (e: unknown) => {
          expect(e).toBeInstanceOf(AenvApiError);
          const err = e as AenvApiError;
          return { status: err.status, code: err.code, message: err.message };
        },
      );

    beforeAll(async () => {
      cp = await target.controlPlane();
      client = new AenvApiClient({ baseUrl: cp.url, apiKey: cp.apiKey });
      // Created one after another so their start times order them.
      for (let i = 0; i < 3; i++) {
        made.push(
          await client.sandboxes.create({
            templateID: cp.template,
            timeout: 300,
            metadata: { run, idx: String(i), odd: String(i % 2) },
          }),
        );
      }
    });
    afterAll(async () => {
      for (const s of made) await client?.sandboxes.kill(s.sandboxID).catch(() => undefined);
    });

    it('pages /v2/sandboxes with x-next-token and filters by state', async () => {
      const q = `metadata=${encodeURIComponent(`run=${run}`)}`;
      const first = await api('GET', `/v2/sandboxes?${q}&limit=1&state=running`);
      expect(first.status).toBe(200);
      expect(first.body).toHaveLength(1);
      const token = first.headers.get('x-next-token');
      expect(token).toBeTruthy();
      const second = await api('GET', `/v2/sandboxes?${q}&limit=5&nextToken=${encodeURIComponent(token!)}`);
      expect(second.body.map((s: { sandboxID: string }) => s.sandboxID)).toEqual([
        made[1]!.sandboxID,
        made[0]!.sandboxID,
      ]);
      expect(second.headers.get('x-next-token')).toBeNull();
      expect((await api('GET', `/v2/sandboxes?${q}&state=paused`)).body).toEqual([]);
      expect((await api('GET', `/v2/sandboxes?${q}&state=running,paused`)).body).toHaveLength(3);

      const badState = await api('GET', `/v2/sandboxes?state=sleeping`);
      expect(badState.status).toBe(400);
      const badToken = await api('GET', `/v2/sandboxes?nextToken=%%%garbage`);
      expect(badToken.status).toBe(400);
      expect(badToken.body.message).toMatch(/invalid next token/);
      expect((await api('GET', `/v2/sandboxes?limit=0`)).status).toBe(400);
      expect((await api('GET', `/v2/sandboxes?limit=101`)).status).toBe(400);
    });

    it('answers bad requests with the documented statuses and shapes', async () => {
      const noKey = await fetch(`${cp.url}/v2/sandboxes`);
      expect(noKey.status).toBe(401);
      expect(await noKey.text()).toBe('');
      const wrongKey = await fetch(`${cp.url}/v2/sandboxes`, {
        headers: { 'x-api-key': `${cp.apiKey}x` },
      });
      expect(wrongKey.status).toBe(401);

      const post = (body: string, type = 'application/json') =>
        fetch(`${cp.url}/v2/sandboxes`, {
          method: 'POST',
          headers: { 'x-api-key': cp.apiKey, 'content-type': type },
          body,
        });
      const malformed = await post('{"templateID": ');
      expect(malformed.status).toBe(400);
      const noTemplate = await post('{}');
      expect(noTemplate.status).toBeGreaterThanOrEqual(400);
      expect(noTemplate.status).toBeLessThan(500);
      expect(await noTemplate.json()).toMatchObject({
        code: noTemplate.status,
        message: expect.stringMatching(/templateID/),
      });
      const badMeta = await post('{"templateID":"base","metadata":{"a":1}}');
      expect(badMeta.status).toBe(400);
      expect(((await badMeta.json()) as { message: string }).message).toMatch(/metadata/);
      const badDeny = await post('{"templateID":"base","network":{"denyOut":["example.com"]}}');
      expect(badDeny.status).toBe(400);
      expect(((await badDeny.json()) as { message: string }).message).toMatch(/denyOut/);

      const unknown = await api('GET', '/no/such/route');
      expect(unknown.body).toEqual({ code: 404, message: 'route not found: GET /no/such/route' });
      const badTimeout = await api('POST', `/sandboxes/${made[2]!.sandboxID}/timeout`, {
        timeout: 'soon',
      });
      expect(badTimeout.status).toBe(400);
      expect(badTimeout.body.code).toBe(400);
    });

    it('maps every failure to AenvApiError with the status, code and message of the answer', async () => {
      const ghost = '01990000-0000-7000-8000-000000000000';
      expect(await apiError(client.sandboxes.get(ghost))).toEqual({
        status: 404,
        code: 404,
        message: `sandbox ${ghost} not found`,
      });
      expect(await apiError(client.sandboxes.setTimeout(made[2]!.sandboxID, -1))).toMatchObject({
        status: 400,
        code: 400,
        message: expect.stringMatching(/^invalid timeout request: timeout:/),
      });
      const stranger = new AenvApiClient({ baseUrl: cp.url, apiKey: `${cp.apiKey}x` });
      expect(await apiError(stranger.sandboxes.list())).toEqual({
        status: 401,
        code: 401,
        message: 'HTTP 401',
      });
      const nowhere = new AenvApiClient({ baseUrl: 'http://127.0.0.1:1', apiKey: cp.apiKey });
      await expect(nowhere.teams.list()).rejects.toBeInstanceOf(AenvApiUnreachableError);
    });

    it('lists, pages, reads and changes sandboxes', async () => {
      const ids = made.map((s) => s.sandboxID);
      expect(made[0]).toMatchObject({
        templateID: expect.any(String),
        clientID: '',
        trafficAccessToken: null,
      });
      expect(made[0]!.envdAccessToken).toMatch(/.+/);

      const p1 = await client.sandboxes.list({ metadata: { run }, limit: 2 });
      expect(p1.items.map((s) => s.sandboxID)).toEqual([ids[2], ids[1]]);
      expect(p1.nextToken).toBeTruthy();
      const p2 = await client.sandboxes.list({ metadata: { run }, limit: 2, nextToken: p1.nextToken! });
      expect(p2).toEqual({ items: [expect.objectContaining({ sandboxID: ids[0] })] });
      const asc = await client.sandboxes.list({
        metadata: { run, odd: '0' },
        order: 'asc',
        state: ['running'],
      });
      expect(asc.items.map((s) => s.sandboxID)).toEqual([ids[0], ids[2]]);
      expect(asc.items[0]).toMatchObject({ state: 'running', metadata: { run, idx: '0', odd: '0' } });

      const id = ids[1]!;
      const before = await client.sandboxes.get(id);
      expect(before).toMatchObject({ sandboxID: id, state: 'running', lifecycle: { onTimeout: 'kill' } });
      await client.sandboxes.setTimeout(id, 600);
      const later = await client.sandboxes.get(id);
      expect(Date.parse(later.endAt)).toBeGreaterThan(Date.parse(before.endAt) + 250_000);
      await client.sandboxes.refresh(id, 60);
      expect(Date.parse((await client.sandboxes.get(id)).endAt)).toBeGreaterThanOrEqual(
        Date.parse(later.endAt),
      );

      await client.sandboxes.updateNetwork(id, { denyOut: ['192.0.2.0/24'] });
      expect((await client.sandboxes.get(id)).network).toMatchObject({ denyOut: ['192.0.2.0/24'] });
      expect(Array.isArray(await client.sandboxes.metrics(id))).toBe(true);
      expect(await client.sandboxes.latestMetrics([id])).toMatchObject({ sandboxes: expect.any(Object) });
      const logs = await client.sandboxes.logs(id, { direction: 'forward' });
      expect(logs.logs.length).toBeGreaterThan(0);
      expect(logs.logs[0]).toMatchObject({ timestamp: expect.any(String), level: expect.any(String) });
      const v1 = await client.sandboxes.logsV1(id);
      expect(v1.logEntries.length).toBeGreaterThan(0);
      expect(v1.logs[0]).toMatchObject({ timestamp: v1.logEntries[0]!.timestamp, line: expect.any(String) });

      const created = await client.call('POST', '/v2/sandboxes', {
        body: { templateID: cp.template, timeout: 60, metadata: { run: `${run}-k` } },
      });
      const raw = JSON.parse(created.text) as SandboxResponse;
      expect(created.status).toBe(201);
      expect(created.headers.get(SANDBOX_ID_RESPONSE_HEADER)).toBe(raw.sandboxID);
      await client.sandboxes.kill(raw.sandboxID);
      expect(await apiError(client.sandboxes.kill(raw.sandboxID))).toMatchObject({ status: 404, code: 404 });
    });

    it('pauses, connects, resumes, forks and snapshots through the client', async () => {
      const id = made[0]!.sandboxID;
      const live = await client.sandboxes.connect(id, { timeout: 120 });
      expect(live).toMatchObject({ resumed: false, sandbox: { sandboxID: id } });
      await client.sandboxes.pause(id);
      expect((await client.sandboxes.get(id)).state).toBe('paused');
      const back = await client.sandboxes.connect(id, { timeout: 120 });
      expect(back).toMatchObject({ resumed: true, sandbox: { sandboxID: id } });
      await client.sandboxes.pause(id, { memory: true });
      expect(await client.sandboxes.resume(id, { timeout: 120 })).toMatchObject({ sandboxID: id });
      expect((await client.sandboxes.get(id)).state).toBe('running');

      const forks = await client.sandboxes.fork(id, { count: 1, timeout: 60 });
      expect(forks).toHaveLength(1);
      const child = 'sandbox' in forks[0]! ? forks[0].sandbox.sandboxID : undefined;
      expect(child).toMatch(/^[0-9a-f-]{36}$/);
      await client.sandboxes.kill(child!);

      const name = `${run}-snap`;
      const snap = await client.sandboxes.snapshot(id, { name });
      expect(snap).toMatchObject({ names: [name], cpuCount: expect.any(Number) });
      const listed = await client.snapshots.list({ sandboxID: id });
      expect(listed.items.map((s) => s.snapshotID)).toContain(snap.snapshotID);
      expect(await client.snapshots.get(name)).toEqual(snap);
      await client.snapshots.delete(snap.snapshotID);
      expect(await apiError(client.snapshots.get(snap.snapshotID))).toMatchObject({ status: 404 });
    });

    it('reads templates, tags, nodes and teams', async () => {
      const page = await client.templates.list({ limit: 100 });
      const base = page.items.find((t) => t.names.includes(cp.template) || t.aliases.includes(cp.template));
      expect(base).toMatchObject({ buildStatus: 'ready', public: expect.any(Boolean) });
      const detail = await client.templates.get(cp.template);
      expect(detail).toMatchObject({ templateID: base!.templateID, builds: [{ status: 'ready' }] });
      expect(await client.templates.byAlias(cp.template)).toEqual({
        templateID: base!.templateID,
        public: false,
      });
      expect((await client.templates.tags(cp.template)).map((t) => t.tag)).toContain('default');
      const status = await client.templates.buildStatus(base!.templateID, base!.templateID, { limit: 1 });
      expect(status).toMatchObject({ templateID: base!.templateID, status: 'ready' });

      expect(await apiError(client.templates.requestBuild({ name: 'no spaces allowed' }))).toMatchObject({
        status: 400,
        message: expect.stringMatching(/invalid template name/),
      });
      expect(
        await apiError(client.templates.startBuild(base!.templateID, made[0]!.sandboxID, {})),
      ).toMatchObject({ status: 400, message: expect.stringMatching(/must match/) });
      expect(await apiError(client.templates.delete(`${run}-none`))).toMatchObject({ status: 404 });

      const nodes = await client.nodes.list();
      expect(nodes).toHaveLength(1);
      expect(nodes[0]).toMatchObject({ status: 'ready', sandboxCount: expect.any(Number) });
      const node = await client.nodes.get(nodes[0]!.id);
      expect(node).toMatchObject({ id: nodes[0]!.id, cachedBuilds: [] });
      expect(node).not.toHaveProperty('sandboxStartingCount');
      const teams = await client.teams.list();
      expect(teams).toEqual([
        { teamID: expect.any(String), name: 'local', apiKey: cp.apiKey, isDefault: true },
      ]);
    });

    it('names the next page in x-next-token on every paged list', async () => {
      const r = await client.call('GET', '/v2/sandboxes', { query: { limit: 1 } });
      expect(r.headers.get(NEXT_TOKEN_HEADER)).toBeTruthy();
    });
  });
}
