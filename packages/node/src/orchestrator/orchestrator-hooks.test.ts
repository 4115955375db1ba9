import { ErrorKind } from '@aenv/protocol';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { openStateDb } from '../state/db.js';
import { createLogger } from '../util/log.js';
import { SandboxStore, orchestratorMigrations } from './store.js';
import { Orchestrator, type CreateSandboxInput, type LaunchableTemplate } from './orchestrator.js';
import type { BeforeInstanceStart, SandboxBackend, StartResult } from './backend.js';
import type { SandboxRecord } from './types.js';
import { HookClient } from '../extension/hook-client.js';
import { TestHookServer } from '../extension/testing/hook-server.js';

const logger = createLogger('json', 'silent', new Writable({ write: (_c, _e, cb) => cb() }));

/**
 * A backend whose "sandboxes" are map entries; it tells the start hook before "starting", as the container backend
 * does after the slot is acquired. What these tests exercise is the orchestrator with a real extension over HTTP.
 */
class HookedBackend implements SandboxBackend {
  live = new Map<string, string>();
  /** The extra env each start got from its start hook. */
  extraEnv = new Map<string, Record<string, string> | undefined>();
  private n = 0;
  private async started(
    r: SandboxRecord,
    kind: 'fresh' | 'resume',
    beforeStart?: BeforeInstanceStart,
  ): Promise<StartResult> {
    const instanceId = `inst-${++this.n}`;
    const slot = { netnsPath: `/run/aenv/netns/slot-${this.n}`, hostInteractionIp: `10.11.0.${this.n}` };
    const extra = await beforeStart?.({ kind, instanceId, ...slot });
    this.extraEnv.set(r.id, extra?.extraEnv);
    this.live.set(r.id, instanceId);
    return {
      binding: { slotIndex: this.n, hostInteractionIp: slot.hostInteractionIp, instanceId },
      backend: {},
    };
  }
  async start(r: SandboxRecord, source: { record: unknown }, _p: unknown, beforeStart?: BeforeInstanceStart) {
    return this.started(
      r,
      (source.record as { capture?: boolean }).capture ? 'resume' : 'fresh',
      beforeStart,
    );
  }
  async destroy(r: SandboxRecord) {
    this.live.delete(r.id);
  }
  async pause(r: SandboxRecord) {
    this.live.delete(r.id);
    return { kind: 'memory' as const, pausedAt: new Date().toISOString(), artifactDir: `/x/${r.id}` };
  }
  async resume(r: SandboxRecord, _p: unknown, opts: { beforeStart?: BeforeInstanceStart }) {
    return this.started(r, 'resume', opts.beforeStart);
  }
  async guestAnswers() {
    return true;
  }
  async applyPolicy() {}
  async capture() {
    return { publish: async () => {} };
  }
  async fork(
    _src: SandboxRecord,
    children: readonly SandboxRecord[],
    beforeStart?: (c: SandboxRecord) => BeforeInstanceStart | undefined,
  ) {
    return Promise.all(
      children.map(async (c) => {
        try {
          return { ok: true as const, start: await this.started(c, 'resume', beforeStart?.(c)) };
        } catch (err) {
          return { ok: false as const, error: err as Error };
        }
      }),
    );
  }
  async maintain() {}
  async recover(records: readonly SandboxRecord[]) {
    return new Map(records.map((r) => [r.id, { kind: 'paused' as const }]));
  }
}

const input = (over: Partial<CreateSandboxInput> = {}): CreateSandboxInput => ({
  templateId: 'base',
  onTimeout: 'pause',
  autoResume: false,
  secure: false,
  metadata: {},
  envVars: {},
  allowPublicTraffic: true,
  policy: { allowOut: [], denyOut: [], allowInternetAccess: null },
  ...over,
});

const template = (over: Partial<LaunchableTemplate> = {}): LaunchableTemplate => ({
  templateId: 'tpl-1',
  alias: 'base',
  record: {},
  resources: { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 },
  envdVersion: '0.5.15',
  defaultUser: 'user',
  ...over,
});

