import { ErrorKind } from '@aenv/protocol';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import { createLogger } from '../util/log.js';
import { HookClient, HookError, MAX_EXTRA_BOOT_ARGS, MAX_HOOK_RESPONSE_BYTES } from './hook-client.js';
import { TestHookServer } from './testing/hook-server.js';

const logger = createLogger('json', 'silent', new Writable({ write: (_c, _e, cb) => cb() }));
const body = {
  sandboxId: 's1',
  sandboxInstanceId: 'i1',
  networkNamespacePath: '/run/netns/x',
  hostInteractionIp: '10.11.0.2',
  customExtensionParams: { a: 1 },
};

describe('HookClient against a real hook server', () => {
  const hooks = new TestHookServer();
  let client: HookClient;
  beforeAll(async () => {
    await hooks.start();
    client = new HookClient({ url: `${hooks.url}/`, timeoutMs: 500, logger });
  });
  afterAll(() => hooks.close());
  beforeEach(() => {
    hooks.behaviour.clear();
    hooks.calls.length = 0;
  });

  it('posts start-fresh with the documented body and returns extraBootArgs', async () => {
    hooks.behaviour.set('start-fresh', { kind: 'json', body: { extraBootArgs: 'quiet gpu=1' } });
    expect(await client.startFresh(body)).toBe('quiet gpu=1');
    expect(hooks.calls).toEqual([{ hook: 'start-fresh', body, at: expect.any(Number) }]);
    hooks.behaviour.set('start-fresh', { kind: 'json', body: { extraBootArgs: null } });
    expect(await client.startFresh(body)).toBeUndefined();
    hooks.behaviour.set('start-fresh', { kind: 'raw', text: '' });
    expect(await client.startFresh(body)).toBeUndefined();
  });

  it('fails a start hook that answers 5xx, too slowly, malformed, oversized, or not at all', async () => {
    const cases: [Parameters<TestHookServer['behaviour']['set']>[1], RegExp][] = [
      [{ kind: 'status', status: 500 }, /start-fresh failed: the extension answered HTTP 500/],
      [{ kind: 'status', status: 404 }, /HTTP 404/],
      [
        { kind: 'slow', ms: 2000, then: { kind: 'json', body: {} } },
        /no answer within 500 ms \(timeout_ms\)/,
      ],
      [{ kind: 'raw', text: '{"extraBootArgs": ' }, /not valid JSON/],
      [{ kind: 'json', body: [1, 2] }, /not a JSON object/],
      [{ kind: 'json', body: { extraBootArgs: 7 } }, /extraBootArgs is not a string/],
      [{ kind: 'json', body: { extraBootArgs: 'a\nb' } }, /one line/],
      [{ kind: 'json', body: { extraBootArgs: 'x'.repeat(MAX_EXTRA_BOOT_ARGS + 1) } }, /one line/],
      [{ kind: 'huge', bytes: 4 * MAX_HOOK_RESPONSE_BYTES }, /larger than 262144 bytes/],
      [{ kind: 'drop' }, /could not reach the extension/],
    ];
    for (const [behaviour, message] of cases) {
      hooks.behaviour.set('start-fresh', behaviour);
      const err = await client.startFresh(body).catch((e: unknown) => e);
      expect(err, JSON.stringify(behaviour)).toBeInstanceOf(HookError);
      expect((err as HookError).kind).toBe(ErrorKind.BadUpstream);
      expect((err as HookError).message).toMatch(message);
    }
  });

  it('answers within the timeout when the hook is slow but in time', async () => {
    hooks.behaviour.set('start-resume', { kind: 'slow', ms: 100, then: { kind: 'raw', text: 'not json' } });
    // start-resume only needs a 2xx: its body is not read.
    await expect(client.startResume(body)).resolves.toBeUndefined();
    hooks.behaviour.set('start-resume', { kind: 'status', status: 503 });
    await expect(client.startResume(body)).rejects.toThrow(
      /start-resume failed: the extension answered HTTP 503/,
    );
  });

  it('patch-params returns the full new params; a bad answer is a 400', async () => {
    hooks.behaviour.set('patch-params', { kind: 'json', body: { customExtensionParams: { a: 1, b: 2 } } });
    expect(await client.patchParams('s1', { b: 2 })).toEqual({ a: 1, b: 2 });
    expect(hooks.of('patch-params')[0]!.body).toEqual({ sandboxId: 's1', patch: { b: 2 } });
    for (const b of [{}, { customExtensionParams: 'x' }, { customExtensionParams: [1] }]) {
      hooks.behaviour.set('patch-params', { kind: 'json', body: b });
      await expect(client.patchParams('s1', {})).rejects.toMatchObject({ kind: ErrorKind.InvalidArgument });
    }
    hooks.behaviour.set('patch-params', { kind: 'status', status: 500 });
    await expect(client.patchParams('s1', {})).rejects.toMatchObject({
      kind: ErrorKind.InvalidArgument,
      message: 'custom extension hook patch-params failed: the extension answered HTTP 500',
    });
  });

  it('stop is best effort: failures never throw, and drain waits for calls in flight', async () => {
    hooks.behaviour.set('stop', { kind: 'slow', ms: 100, then: { kind: 'status', status: 500 } });
    client.stop('s1', 'i1');
    await client.drain();
    expect(hooks.of('stop').map((c) => c.body)).toEqual([{ sandboxId: 's1', sandboxInstanceId: 'i1' }]);
  });

  it('names a refused connection', async () => {
    const gone = await new TestHookServer().start();
    const url = gone.url;
    await gone.close();
    const c = new HookClient({ url, timeoutMs: 500, logger });
    await expect(c.startFresh(body)).rejects.toThrow(/could not reach the extension \(ECONNREFUSED\)/);
    c.stop('s1', 'i1');
    await c.drain();
  });
});
