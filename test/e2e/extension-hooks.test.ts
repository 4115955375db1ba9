// Custom extension hooks (docs/hooks.md) on a real node driven by the real e2b SDK, with the
// extension a real HTTP server on loopback: what each lifecycle operation tells it, what a failing hook does to the
// operation (and that it leaves nothing on the host), and the custom-extension-params routes under attack.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { Sandbox } from 'e2b';
import { eventually, strayHostObjects } from './harness.js';
import { describeNode } from './fixture.js';
import { TestHookServer } from '../../packages/node/src/extension/testing/hook-server.js';

const TIMEOUT_MS = 1500;

describe('custom extension hooks through the e2b SDK', () => {
  const hooks = new TestHookServer();
  beforeAll(async () => {
    await hooks.start();
  });
  // After the node's teardown (vitest runs afterAll hooks last-registered first).
  afterAll(async () => {
    await hooks.close();
  });
  const { server } = describeNode(() => ({
    name: 'hooks',
    toml: `[custom_extension]\nurl = "${hooks.url}"\ntimeout_ms = ${TIMEOUT_MS}\n`,
  }));

  /** Creates through the raw API (the SDK has no customExtensionParams), then connects with the SDK. */
  const create = async (params?: Record<string, unknown>, templateID = 'base') => {
    const raw = await server.api('POST', '/sandboxes', {
      templateID,
      timeout: 300,
      ...(params ? { customExtensionParams: params } : {}),
    });
    expect(raw.status, JSON.stringify(raw.body)).toBe(201);
    return Sandbox.connect(raw.body.sandboxID as string);
  };

  afterAll(() => {
    hooks.behaviour.clear();
  });
  beforeEach(() => {
    hooks.behaviour.clear();
    hooks.calls.length = 0;
  });

  it('create → start-fresh with the slot; extraBootArgs are the env; pause → stop; resume → start-resume; kill → stop', async () => {
    hooks.behaviour.set('start-fresh', { kind: 'json', body: { extraBootArgs: 'quiet gpu.model=a100' } });
    const sbx = await create({ gpu: 'a100', n: 1 });
    const [fresh] = hooks.of('start-fresh', sbx.sandboxId);
    expect(fresh!.body).toEqual({
      sandboxId: sbx.sandboxId,
      sandboxInstanceId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      networkNamespacePath: expect.stringContaining(`/run/aenv-e2e-hooks/`),
      hostInteractionIp: expect.stringMatching(/^10\.\d+\.\d+\.\d+$/),
      customExtensionParams: { gpu: 'a100', n: 1 },
    });
    // The namespace the extension was told of is the sandbox's, and exists while it runs.
    expect(existsSync(fresh!.body.networkNamespacePath as string)).toBe(true);
    const env = await sbx.commands.run('echo "$AENV_EXTRA_BOOT_ARGS"');
    expect(env.stdout.trim()).toBe('quiet gpu.model=a100');

    await sbx.pause();
    await hooks.waitFor(() => hooks.of('stop', sbx.sandboxId).length === 1);
    expect(hooks.of('stop', sbx.sandboxId)[0]!.body).toEqual({
      sandboxId: sbx.sandboxId,
      sandboxInstanceId: fresh!.body.sandboxInstanceId,
    });
    const resumed = await Sandbox.connect(sbx.sandboxId);
    const [resume] = hooks.of('start-resume', sbx.sandboxId);
    expect(resume!.body).toMatchObject({
      sandboxId: sbx.sandboxId,
      customExtensionParams: { gpu: 'a100', n: 1 },
    });
    expect(resume!.body.sandboxInstanceId).not.toBe(fresh!.body.sandboxInstanceId);
    // The params survived the pause; the memory resume kept the env too.
    expect((await server.api('GET', `/sandboxes/${sbx.sandboxId}/custom-extension-params`)).body).toEqual({
      gpu: 'a100',
      n: 1,
    });
    expect((await resumed.commands.run('echo "$AENV_EXTRA_BOOT_ARGS"')).stdout.trim()).toBe(
      'quiet gpu.model=a100',
    );

    await resumed.kill();
    await hooks.waitFor(() => hooks.of('stop', sbx.sandboxId).length === 2);
    expect(hooks.of('stop', sbx.sandboxId)[1]!.body.sandboxInstanceId).toBe(resume!.body.sandboxInstanceId);

    // The same life as lifecycle events (docs/events.md), oldest first, each with the instance it happened to.
    const events = await server.api('GET', `/events/sandboxes/${sbx.sandboxId}?orderAsc=true`);
    expect(events.status).toBe(200);
    expect(events.body.map((e: { type: string }) => e.type)).toEqual([
      'sandbox.lifecycle.created',
      'sandbox.lifecycle.paused',
      'sandbox.lifecycle.resumed',
      'sandbox.lifecycle.killed',
    ]);
    expect(events.body[0]).toMatchObject({
      version: 'v1',
      sandboxId: sbx.sandboxId,
      sandboxTemplateId: expect.any(String),
      sandboxExecutionId: fresh!.body.sandboxInstanceId,
      timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
    expect(events.body[3].sandboxExecutionId).toBe(resume!.body.sandboxInstanceId);
    const newest = await server.api(
      'GET',
      `/events/sandboxes/${sbx.sandboxId}?limit=1&types=sandbox.lifecycle.paused`,
    );
    expect(newest.body.map((e: { type: string }) => e.type)).toEqual(['sandbox.lifecycle.paused']);
  });

  it('a timeout pauses or kills and the event says so; events routes refuse bad queries', async () => {
    const paused = await server.api('POST', '/sandboxes', {
      templateID: 'base',
      timeout: 1,
      autoPause: true,
    });
    const killed = await server.api('POST', '/sandboxes', {
      templateID: 'base',
      timeout: 1,
      autoPause: false,
    });
    const last = async (id: string) =>
      (await server.api('GET', `/events/sandboxes/${id}?limit=1`)).body[0] as {
        type: string;
        eventData: unknown;
      };
    await eventually(
      async () => (await last(paused.body.sandboxID)).type === 'sandbox.lifecycle.paused',
      'the timeout pause event',
      300,
      100,
    );
    await eventually(
      async () => (await last(killed.body.sandboxID)).type === 'sandbox.lifecycle.killed',
      'the timeout kill event',
      300,
      100,
    );
    expect((await last(paused.body.sandboxID)).eventData).toEqual({ kind: 'memory', cause: 'timeout' });
    expect((await last(killed.body.sandboxID)).eventData).toEqual({ cause: 'timeout' });
    for (const q of [
      'limit=0',
      'limit=101',
      'offset=-1',
      'orderAsc=maybe',
      'types=sandbox.lifecycle.nope',
      'limit=1&limit=2',
    ]) {
      const res = await server.api('GET', `/events/sandboxes/${paused.body.sandboxID}?${q}`);
      expect(res, q).toMatchObject({ status: 400, body: { code: 400, message: expect.any(String) } });
    }
    expect((await server.api('GET', '/events/sandboxes/not-an-id')).status).toBe(404);
    expect((await server.api('GET', `/events/sandboxes/${randomUUID()}`)).body).toEqual([]);
    const team = await server.api('GET', '/events/sandboxes?limit=100');
    expect(team.body.some((e: { sandboxId: string }) => e.sandboxId === killed.body.sandboxID)).toBe(true);
    await server.api('DELETE', `/sandboxes/${paused.body.sandboxID}`);
  });

  it('fork children get start-resume with the source params; a snapshot keeps them; launch params override', async () => {
    const src = await create({ role: 'src' });
    hooks.calls.length = 0;
    const [forked] = await src.fork({ count: 1, timeoutMs: 120_000 });
    expect(forked).toBeInstanceOf(Sandbox);
    const child = forked as Sandbox;
    expect(hooks.calls.map((c) => [c.hook, c.body.sandboxId])).toEqual([['start-resume', child.sandboxId]]);
    const childEvents = (await server.api('GET', `/events/sandboxes/${child.sandboxId}`)).body;
    expect(childEvents.map((e: { type: string; eventData: unknown }) => [e.type, e.eventData])).toEqual([
      ['sandbox.lifecycle.created', { forkedFrom: src.sandboxId }],
    ]);
    expect(hooks.calls[0]!.body.customExtensionParams).toEqual({ role: 'src' });

    const snap = await src.createSnapshot();
    // The in-place capture of the snapshot fires no hook.
    expect(hooks.calls.map((c) => c.hook)).toEqual(['start-resume']);
    hooks.calls.length = 0;
    const fromSnap = await create(undefined, snap.snapshotId);
    const overridden = await create({ role: 'launch' }, snap.snapshotId);
    expect(hooks.calls.map((c) => [c.hook, c.body.sandboxId, c.body.customExtensionParams])).toEqual([
      ['start-resume', fromSnap.sandboxId, { role: 'src' }],
      ['start-resume', overridden.sandboxId, { role: 'launch' }],
    ]);
    for (const s of [src, child, fromSnap, overridden]) await s.kill();
    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
  });

  it('PATCH custom-extension-params stores what patch-params answers', async () => {
    const sbx = await create({ a: 1 });
    hooks.behaviour.set('patch-params', { kind: 'json', body: { customExtensionParams: { a: 1, b: [2] } } });
    const patched = await server.api('PATCH', `/sandboxes/${sbx.sandboxId}/custom-extension-params`, {
      b: [2],
    });
    expect(patched).toMatchObject({ status: 200, body: { a: 1, b: [2] } });
    expect(hooks.of('patch-params')[0]!.body).toEqual({ sandboxId: sbx.sandboxId, patch: { b: [2] } });
    expect((await server.api('GET', `/sandboxes/${sbx.sandboxId}/custom-extension-params`)).body).toEqual({
      a: 1,
      b: [2],
    });
    hooks.behaviour.set('patch-params', { kind: 'status', status: 500 });
    const failed = await server.api('PATCH', `/sandboxes/${sbx.sandboxId}/custom-extension-params`, { c: 1 });
    expect(failed).toMatchObject({
      status: 400,
      body: {
        code: 400,
        message: 'custom extension hook patch-params failed: the extension answered HTTP 500',
      },
    });
    await sbx.pause();
    const paused = await server.api('PATCH', `/sandboxes/${sbx.sandboxId}/custom-extension-params`, { c: 1 });
    expect(paused).toMatchObject({ status: 409, body: { code: 409 } });
    await sbx.kill();
  });

  it('a failing start-fresh or start-resume fails the operation with a clear error and leaves nothing behind', async () => {
    const failures = [
      [{ kind: 'status', status: 500 }, 'the extension answered HTTP 500'],
      [
        { kind: 'slow', ms: TIMEOUT_MS * 3, then: { kind: 'json', body: {} } },
        `no answer within ${TIMEOUT_MS} ms`,
      ],
      [{ kind: 'raw', text: '{"extraBootArgs":' }, 'the answer is not valid JSON'],
      [{ kind: 'drop' }, 'could not reach the extension'],
    ] as const;
    for (const [behaviour, reason] of failures) {
      hooks.behaviour.set('start-fresh', behaviour);
      const err = await Sandbox.create({ timeoutMs: 60_000 }).catch((e: unknown) => e as Error);
      expect(err, behaviour.kind).toBeInstanceOf(Error);
      expect((err as Error).message).toContain(`custom extension hook start-fresh failed: ${reason}`);
      const told = hooks.of('start-fresh').at(-1)!.body;
      await hooks.waitFor(() => hooks.of('stop', told.sandboxId as string).length === 1);
    }
    expect((await server.api('GET', '/v2/sandboxes')).body).toEqual([]);
    expect(await strayHostObjects(server)).toEqual([]);

    hooks.behaviour.clear();
    const sbx = await create();
    await sbx.pause();
    hooks.behaviour.set('start-resume', { kind: 'status', status: 503 });
    await expect(Sandbox.connect(sbx.sandboxId)).rejects.toThrow(/custom extension hook start-resume failed/);
    expect((await server.api('GET', `/sandboxes/${sbx.sandboxId}`)).body.state).toBe('paused');
    expect(await strayHostObjects(server)).toEqual([]);
    hooks.behaviour.clear();
    const back = await Sandbox.connect(sbx.sandboxId);
    expect((await back.commands.run('echo ok')).stdout.trim()).toBe('ok');
    await back.kill();
  });

  it('custom-extension-params routes and create refuse bad input with a JSON 4xx', async () => {
    const sbx = await create({ keep: true });
    const path = `/sandboxes/${sbx.sandboxId}/custom-extension-params`;
    const big = { blob: 'x'.repeat(70 * 1024) };
    const cases: [string, string, unknown, number][] = [
      ['GET', '/sandboxes/not-a-uuid/custom-extension-params', undefined, 404],
      ['GET', `/sandboxes/${randomUUID()}/custom-extension-params`, undefined, 404],
      ['PATCH', `/sandboxes/${randomUUID()}/custom-extension-params`, { a: 1 }, 404],
      ['PATCH', '/sandboxes/..%2f..%2fetc/custom-extension-params', { a: 1 }, 404],
      ['PATCH', path, [1, 2], 400],
      ['PATCH', path, 'text', 400],
      ['PATCH', path, 42, 400],
      ['PATCH', path, null, 400],
      ['PATCH', path, undefined, 400],
      ['PATCH', path, big, 400],
      ['POST', '/sandboxes', { templateID: 'base', customExtensionParams: [1] }, 400],
      ['POST', '/sandboxes', { templateID: 'base', customExtensionParams: 'x' }, 400],
      ['POST', '/sandboxes', { templateID: 'base', customExtensionParams: big }, 400],
    ];
    for (const [method, p, body, status] of cases) {
      const res = await server.api(method, p, body);
      expect(res.status, `${method} ${p} ${JSON.stringify(body)?.slice(0, 40)}`).toBe(status);
      expect(res.body).toEqual({ code: status, message: expect.any(String) });
    }
    expect(hooks.of('patch-params')).toEqual([]);
    expect((await server.api('GET', path)).body).toEqual({ keep: true });
    expect((await server.api('GET', '/v2/sandboxes')).body).toHaveLength(1);
    await sbx.kill();
  });
});