describe('Orchestrator with a custom extension (a real hook server on loopback)', () => {
  const hooks = new TestHookServer();
  let backend: HookedBackend;
  let store: SandboxStore;
  let orch: Orchestrator;
  let client: HookClient;

  const make = (withExtension = true) =>
    new Orchestrator({
      store,
      backend,
      templates: {
        resolveLaunchable: async (id) =>
          id === 'snap'
            ? template({
                templateId: 'snap-1',
                record: { capture: true },
                customExtensionParams: { from: 'snapshot' },
              })
            : template(),
      },
      newId: () => randomUUID(),
      defaultTimeoutSecs: 15,
      autoEvictIntervalMs: 10,
      autoResumeMinTimeoutSecs: 300,
      transitionWaitMs: 2000,
      logger,
      ...(withExtension ? { extension: client } : {}),
    });

  beforeAll(async () => {
    await hooks.start();
    client = new HookClient({ url: hooks.url, timeoutMs: 300, logger });
  });
  afterAll(() => hooks.close());
  beforeEach(() => {
    hooks.behaviour.clear();
    hooks.calls.length = 0;
    backend = new HookedBackend();
    store = new SandboxStore(openStateDb(':memory:', orchestratorMigrations));
    orch = make();
  });

  it('create tells start-fresh where the instance runs; its extraBootArgs reach the instance env', async () => {
    hooks.behaviour.set('start-fresh', { kind: 'json', body: { extraBootArgs: 'foo=1 bar' } });
    const r = await orch.create(input({ customExtensionParams: { gpu: 'a100' } }));
    expect(hooks.of('start-fresh')).toHaveLength(1);
    expect(hooks.of('start-fresh')[0]!.body).toEqual({
      sandboxId: r.id,
      sandboxInstanceId: r.runtime!.instanceId,
      networkNamespacePath: '/run/aenv/netns/slot-1',
      hostInteractionIp: '10.11.0.1',
      customExtensionParams: { gpu: 'a100' },
    });
    expect(backend.extraEnv.get(r.id)).toEqual({ AENV_EXTRA_BOOT_ARGS: 'foo=1 bar' });
    expect(store.loadAll().records[0]!.customExtensionParams).toEqual({ gpu: 'a100' });
  });

  it('a failing start-fresh fails the create, leaves no record, and the told instance gets stop', async () => {
    for (const b of [
      { kind: 'status', status: 500 },
      { kind: 'slow', ms: 2000, then: { kind: 'json', body: {} } },
      { kind: 'raw', text: '{oops' },
    ] as const) {
      hooks.calls.length = 0;
      hooks.behaviour.set('start-fresh', b);
      const err = await orch.create(input()).catch((e: unknown) => e);
      expect(err).toMatchObject({
        kind: ErrorKind.BadUpstream,
        message: expect.stringMatching(/^custom extension hook start-fresh failed: /),
      });
      expect(orch.all()).toEqual([]);
      expect(store.loadAll().records).toEqual([]);
      expect(backend.live.size).toBe(0);
      const told = hooks.of('start-fresh')[0]!.body;
      await hooks.waitFor(() => hooks.of('stop').length === 1);
      expect(hooks.of('stop')[0]!.body).toEqual({
        sandboxId: told.sandboxId,
        sandboxInstanceId: told.sandboxInstanceId,
      });
    }
    expect(orch.counters().createFails).toBe(3);
  });

  it('pause tells stop, resume tells start-resume with the same params; kill of a paused sandbox tells nothing more', async () => {
    const r = await orch.create(input({ customExtensionParams: { k: 'v' } }));
    const first = r.runtime!.instanceId;
    await orch.pause(r.id);
    await hooks.waitFor(() => hooks.of('stop').length === 1);
    expect(hooks.of('stop')[0]!.body).toEqual({ sandboxId: r.id, sandboxInstanceId: first });
    await orch.connect(r.id, 60);
    const resume = hooks.of('start-resume', r.id);
    expect(resume).toHaveLength(1);
    expect(resume[0]!.body).toMatchObject({
      sandboxInstanceId: r.runtime!.instanceId,
      customExtensionParams: { k: 'v' },
    });
    expect(r.runtime!.instanceId).not.toBe(first);
    await orch.pause(r.id);
    await orch.kill(r.id);
    await hooks.waitFor(() => hooks.of('stop').length === 2);
    await client.drain();
    expect(hooks.of('stop').map((c) => c.body.sandboxInstanceId)).toEqual([
      first,
      resume[0]!.body.sandboxInstanceId,
    ]);
  });

  it('a failing start-resume keeps the sandbox paused and tells stop for the instance it was told of', async () => {
    const r = await orch.create(input());
    await orch.pause(r.id);
    hooks.behaviour.set('start-resume', { kind: 'status', status: 503 });
    await expect(orch.connect(r.id, 60)).rejects.toMatchObject({ kind: ErrorKind.BadUpstream });
    expect(orch.get(r.id).state).toBe('paused');
    const told = hooks.of('start-resume', r.id)[0]!.body.sandboxInstanceId;
    await hooks.waitFor(() => hooks.of('stop').some((c) => c.body.sandboxInstanceId === told));
    hooks.behaviour.delete('start-resume');
    await orch.connect(r.id, 60);
    expect(orch.get(r.id).state).toBe('running');
  });

  it('kill of a running sandbox tells stop; fork children get start-resume, the source no hook', async () => {
    const src = await orch.create(input({ customExtensionParams: { p: 1 } }));
    hooks.calls.length = 0;
    const results = await orch.fork(src.id, { count: 2 });
    expect(results.every((x) => x.ok)).toBe(true);
    const children = results.map((x) => (x.ok ? x.record : undefined)!);
    expect(hooks.calls.map((c) => c.hook)).toEqual(['start-resume', 'start-resume']);
    expect(hooks.calls.map((c) => c.body.sandboxId).sort()).toEqual(children.map((c) => c.id).sort());
    expect(children.map((c) => c.customExtensionParams)).toEqual([{ p: 1 }, { p: 1 }]);
    const instance = children[0]!.runtime!.instanceId;
    await orch.kill(children[0]!.id);
    await hooks.waitFor(() => hooks.of('stop').length === 1);
    expect(hooks.of('stop')[0]!.body).toEqual({ sandboxId: children[0]!.id, sandboxInstanceId: instance });
  });

  it('a snapshot launch fires start-resume with the snapshot params; launch params override them', async () => {
    const a = await orch.create(input({ templateId: 'snap' }));
    expect(a.customExtensionParams).toEqual({ from: 'snapshot' });
    const b = await orch.create(input({ templateId: 'snap', customExtensionParams: { from: 'launch' } }));
    expect(b.customExtensionParams).toEqual({ from: 'launch' });
    expect(hooks.of('start-resume').map((c) => c.body.customExtensionParams)).toEqual([
      { from: 'snapshot' },
      { from: 'launch' },
    ]);
    expect(hooks.of('start-fresh')).toEqual([]);
  });

  it('patch-params replaces the params with what the extension answers; paused → 409; no extension → 400', async () => {
    const r = await orch.create(input({ customExtensionParams: { a: 1 } }));
    hooks.behaviour.set('patch-params', { kind: 'json', body: { customExtensionParams: { a: 1, b: 2 } } });
    expect(await orch.patchExtensionParams(r.id, { b: 2 })).toEqual({ a: 1, b: 2 });
    expect(orch.extensionParams(r.id)).toEqual({ a: 1, b: 2 });
    expect(store.loadAll().records[0]!.customExtensionParams).toEqual({ a: 1, b: 2 });
    hooks.behaviour.set('patch-params', { kind: 'status', status: 500 });
    await expect(orch.patchExtensionParams(r.id, { c: 3 })).rejects.toMatchObject({
      kind: ErrorKind.InvalidArgument,
    });
    expect(orch.extensionParams(r.id)).toEqual({ a: 1, b: 2 });
    await orch.pause(r.id);
    await expect(orch.patchExtensionParams(r.id, { c: 3 })).rejects.toMatchObject({
      kind: ErrorKind.Conflict,
    });
    await expect(make(false).patchExtensionParams(r.id, {})).rejects.toMatchObject({
      kind: ErrorKind.InvalidArgument,
    });
  });

  it('without an extension nothing is called and params are still kept', async () => {
    orch = make(false);
    const r = await orch.create(input({ templateId: 'snap' }));
    await orch.pause(r.id);
    await orch.connect(r.id, 60);
    await orch.kill(r.id);
    expect(hooks.calls).toEqual([]);
    expect(r.customExtensionParams).toEqual({ from: 'snapshot' });
  });
});
