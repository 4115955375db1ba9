import { describe, expect, it } from 'vitest';
import { httpErrorAnswer } from '@aenv/protocol';
import { Writable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { openStateDb } from '../state/db.js';
import { createLogger } from '../util/log.js';
import { SandboxStore, orchestratorMigrations } from './store.js';
import { Orchestrator, type CreateSandboxInput, type LifecycleEvent } from './orchestrator.js';
import type { RecoveryOutcome, SandboxBackend, StartResult } from './backend.js';
import type { PausedState, SandboxRecord } from './types.js';
import { PausedQuota, PausedQuotaError, expiredPaused, pausedBytesInUse } from './paused-quota.js';

const silent = new Writable({ write: (_c, _e, cb) => cb() });
const MIB = 1024 * 1024;

/**
 * Sandboxes as map entries; a pause "writes" `sizeOf(id)` bytes of artifacts, hands them to `admit` before it
 * completes them, and removes them when admit throws (what the container backend does on disk).
 */
class SizedBackend implements SandboxBackend {
  live = new Set<string>();
  artifacts = new Map<string, number>();
  sizes = new Map<string, number>();
  destroyed: string[] = [];
  private n = 0;
  sizeOf = (id: string) => this.sizes.get(id) ?? 3 * MIB;
  private started(r: SandboxRecord): StartResult {
    this.live.add(r.id);
    return {
      binding: { slotIndex: ++this.n, hostInteractionIp: '10.11.0.1', instanceId: `i${this.n}` },
      backend: {},
    };
  }
  async start(r: SandboxRecord) {
    return this.started(r);
  }
  async destroy(r: SandboxRecord) {
    this.destroyed.push(r.id);
    this.live.delete(r.id);
    this.artifacts.delete(r.id);
  }
  async pause(r: SandboxRecord, opts: { memory: boolean; admit?: (bytes: number) => void }) {
    const bytes = this.sizeOf(r.id);
    this.artifacts.set(r.id, bytes);
    try {
      opts.admit?.(bytes);
    } catch (e) {
      this.artifacts.delete(r.id);
      throw e;
    }
    this.live.delete(r.id);
    const paused: PausedState = {
      kind: opts.memory ? 'memory' : 'filesystem',
      pausedAt: new Date().toISOString(),
      artifactDir: `/x/${r.id}`,
      bytes,
    };
    return paused;
  }
  async resume(r: SandboxRecord) {
    this.artifacts.delete(r.id);
    return this.started(r);
  }
  async guestAnswers() {
    return true;
  }
  async applyPolicy() {}
  async capture(): Promise<never> {
    throw new Error('not used');
  }
  async fork(): Promise<never> {
    throw new Error('not used');
  }
  async maintain() {}
  /** What the disk says at startup (the container backend reads the `complete` marker or measures). */
  onDisk = new Map<string, PausedState>();
  async recover(records: readonly SandboxRecord[]) {
    return new Map<string, RecoveryOutcome>(
      records.map((r) => {
        if (r.state !== 'paused') return [r.id, { kind: 'gone' }];
        const disk = this.onDisk.get(r.id);
        return [
          r.id,
          disk && r.paused?.bytes === undefined ? { kind: 'paused', paused: disk } : { kind: 'paused' },
        ];
      }),
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

function node(opts: { quotaMiB: number; retentionMs?: number; dbPath?: string; backend?: SizedBackend }) {
  const backend = opts.backend ?? new SizedBackend();
  const db = openStateDb(opts.dbPath ?? ':memory:', orchestratorMigrations);
  const store = new SandboxStore(db);
  const events: LifecycleEvent[] = [];
  const orch = new Orchestrator({
    store,
    backend,
    templates: {
      resolveLaunchable: async () => ({
        templateId: 'tpl-1',
        record: {},
        resources: { cpuCount: 1, memoryMB: 256, diskSizeMB: 1024 },
        envdVersion: '0.5.15',
        defaultUser: 'user',
      }),
    },
    newId: () => randomUUID(),
    defaultTimeoutSecs: 300,
    autoEvictIntervalMs: 10,
    autoResumeMinTimeoutSecs: 300,
    transitionWaitMs: 500,
    pausedQuotaBytes: opts.quotaMiB * MIB,
    ...(opts.retentionMs !== undefined ? { pausedRetentionMs: opts.retentionMs } : {}),
    logger: createLogger('json', 'info', silent),
    onLifecycle: (e) => events.push(e),
  });
  return { orch, backend, store, db, events };
}

describe('paused-sandbox quota', () => {
  it('refuses the pause past the quota with 507 naming the key; nothing of it stays and the sandbox runs', async () => {
    const { orch, backend, events } = node({ quotaMiB: 8 });
    await orch.init();
    const [a, b, c] = await Promise.all([1, 2, 3].map(() => orch.create(input())));
    await orch.pause(a!.id);
    await orch.pause(b!.id);
    expect(orch.pausedBytes()).toBe(6 * MIB);
    const err = await orch.pause(c!.id).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PausedQuotaError);
    // The API answers it with 507 and shows the message.
    expect(httpErrorAnswer((err as PausedQuotaError).kind)).toEqual({ status: 507, code: 507 });
    expect((err as PausedQuotaError).expose).toBe(true);
    expect((err as PausedQuotaError).message).toContain('orchestrator.paused_quota_mb');
    expect(orch.get(c!.id).state).toBe('running');
    expect(orch.get(c!.id).paused).toBeUndefined();
    expect(backend.artifacts.has(c!.id)).toBe(false);
    expect(backend.live.has(c!.id)).toBe(true);
    expect(orch.pausedBytes()).toBe(6 * MIB);
    expect(events.filter((e) => e.event === 'pause_failed').map((e) => e.sandboxId)).toEqual([c!.id]);

    // A deleted paused sandbox frees its bytes: the same pause now fits.
    await orch.kill(a!.id);
    await orch.pause(c!.id);
    expect(orch.get(c!.id).state).toBe('paused');
    expect(orch.pausedBytes()).toBe(6 * MIB);
    // A resume frees them too.
    await orch.connect(b!.id, 60);
    expect(orch.pausedBytes()).toBe(3 * MIB);
  });

  it('refuses up front (nothing frozen) when the quota is already used up', async () => {
    const { orch, backend } = node({ quotaMiB: 3 });
    await orch.init();
    const [a, b] = await Promise.all([1, 2].map(() => orch.create(input())));
    await orch.pause(a!.id);
    let asked = false;
    backend.sizeOf = (id) => {
      if (id === b!.id) asked = true;
      return 3 * MIB;
    };
    await expect(orch.pause(b!.id)).rejects.toThrow(/already hold 3\.0 MiB of the 3\.0 MiB/);
    expect(asked).toBe(false);
  });

  it('lets two concurrent pauses not both take the last room', async () => {
    const { orch } = node({ quotaMiB: 5 });
    await orch.init();
    const [a, b] = await Promise.all([1, 2].map(() => orch.create(input())));
    const results = await Promise.allSettled([orch.pause(a!.id), orch.pause(b!.id)]);
    expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
    expect(orch.pausedBytes()).toBe(3 * MIB);
  });

  it('a timeout pause the quota refuses keeps the sandbox running, and pauses it once there is room', async () => {
    const { orch, backend } = node({ quotaMiB: 4 });
    await orch.init();
    const holder = await orch.create(input());
    await orch.pause(holder.id);
    const timed = await orch.create(input({ timeoutSecs: 0 }));
    let attempts = 0;
    const size = backend.sizeOf;
    backend.sizeOf = (id) => {
      if (id === timed.id) attempts++;
      return size(id);
    };
    await orch.evictExpired();
    await orch.evictExpired();
    await orch.evictExpired();
    expect(orch.get(timed.id).state).toBe('running');
    // Checked against the room it needs: one checkpoint, not one per tick.
    expect(attempts).toBe(1);
    await orch.kill(holder.id);
    await orch.evictExpired();
    expect(orch.get(timed.id).state).toBe('paused');
  });

  it('never refuses the shutdown pause (it counts it)', async () => {
    const { orch } = node({ quotaMiB: 3 });
    await orch.init();
    const [a, b] = await Promise.all([1, 2].map(() => orch.create(input())));
    await orch.pause(a!.id);
    await orch.shutdown();
    expect(orch.get(b!.id).state).toBe('paused');
    expect(orch.pausedBytes()).toBe(6 * MIB);
  });

  it('keeps the count across a restart: from the records, and from the disk where a record lacks it', async () => {
    const dbPath = `/tmp/aenv-quota-${randomUUID()}.db`;
    const backend = new SizedBackend();
    const first = node({ quotaMiB: 8, dbPath, backend });
    await first.orch.init();
    const [a, b, c] = await Promise.all([1, 2, 3].map(() => first.orch.create(input())));
    await first.orch.pause(a!.id);
    await first.orch.pause(b!.id);
    // A record of an older version (no bytes): the disk says 1 MiB.
    const older = first.orch.get(b!.id);
    delete older.paused!.bytes;
    first.store.save(older);
    backend.onDisk.set(b!.id, { ...older.paused!, bytes: 1 * MIB });
    first.db.close();

    const second = node({ quotaMiB: 8, dbPath, backend });
    await second.orch.init();
    expect(second.orch.pausedBytes()).toBe(4 * MIB);
    expect(second.orch.find(c!.id)).toBeUndefined(); // running in the first process: gone
    const d = await second.orch.create(input());
    backend.sizes.set(d.id, 5 * MIB);
    await expect(second.orch.pause(d.id)).rejects.toBeInstanceOf(PausedQuotaError);
    backend.sizes.set(d.id, 4 * MIB);
    await second.orch.pause(d.id);
    expect(second.orch.pausedBytes()).toBe(8 * MIB);
    second.db.close();
  });
});

describe('paused-sandbox retention', () => {
  it('deletes sandboxes paused longer than the retention the way DELETE does, with an event', async () => {
    const { orch, backend, events, store } = node({ quotaMiB: 100, retentionMs: 60_000 });
    await orch.init();
    const [old, recent, running] = await Promise.all([1, 2, 3].map(() => orch.create(input())));
    await orch.pause(old!.id);
    await orch.pause(recent!.id);
    orch.get(old!.id).paused!.pausedAt = new Date(Date.now() - 61_000).toISOString();
    await orch.expirePaused();
    expect(orch.find(old!.id)).toBeUndefined();
    expect(store.loadAll().records.map((r) => r.id)).not.toContain(old!.id);
    expect(backend.destroyed).toEqual([old!.id]);
    expect(backend.artifacts.has(old!.id)).toBe(false);
    expect(orch.get(recent!.id).state).toBe('paused');
    expect(orch.get(running!.id).state).toBe('running');
    expect(events.filter((e) => e.sandboxId === old!.id).map((e) => e.event)).toEqual([
      'created',
      'paused',
      'expired',
      'killed',
    ]);
    expect(orch.pausedBytes()).toBe(3 * MIB);
  });

  it('expires them from the eviction ticks (which also maintain paused sandboxes)', async () => {
    const { orch } = node({ quotaMiB: 100, retentionMs: 60_000 });
    await orch.init();
    const a = await orch.create(input());
    await orch.pause(a.id);
    orch.get(a.id).paused!.pausedAt = new Date(Date.now() - 61_000).toISOString();
    orch.startEviction();
    try {
      for (let i = 0; i < 200 && orch.find(a.id); i++) await new Promise((r) => setTimeout(r, 10));
      expect(orch.find(a.id)).toBeUndefined();
    } finally {
      await orch.shutdown();
    }
  });

  it('keeps paused sandboxes forever with retention 0 (the default)', async () => {
    const { orch } = node({ quotaMiB: 100 });
    await orch.init();
    const a = await orch.create(input());
    await orch.pause(a.id);
    orch.get(a.id).paused!.pausedAt = new Date(0).toISOString();
    await orch.expirePaused();
    expect(orch.get(a.id).state).toBe('paused');
  });
});

describe('paused-quota accounting', () => {
  const rec = (state: SandboxRecord['state'], bytes?: number, pausedAt = '2024-01-01T00:00:00.000Z') =>
    ({
      id: randomUUID(),
      state,
      ...(state === 'paused'
        ? {
            paused: {
              kind: 'memory',
              pausedAt,
              artifactDir: '/x',
              ...(bytes !== undefined ? { bytes } : {}),
            },
          }
        : {}),
    }) as unknown as SandboxRecord;

  it('counts only paused sandboxes, and pauses in flight', () => {
    const records = [rec('paused', 10), rec('running'), rec('paused', 5), rec('pausing'), rec('paused')];
    expect(pausedBytesInUse(records)).toBe(15);
    const q = new PausedQuota(20);
    q.admit('x', 5, records);
    expect(q.used(records)).toBe(20);
    expect(() => q.admit('y', 1, records)).toThrow(PausedQuotaError);
    expect(() => q.checkRoom('y', records)).toThrow(PausedQuotaError);
    q.release('x');
    expect(q.fits(5, records)).toBe(true);
    expect(q.fits(6, records)).toBe(false);
    expect(() => new PausedQuota(0).admit('z', 1e15, records)).not.toThrow();
  });

  it('lists expired paused sandboxes oldest first', () => {
    const now = Date.parse('2024-01-02T00:00:00.000Z');
    const a = rec('paused', 1, '2024-01-01T12:00:00.000Z');
    const b = rec('paused', 1, '2024-01-01T00:00:00.000Z');
    const c = rec('paused', 1, '2024-01-01T23:59:00.000Z');
    expect(expiredPaused([a, b, c, rec('running')], 3600_000, now)).toEqual([b, a]);
    expect(expiredPaused([a, b, c], 0, now)).toEqual([]);
  });
});
