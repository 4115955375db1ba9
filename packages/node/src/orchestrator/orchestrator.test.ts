import { describe, expect, it, beforeEach } from 'vitest';
import { Writable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { openStateDb } from '../state/db.js';
import { createLogger } from '../util/log.js';
import { SandboxStore, orchestratorMigrations } from './store.js';
import { Orchestrator, type CreateSandboxInput } from './orchestrator.js';
import type { AdoptionHooks, SandboxBackend, StartResult } from './backend.js';
import type { SandboxNetworkSettings, SandboxRecord } from './types.js';
import type { EgressPolicy } from '../network/types.js';
import { DomainError, ErrorKind } from '@aenv/protocol';

const silent = new Writable({ write: (_c, _e, cb) => cb() });

/**
 * A backend that keeps "sandboxes" as entries in a map. The orchestrator's state machine is what these tests
 * exercise; the real backend is covered by the integration and e2e suites.
 */
class MapBackend implements SandboxBackend {
  live = new Map<string, string>();
  gate: Promise<void> | undefined;
  failNext: string | undefined;
  private n = 0;
  private async step(op: string): Promise<void> {
    if (this.gate) await this.gate;
    if (this.failNext === op) {
      this.failNext = undefined;
      throw new Error(`${op} failed on purpose`);
    }
  }
  private started(r: SandboxRecord): StartResult {
    const instanceId = `i${++this.n}`;
    this.live.set(r.id, instanceId);
    return { binding: { slotIndex: this.n, hostInteractionIp: '10.11.0.1', instanceId }, backend: {} };
  }
  startedWith: EgressPolicy[] = [];
  async start(r: SandboxRecord, _source: unknown, policy: EgressPolicy) {
    await this.step('start');
    this.startedWith.push(policy);
    return this.started(r);
  }
  async destroy(r: SandboxRecord) {
    await this.step('destroy');
    this.live.delete(r.id);
  }
  async pause(r: SandboxRecord, opts: { memory: boolean }) {
    await this.step('pause');
    this.live.delete(r.id);
    const kind = opts.memory ? ('memory' as const) : ('filesystem' as const);
    return { kind, pausedAt: new Date().toISOString(), artifactDir: `/x/${r.id}` };
  }
  resumedWithMemory: boolean[] = [];
  async resume(r: SandboxRecord, _policy: unknown, opts: { memory: boolean }) {
    await this.step('resume');
    this.resumedWithMemory.push(opts.memory);
    return this.started(r);
  }
  guestHealthy = true;
  async guestAnswers() {
    return this.guestHealthy;
  }
  async applyPolicy() {}
  captured: string[] = [];
  published: string[] = [];
  publishGate: Promise<void> | undefined;
  async capture(r: SandboxRecord, target: { recordId: string }) {
    await this.step('capture');
    this.captured.push(`${r.id}->${target.recordId}`);
    return {
      publish: async () => {
        if (this.publishGate) await this.publishGate;
        await this.step('publish');
        this.published.push(target.recordId);
      },
    };
  }
  async fork(_src: SandboxRecord, children: readonly SandboxRecord[]) {
    await this.step('fork');
    return children.map((c, i) =>
      i === 1 && this.failSecondChild
        ? { ok: false as const, error: new Error('no slot left') }
        : { ok: true as const, start: this.started(c) },
    );
  }
  failSecondChild = false;
  adoptShared?: (sandboxId: string, hooks?: AdoptionHooks) => Promise<SandboxRecord | undefined>;
  handedOver: string[] = [];
  async handOver(r: SandboxRecord) {
    this.handedOver.push(r.id);
    return true;
  }
  /** As the container backend's with node-affine volumes (`[volume].storage = "node"`): mounters stay. */
  staysHere(r: SandboxRecord) {
    return r.volumeMounts?.length ? 'it mounts volumes only this node has' : undefined;
  }
  maintained: string[][] = [];
  async maintain(paused: readonly SandboxRecord[]) {
    this.maintained.push(paused.map((r) => r.id));
  }
  async recover(records: readonly SandboxRecord[]) {
    return new Map(
      records.map((r) => [
        r.id,
        r.state === 'paused'
          ? { kind: 'paused' as const }
          : this.live.has(r.id)
            ? {
                kind: 'running' as const,
                binding: { slotIndex: 1, hostInteractionIp: '10.11.0.1', instanceId: 'again' },
              }
            : { kind: 'gone' as const },
      ]),
    );
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

describe('Orchestrator state machine', () => {
  let backend: MapBackend;
  let store: SandboxStore;
  let orch: Orchestrator;
  const stopped: string[] = [];

  const make = () =>
    new Orchestrator({
      store,
      backend,
      templates: {
        resolveLaunchable: async (id) => {
          if (id !== 'base') throw new DomainError(ErrorKind.NotFound, `template ${id} not found`);
          return {
            templateId: 'tpl-1',
            alias: 'base',
            record: {},
            resources: { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 },
            envdVersion: '0.5.15',
            defaultUser: 'user',
          };
        },
      },
      newId: () => randomUUID(),
      defaultTimeoutSecs: 15,
      autoEvictIntervalMs: 10,
      autoResumeMinTimeoutSecs: 300,
      transitionWaitMs: 200,
      logger: createLogger('json', 'info', silent),
      onInstanceStopped: (i) => stopped.push(i),
    });

  beforeEach(() => {
    backend = new MapBackend();
    store = new SandboxStore(openStateDb(':memory:', orchestratorMigrations));
    orch = make();
  });

  it('names a sandbox it is taking over from the shared repository until it holds it (the heartbeat roster)', async () => {
    const id = randomUUID();
    let release!: () => void;
    const fetched = new Promise<void>((r) => (release = r));
    const looking: string[][] = [];
    let claimed!: () => void;
    const swapped = new Promise<void>((r) => (claimed = r));
    const listed = () => orch.listable().map((r) => `${r.id}:${r.state}`);
    backend.adoptShared = async (sandboxId, hooks) => {
      looking.push(orch.takingOver());
      if (sandboxId !== id) return undefined;
      hooks?.found?.();
      await fetched;
      const r = await orch.create(input());
      // A record of its own: what the shared copy's record would be, paused on this node.
      const taken = { ...orch.find(r.id)!, id, state: 'paused' as const };
      await orch.kill(r.id);
      // The claim is this node's from here on: it lists the sandbox before its record is ready.
      hooks?.claimed?.(taken);
      await swapped;
      return taken;
    };
    const adopting = orch.adopt(id);
    await new Promise((r) => setTimeout(r, 10));
    expect(orch.takingOver()).toEqual([id]);
    expect(orch.find(id)).toBeUndefined();
    expect(listed()).toEqual([]);
    release();
    for (let i = 0; i < 100 && listed().length === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(listed()).toEqual([`${id}:paused`]);
    expect(orch.find(id)).toBeUndefined();
    claimed();
    expect((await adopting)?.id).toBe(id);
    expect(orch.takingOver()).toEqual([]);
    expect(orch.find(id)?.state).toBe('paused');
    expect(listed()).toEqual([`${id}:paused`]);
    // A miss is not named either once the repository said it has nothing.
    expect(await orch.adopt(randomUUID())).toBeUndefined();
    expect(orch.takingOver()).toEqual([]);
    // Nor while the repository is being asked, before it has found a copy.
    expect(looking).toEqual([[], []]);
  });

  it('does not name a sandbox while it only looks for it in the shared repository: it may run on another node', async () => {
    // A roster naming it would move the binding of the node that runs it here (the scheduler binds a sandbox to
    // the node that reported it last), and its requests would reach this node, which answers 404.
    const id = randomUUID();
    let answer!: () => void;
    const asked = new Promise<void>((r) => (answer = r));
    backend.adoptShared = async () => {
      await asked;
      throw new DomainError(ErrorKind.NotFound, `sandbox ${id} is lost: it was running on node node-b`);
    };
    const looking = orch.adopt(id).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 10));
    expect(orch.takingOver()).toEqual([]);
    answer();
    expect(await looking).toBeInstanceOf(DomainError);
    expect(orch.takingOver()).toEqual([]);
  });

  it('drain: refuses new sandboxes and resumes with 503, pauses the running ones and hands every one over', async () => {
    const running = await orch.create(input());
    const paused = await orch.create(input());
    await orch.pause(paused.id);
    const first = orch.drain('node-a');
    const again = orch.drain('node-a');
    expect(orch.drainProgress()).toMatchObject({ node: 'node-a', done: false });
    await Promise.all([first, again]);
    expect(backend.handedOver.sort()).toEqual([running.id, paused.id].sort());
    expect(orch.drainProgress()).toMatchObject({
      handedOver: 2,
      failed: 0,
      running: 0,
      paused: 0,
      done: true,
    });
    expect(orch.find(running.id)).toBeUndefined();
    const forkRefused = (await orch.fork(running.id, { count: 1 }).catch((e: unknown) => e)) as DomainError;
    expect(forkRefused.kind).toBe(ErrorKind.Unavailable);
    const refused = (await orch.create(input()).catch((e: unknown) => e)) as DomainError;
    expect(refused.kind).toBe(ErrorKind.Unavailable);
    expect(refused.message).toBe(
      'node node-a is draining: it takes no new or resumed sandboxes (they start on another node)',
    );
    stopped.length = 0; // the pauses above stopped instances; the next tests count their own
  });

  it('drain: a sandbox counts as handed over, and the drain as done, only once a roster without it was reported', async () => {
    const running = await orch.create(input());
    const paused = await orch.create(input());
    await orch.pause(paused.id);
    const rosters: string[][] = [];
    let release!: () => void;
    const reported = new Promise<void>((res) => (release = res));
    const drained = orch.drain('node-a', {
      reportRoster: async () => {
        // What the heartbeat reporter reads for its roster.
        rosters.push(orch.all().map((r) => r.id));
        await reported;
      },
    });
    await new Promise((res) => setTimeout(res, 20));
    expect(backend.handedOver.sort()).toEqual([running.id, paused.id].sort());
    expect(orch.drainProgress()).toMatchObject({ handedOver: 0, running: 0, paused: 0, done: false });
    release();
    await drained;
    expect(orch.drainProgress()).toMatchObject({ handedOver: 2, failed: 0, done: true });
    expect(rosters.length).toBeGreaterThan(0);
    // The last roster reported before `done` names neither.
    expect(rosters.at(-1)).toEqual([]);
    stopped.length = 0;
  });

  it('drain: a sandbox mounting volumes only this node has is paused (with its memory) and kept, not handed over', async () => {
    const mounts = async () => [{ volumeId: randomUUID(), name: 'data', path: '/data' }];
    const running = await orch.create(input({ resolveVolumeMounts: mounts }));
    const paused = await orch.create(input({ resolveVolumeMounts: mounts }));
    const plain = await orch.create(input());
    await orch.pause(paused.id);
    await orch.drain('node-a');
    expect(backend.handedOver).toEqual([plain.id]);
    expect(orch.drainProgress()).toMatchObject({
      handedOver: 1,
      failed: 0,
      kept: 2,
      running: 0,
      paused: 2,
      done: true,
    });
    const stored = new Map(store.loadAll().records.map((r) => [r.id, r]));
    for (const id of [running.id, paused.id]) {
      expect(orch.find(id)).toMatchObject({ state: 'paused', volumeMounts: [{ name: 'data' }] });
      expect(stored.get(id)).toMatchObject({ state: 'paused' });
    }
    expect(stored.has(plain.id)).toBe(false);
    expect(orch.find(running.id)!.paused).toMatchObject({ kind: 'memory' });
    stopped.length = 0;
  });

  it('creates a running sandbox with its expiry and counts it', async () => {
    const before = Date.now();
    const r = await orch.create(input({ timeoutSecs: 60 }));
    expect(r.state).toBe('running');
    expect(Date.parse(r.expiresAt!)).toBeGreaterThanOrEqual(before + 60_000);
    expect(orch.counters()).toMatchObject({
      sandboxCount: 1,
      allocatedCPU: 2,
      allocatedMemoryBytes: 512 * 1024 * 1024,
      createSuccesses: 1,
    });
  });

  it('rolls back a failed create and counts the failure', async () => {
    backend.failNext = 'start';
    await expect(orch.create(input())).rejects.toThrow('start failed on purpose');
    expect(orch.all()).toHaveLength(0);
    expect(store.loadAll().records).toHaveLength(0);
    expect(orch.counters().createFails).toBe(1);
  });

  it('rejects unknown templates before creating anything', async () => {
    await expect(orch.create(input({ templateId: 'nope' }))).rejects.toMatchObject({ kind: 'not_found' });
    expect(orch.counters().createFails).toBe(0);
  });

  it('pauses idempotently, refuses pause while creating, and resumes through connect', async () => {
    const r = await orch.create(input());
    await orch.pause(r.id);
    await orch.pause(r.id);
    expect(orch.get(r.id).state).toBe('paused');
    expect(stopped).toHaveLength(1);
    expect(orch.counters()).toMatchObject({ sandboxPausedCount: 1, pausedAllocatedCPU: 2, sandboxCount: 0 });
    const c = await orch.connect(r.id, 30);
    expect(c.resumed).toBe(true);
    expect(orch.get(r.id).state).toBe('running');
    const again = await orch.connect(r.id, 30);
    expect(again.resumed).toBe(false);

    let open!: () => void;
    backend.gate = new Promise((res) => (open = res));
    const creating = orch.create(input());
    await new Promise((res) => setTimeout(res, 5));
    const pending = orch.all().find((x) => x.state === 'creating')!;
    await expect(orch.pause(pending.id)).rejects.toMatchObject({
      kind: 'conflict',
      message: 'sandbox cannot be paused from creating state',
    });
    open();
    backend.gate = undefined;
    await creating;
  });

  it('auto-resumes only a sandbox that enabled it and kept its memory', async () => {
    const off = await orch.create(input());
    const on = await orch.create(input({ autoResume: true }));
    const diskOnly = await orch.create(input({ autoResume: true }));
    for (const r of [off, on]) await orch.pause(r.id);
    await orch.pause(diskOnly.id, { memory: false });
    await expect(orch.autoResume(off.id)).rejects.toMatchObject({ kind: 'invalid_state' });
    await expect(orch.autoResume(diskOnly.id)).rejects.toMatchObject({
      kind: 'invalid_state',
      message: `sandbox ${diskOnly.id} was paused without its memory; resume it with connect`,
    });
    expect(orch.get(diskOnly.id).state).toBe('paused');
    expect((await orch.autoResume(on.id)).state).toBe('running');
    expect((await orch.connect(diskOnly.id, 30)).resumed).toBe(true);
  });

  it('the deprecated resume passes memory on and replaces the timeout action once resumed', async () => {
    const r = await orch.create(input());
    await orch.pause(r.id);
    await orch.resume(r.id, 30, { memory: false, onTimeout: 'kill' });
    expect(backend.resumedWithMemory).toEqual([false]);
    expect(orch.get(r.id)).toMatchObject({ state: 'running', onTimeout: 'kill' });
    expect(store.loadAll().records.find((x) => x.id === r.id)?.onTimeout).toBe('kill');
    // A failed resume changes nothing.
    await orch.pause(r.id);
    backend.failNext = 'resume';
    await expect(orch.resume(r.id, 30, { onTimeout: 'pause' })).rejects.toThrow();
    expect(orch.get(r.id)).toMatchObject({ state: 'paused', onTimeout: 'kill' });
  });

  it('keeps a sandbox running when its pause fails', async () => {
    const r = await orch.create(input());
    backend.failNext = 'pause';
    await expect(orch.pause(r.id)).rejects.toThrow();
    expect(orch.get(r.id).state).toBe('running');
  });

  it('with requireHealthyGuest or memory: false, refuses (503) to pause a sandbox whose envd does not answer', async () => {
    const r = await orch.create(input());
    const instance = r.runtime!.instanceId;
    const cutBefore = stopped.length;
    backend.guestHealthy = false;
    await expect(orch.pause(r.id, { requireHealthyGuest: true })).rejects.toMatchObject({
      kind: 'unavailable',
      expose: true,
      message: expect.stringContaining('requireHealthyGuest'),
    });
    // Nothing changed: still running, still served (the proxy was not told to cut it), not paused on the host.
    expect(orch.get(r.id)).toMatchObject({ state: 'running', runtime: { instanceId: instance } });
    expect(orch.get(r.id).paused).toBeUndefined();
    expect(stopped.length).toBe(cutBefore);
    expect(backend.live.has(r.id)).toBe(true);
    // A filesystem-only pause is refused the same way without the field (E2B: always checked).
    await expect(orch.pause(r.id, { memory: false })).rejects.toMatchObject({
      kind: 'unavailable',
      expose: true,
      message: expect.stringContaining('memory: false'),
    });
    expect(orch.get(r.id).state).toBe('running');
    // Without either the same guest is paused; a healthy one is paused with it.
    await orch.pause(r.id);
    expect(orch.get(r.id).state).toBe('paused');
    const healthy = await orch.create(input());
    backend.guestHealthy = true;
    await orch.pause(healthy.id, { requireHealthyGuest: true });
    expect(orch.get(healthy.id).state).toBe('paused');
  });

  it('connect never shortens, timeout may shorten', async () => {
    const r = await orch.create(input({ timeoutSecs: 600 }));
    const end = r.expiresAt;
    await orch.connect(r.id, 10);
    expect(orch.get(r.id).expiresAt).toBe(end);
    await orch.setTimeout(r.id, 10);
    expect(Date.parse(orch.get(r.id).expiresAt!)).toBeLessThan(Date.parse(end!));
  });

  it('kills and forgets; a second kill is a 404', async () => {
    const r = await orch.create(input());
    await orch.kill(r.id);
    expect(orch.find(r.id)).toBeUndefined();
    expect(backend.live.size).toBe(0);
    await expect(orch.kill(r.id)).rejects.toMatchObject({ kind: 'not_found' });
  });

  it('applies the timeout action on expiry: pause or kill', async () => {
    const p = await orch.create(input({ timeoutSecs: 0 }));
    const k = await orch.create(input({ timeoutSecs: 0, onTimeout: 'kill' }));
    const keep = await orch.create(input({ timeoutSecs: 600 }));
    await orch.evictExpired();
    expect(orch.get(p.id).state).toBe('paused');
    expect(orch.find(k.id)).toBeUndefined();
    expect(orch.get(keep.id).state).toBe('running');
    await orch.evictExpired();
    expect(orch.get(p.id).state).toBe('paused');
  });

  it('waits for an operation in progress, and gives up with a conflict after the bound', async () => {
    const r = await orch.create(input());
    let open!: () => void;
    backend.gate = new Promise((res) => (open = res));
    const pausing = orch.pause(r.id);
    await expect(orch.setTimeout(r.id, 5)).rejects.toMatchObject({ kind: 'conflict' });
    open();
    await pausing;
    backend.gate = undefined;
    expect(orch.get(r.id).state).toBe('paused');
  });

  it('restores paused and surviving sandboxes after a restart and drops the rest', async () => {
    const paused = await orch.create(input());
    await orch.pause(paused.id);
    const alive = await orch.create(input());
    const lost = await orch.create(input());
    backend.live.delete(lost.id);
    const restarted = make();
    await restarted.init();
    expect(restarted.get(paused.id).state).toBe('paused');
    expect(restarted.get(alive.id).state).toBe('running');
    expect(restarted.find(lost.id)).toBeUndefined();
    expect(
      store
        .loadAll()
        .records.map((x) => x.id)
        .sort(),
    ).toEqual([paused.id, alive.id].sort());
  });

  it('forks into independent children and reports per-child failures', async () => {
    const src = await orch.create(input({ timeoutSecs: 600, metadata: { a: 'b' } }));
    const end = src.expiresAt;
    backend.failSecondChild = true;
    const results = await orch.fork(src.id, { count: 3, timeoutSecs: 30 });
    expect(results.map((r) => r.ok)).toEqual([true, false, true]);
    const kids = results.flatMap((r) => (r.ok ? [r.record] : []));
    expect(new Set(kids.map((k) => k.id)).size).toBe(2);
    for (const k of kids) {
      expect(k.id).not.toBe(src.id);
      expect(k.metadata).toEqual({ a: 'b' });
      expect(k.state).toBe('running');
      expect(Date.parse(k.expiresAt!)).toBeLessThan(Date.parse(end!));
    }
    expect(orch.get(src.id)).toMatchObject({ state: 'running', expiresAt: end });
    expect(orch.counters()).toMatchObject({ sandboxCount: 3, createSuccesses: 3, createFails: 1 });
    await orch.pause(src.id);
    await expect(orch.fork(src.id, { count: 1 })).rejects.toMatchObject({ kind: 'conflict' });
  });

  it('a snapshot launch without network settings gets the recorded ones; a create that brings some replaces them whole', async () => {
    const recorded: SandboxNetworkSettings = {
      allowPublicTraffic: false,
      httpsPorts: [8443],
      allowOut: ['api.example.com'],
      denyOut: ['0.0.0.0/0'],
      allowInternetAccess: null,
      rules: { 'api.example.com': [{ transform: { headers: { Authorization: 'Bearer x' } } }] },
      egressProxy: { address: 'socks.example.com:1080', host: 'socks.example.com', port: 1080 },
    };
    const snapshot = {
      templateId: 'snap-1',
      record: {},
      resources: { cpuCount: 1, memoryMB: 512, diskSizeMB: 1024 },
      envdVersion: '0.5.15',
      defaultUser: 'user',
      network: recorded,
    };
    const { templateId: _t, ...rest } = input();
    const inherited = await orch.createFrom(snapshot, { ...rest, inheritNetwork: true });
    expect(inherited.network).toEqual(recorded);
    // A copy: a later update of the launched sandbox's record never reaches what the template holds.
    expect(inherited.network).not.toBe(recorded);
    expect(backend.startedWith.at(-1)).toEqual({
      allowOut: ['api.example.com'],
      denyOut: ['0.0.0.0/0'],
      allowInternetAccess: null,
      rules: recorded.rules,
      egressProxy: recorded.egressProxy,
    });
    const own = await orch.createFrom(snapshot, {
      ...rest,
      policy: { allowOut: ['other.example.com'], denyOut: [], allowInternetAccess: false },
    });
    expect(own.network).toEqual({
      allowPublicTraffic: true,
      allowOut: ['other.example.com'],
      denyOut: [],
      allowInternetAccess: false,
    });
    expect(backend.startedWith.at(-1)).toEqual({
      allowOut: ['other.example.com'],
      denyOut: [],
      allowInternetAccess: false,
    });
    // allow_internet_access without `network`: false closes what the recorded allow-list does not name; true
    // (what SDKs before 2.51 send on every create) opens nothing the snapshot closed.
    const closed = await orch.createFrom(snapshot, {
      ...rest,
      policy: { allowOut: [], denyOut: [], allowInternetAccess: false },
      inheritNetwork: true,
    });
    expect(closed.network).toEqual({ ...recorded, allowInternetAccess: false });
    const opened = await orch.createFrom(
      { ...snapshot, network: { ...recorded, allowInternetAccess: false } },
      { ...rest, policy: { allowOut: [], denyOut: [], allowInternetAccess: true }, inheritNetwork: true },
    );
    expect(opened.network.allowInternetAccess).toBe(false);
    // A template (or a snapshot taken before snapshots recorded their network) launches as the create says.
    const { network: _n, ...old } = snapshot;
    expect((await orch.createFrom(old, { ...rest, inheritNetwork: true })).network).toEqual({
      allowPublicTraffic: true,
      allowOut: [],
      denyOut: [],
      allowInternetAccess: null,
    });
  });

  it('snapshots a running sandbox and leaves it running', async () => {
    const r = await orch.create(input());
    await orch.snapshot(r.id, { recordId: 'snap-1' });
    expect(backend.captured).toEqual([`${r.id}->snap-1`]);
    expect(orch.get(r.id).state).toBe('running');
    backend.failNext = 'capture';
    await expect(orch.snapshot(r.id, { recordId: 'snap-2' })).rejects.toThrow('capture failed');
    expect(orch.get(r.id).state).toBe('running');
    await orch.pause(r.id);
    await expect(orch.snapshot(r.id, { recordId: 'snap-3' })).rejects.toMatchObject({
      kind: 'invalid_state',
    });
    expect(backend.published).toEqual(['snap-1']);
  });

  it('releases the sandbox once captured: it runs and can be paused while the snapshot publishes', async () => {
    const r = await orch.create(input());
    let open!: () => void;
    backend.publishGate = new Promise((res) => (open = res));
    const snapshot = orch.snapshot(r.id, { recordId: 'snap-1' });
    await new Promise((res) => setTimeout(res, 20));
    expect(backend.captured).toEqual([`${r.id}->snap-1`]);
    expect(orch.get(r.id).state).toBe('running');
    await orch.pause(r.id);
    expect(backend.published).toEqual([]);
    open();
    const timings = await snapshot;
    expect(backend.published).toEqual(['snap-1']);
    expect(timings.captureMs).toBeGreaterThanOrEqual(0);
    expect(timings.publishMs).toBeGreaterThanOrEqual(15);
  });

  it('fails a snapshot whose publish fails, leaving the sandbox running', async () => {
    const r = await orch.create(input());
    backend.failNext = 'publish';
    await expect(orch.snapshot(r.id, { recordId: 'snap-1' })).rejects.toThrow('publish failed');
    expect(orch.get(r.id).state).toBe('running');
    expect(backend.published).toEqual([]);
  });

  it('waits at shutdown for snapshots still publishing', async () => {
    const r = await orch.create(input());
    let open!: () => void;
    backend.publishGate = new Promise((res) => (open = res));
    const snapshot = orch.snapshot(r.id, { recordId: 'snap-1' });
    await new Promise((res) => setTimeout(res, 20));
    let shutDown = false;
    const shutdown = orch.shutdown().then(() => (shutDown = true));
    await new Promise((res) => setTimeout(res, 20));
    expect(orch.get(r.id).state).toBe('paused');
    expect(shutDown).toBe(false);
    open();
    await shutdown;
    await snapshot;
    expect(backend.published).toEqual(['snap-1']);
  });

  it('after a pause, maintains that sandbox alone (its release need not wait for the next tick)', async () => {
    const a = await orch.create(input());
    const b = await orch.create(input());
    await orch.pause(a.id);
    await orch.pause(b.id);
    await new Promise((res) => setTimeout(res, 10));
    expect(backend.maintained).toEqual([[a.id], [b.id]]);
  });

  it('pauses everything on graceful shutdown and refuses new work', async () => {
    const a = await orch.create(input());
    const b = await orch.create(input());
    await orch.shutdown();
    expect(orch.get(a.id).state).toBe('paused');
    expect(orch.get(b.id).state).toBe('paused');
    await expect(orch.create(input())).rejects.toMatchObject({ kind: 'shutting_down' });
  });
});
